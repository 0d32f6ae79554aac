// Package oracle is a reference model of docs/design.md §8 "Billing schedule
// semantics", written from those rules alone so that a test can hold the real
// billing core against it. It shares no code with internal/billing and knows
// nothing of DynamoDB, Stripe or the jobs' internals: only which period must
// be charged on which day and for how much, which are skipped, waived,
// cancelled or stale, which receipts exist, and when reminders go out.
//
// A Sub is driven step by step, as the days pass: operations at a day T
// (before that day's jobs), then Remind(T), then Collect(T), whose due
// charges the caller attempts and reports with Attempted; webhook outcomes
// (ACH settlements, refunds) arrive with Settled and Refunded.
package oracle

import (
	"errors"
	"slices"
)

// Status is a period's state, as §8 names them.
type Status string

const (
	Scheduled     Status = "SCHEDULED"
	Paused        Status = "PAUSED"
	ACHSent       Status = "ACHSENT"
	Completed     Status = "COMPLETED"
	Error         Status = "ERROR"
	Waived        Status = "WAIVED"
	Cancelled     Status = "CANCELLED"
	PausedSkipped Status = "PAUSED_SKIPPED"
	Refunded      Status = "REFUNDED"
	Stale         Status = "STALE"
)

// Ended reports a status a period ends in (§8: one successful charge, or
// WAIVED, PAUSED_SKIPPED, CANCELLED, STALE).
func (s Status) Ended() bool {
	switch s {
	case Completed, Refunded, Waived, Cancelled, PausedSkipped, Stale:
		return true
	}
	return false
}

// Outcome is what Stripe did with one charge.
type Outcome int

const (
	Succeeded  Outcome = iota
	Declined           // a decline: the period is ERROR
	Processing         // a bank debit: ACHSENT until its webhook
	// HardDeclined: a decline §8 says retrying cannot fix (lost or stolen
	// card, closed account, …): the period is ERROR with no automatic
	// retries; a pay now or a payment method change may still collect it,
	// and it is STALE on time as any unpaid period.
	HardDeclined
)

// Config is the part of the billing configuration the rules name.
type Config struct {
	ReminderDays int   // BILLING_REMINDER_DAYS
	RetryDays    []int // BILLING_RETRY_DAYS, days after the charge date
	StaleDays    int   // BILLING_STALE_DAYS
}

// ErrRefused is an operation the rules do not allow in the current state.
var ErrRefused = errors.New("oracle: operation not allowed")

// Attempt is one charge: one PaymentIntent.
type Attempt struct {
	Day     Date
	Amount  int64
	Outcome Outcome
	PI      string
	// Unresolved: Stripe acted but the service did not learn the outcome;
	// the next collection resolves it before anything else.
	Unresolved bool
	// Cancelled: a declined attempt's PaymentIntent the rules cancelled
	// (customer.go); Paid: the customer paid it.
	Cancelled, Paid bool
	// Plan is the plan (SKU) the attempt charged for (plan.go).
	Plan string
}

// Period is one scheduled date of the rule and its fate.
type Period struct {
	Scheduled Date
	Charge    Date // the scheduled date, or where an operator moved it
	Status    Status
	// Rule is the rule the period was scheduled under: one term of it is
	// how far a rule change keeps the next period from it.
	Rule Rule
	// Trail is every status the period went through, in order, without
	// repeats.
	Trail    []Status
	Attempts []Attempt
	// NotRetried: its latest decline was a hard one (no retry days).
	NotRetried bool
	// DueAgain: a payment method change made this ERROR period due at the
	// next collection run (process RETRY), hard-declined or not.
	DueAgain bool
}

// Charged reports a period with a successful charge or one in flight: what
// a rule change keeps and anchors on.
func (p *Period) Charged() bool {
	return p.Status == Completed || p.Status == Refunded || p.Status == ACHSent || p.unresolved() != nil
}

func (p *Period) unresolved() *Attempt {
	for i := range p.Attempts {
		if p.Attempts[i].Unresolved {
			return &p.Attempts[i]
		}
	}
	return nil
}

func (p *Period) set(s Status) {
	p.Status = s
	if len(p.Trail) == 0 || p.Trail[len(p.Trail)-1] != s {
		p.Trail = append(p.Trail, s)
	}
}

// Receipt is one successful charge as recorded.
type Receipt struct {
	Period    Date // the period's scheduled date
	PI        string
	Amount    int64
	Processed Date
	// Plan is the plan the charge paid for (§8 "Plan change": receipts
	// name the plan they paid for).
	Plan string
}

// Reminder is one reminder the rules require: for the charge on PayDate, sent
// on a day in [From, To].
type Reminder struct {
	Period   Date
	PayDate  Date
	From, To Date
	Sent     Date // NoDate until the caller reports it with Sent
}

// Due is one charge the day's collection must make.
type Due struct {
	Period Date // scheduled date
	Charge Date
	Amount int64
	Plan   string // the plan the charge is for
}

// Sub is the model of one subscription. Its state and the steps every rule
// takes (scheduling a period, announcing its reminder, recording a charge)
// are state's; each group of rules is a type of its own over that one state,
// and embedding gives Sub all of their methods.
type Sub struct {
	*state
	dailyJobs       // reminders going out, the day's collection (collection.go)
	outcomes        // what Stripe and the customer did with a charge (collection.go, customer.go)
	chargesOnDemand // pay now and batches (operations.go, batch.go)
	scheduleChanges // pause, resume, move, rule changes (operations.go)
	paymentChanges  // amount, payment method and plan changes (operations.go, plan.go)
	lifecycle       // cancel, waive, reactivate (operations.go)
}

// state is what the model knows of one subscription.
type state struct {
	cfg       Config
	rule      Rule
	start     Date
	amount    int64
	cancelled bool
	periods   []*Period // by scheduled date
	reminders []Reminder
	receipts  []Receipt
	refunds   []string // customer.go
	// plan is the SKU sold; pendingDowngrade: a plan change lowered the
	// amount and no period has been charged at the new plan yet (plan.go).
	plan             string
	pendingDowngrade bool
	// Dropped are the scheduled dates of periods a rule change removed.
	Dropped []Date
}

// The groups of rules, each over the subscription's one state.
type (
	dailyJobs       struct{ *state }
	outcomes        struct{ *state }
	chargesOnDemand struct{ *state }
	scheduleChanges struct{ *state }
	paymentChanges  struct{ *state }
	lifecycle       struct{ *state }
)

func newSub(st *state) *Sub {
	return &Sub{state: st, dailyJobs: dailyJobs{st}, outcomes: outcomes{st}, chargesOnDemand: chargesOnDemand{st},
		scheduleChanges: scheduleChanges{st}, paymentChanges: paymentChanges{st}, lifecycle: lifecycle{st}}
}

// New is a subscription created on today with rule, amount and an optional
// start date: its first period is the rule's first date strictly after
// today and on or after start.
func New(cfg Config, rule Rule, amount int64, start, today Date) (*Sub, error) {
	if err := rule.Validate(); err != nil {
		return nil, err
	}
	s := newSub(&state{cfg: cfg, rule: rule, start: start, amount: amount})
	s.scheduleFrom(max(today.AddDays(1), start), today)
	return s, nil
}

// horizon is how far ahead periods are generated (past a YEARLY term).
const horizon = 400

// scheduleFrom makes the rule's dates from `from` on the new tail of the
// schedule, announced on `today`.
func (s *state) scheduleFrom(from, today Date) {
	first, rule := s.rule.OnOrAfter(from)
	s.rule = rule
	s.addPeriod(first, today)
	s.extend(today)
}

func (s *state) addPeriod(d, today Date) {
	p := &Period{Scheduled: d, Charge: d, Rule: s.rule}
	p.set(Scheduled)
	s.periods = append(s.periods, p)
	s.remind(p, today)
}

// extend generates periods up to the horizon.
func (s *state) extend(today Date) {
	if s.cancelled || len(s.periods) == 0 {
		return
	}
	for s.open() < 2 || s.periods[len(s.periods)-1].Scheduled < today.AddDays(horizon) {
		s.addPeriod(s.rule.After(s.periods[len(s.periods)-1].Scheduled), today)
	}
}

// open counts the periods at the end of the schedule nothing happened to.
func (s *state) open() int {
	n := 0
	for i := len(s.periods) - 1; i >= 0 && s.periods[i].Status == Scheduled && len(s.periods[i].Attempts) == 0; i-- {
		n++
	}
	return n
}

// remind requires the reminder of p's charge date, announced on today: on
// charge − ReminderDays, or at once when that day has come (today, or the
// next day's job: today's may have run before the announcement).
func (s *state) remind(p *Period, today Date) {
	s.unremind(p, today)
	for _, r := range s.reminders {
		if r.Period == p.Scheduled && r.PayDate == p.Charge {
			return // this charge date was announced already (before a pause, a move back)
		}
	}
	due := p.Charge.AddDays(-s.cfg.ReminderDays)
	r := Reminder{Period: p.Scheduled, PayDate: p.Charge, From: due, To: due}
	if due <= today {
		r.From, r.To = today, min(today.AddDays(1), p.Charge)
	}
	s.reminders = append(s.reminders, r)
}

// unremind drops p's reminders that have not gone out.
func (s *state) unremind(p *Period, today Date) {
	s.reminders = slices.DeleteFunc(s.reminders, func(r Reminder) bool {
		return r.Period == p.Scheduled && r.Sent == NoDate
	})
}

// Period returns the period whose scheduled or charge date is d.
func (s *state) Period(d Date) *Period {
	for _, p := range s.periods {
		if p.Charge == d {
			return p
		}
	}
	for _, p := range s.periods {
		if p.Scheduled == d {
			return p
		}
	}
	return nil
}

// Periods are the periods generated so far, by scheduled date.
func (s *Sub) Periods() []*Period { return s.periods }

// Receipts are the receipts so far.
func (s *Sub) Receipts() []Receipt { return s.receipts }

// Reminders are the reminders required so far (some not due yet).
func (s *Sub) Reminders() []Reminder { return s.reminders }

// Amount is the amount of the next attempt.
func (s *Sub) Amount() int64 { return s.amount }

// Rule is the current rule.
func (s *Sub) Rule() Rule { return s.rule }

// Cancelled reports a cancelled subscription.
func (s *Sub) Cancelled() bool { return s.cancelled }
