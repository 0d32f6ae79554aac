// Package oracle is a reference model of DESIGN §8 "Billing schedule
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
	"fmt"
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
}

// Period is one scheduled date of the rule and its fate.
type Period struct {
	Scheduled Date
	Charge    Date // the scheduled date, or where an operator moved it
	Status    Status
	// Trail is every status the period went through, in order, without
	// repeats.
	Trail    []Status
	Attempts []Attempt
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
}

// Sub is the model of one subscription.
type Sub struct {
	cfg       Config
	rule      Rule
	start     Date
	amount    int64
	cancelled bool
	periods   []*Period // by scheduled date
	reminders []Reminder
	receipts  []Receipt
	// Dropped are the scheduled dates of periods a rule change removed.
	Dropped []Date
}

// New is a subscription created on today with rule, amount and an optional
// start date: its first period is the rule's first date strictly after
// today and on or after start.
func New(cfg Config, rule Rule, amount int64, start, today Date) (*Sub, error) {
	if err := rule.Validate(); err != nil {
		return nil, err
	}
	s := &Sub{cfg: cfg, rule: rule, start: start, amount: amount}
	s.scheduleFrom(max(today.AddDays(1), start), today)
	return s, nil
}

// horizon is how far ahead periods are generated (past a YEARLY term).
const horizon = 400

// scheduleFrom makes the rule's dates from `from` on the new tail of the
// schedule, announced on `today`.
func (s *Sub) scheduleFrom(from, today Date) {
	first, rule := s.rule.OnOrAfter(from)
	s.rule = rule
	s.addPeriod(first, today)
	s.extend(today)
}

func (s *Sub) addPeriod(d, today Date) {
	p := &Period{Scheduled: d, Charge: d}
	p.set(Scheduled)
	s.periods = append(s.periods, p)
	s.remind(p, today)
}

// extend generates periods up to the horizon.
func (s *Sub) extend(today Date) {
	if s.cancelled || len(s.periods) == 0 {
		return
	}
	for s.open() < 2 || s.periods[len(s.periods)-1].Scheduled < today.AddDays(horizon) {
		s.addPeriod(s.rule.After(s.periods[len(s.periods)-1].Scheduled), today)
	}
}

// open counts the periods at the end of the schedule nothing happened to.
func (s *Sub) open() int {
	n := 0
	for i := len(s.periods) - 1; i >= 0 && s.periods[i].Status == Scheduled && len(s.periods[i].Attempts) == 0; i-- {
		n++
	}
	return n
}

// remind requires the reminder of p's charge date, announced on today: on
// charge − ReminderDays, or at once when that day has come (today, or the
// next day's job: today's may have run before the announcement).
func (s *Sub) remind(p *Period, today Date) {
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
func (s *Sub) unremind(p *Period, today Date) {
	s.reminders = slices.DeleteFunc(s.reminders, func(r Reminder) bool {
		return r.Period == p.Scheduled && r.Sent == NoDate
	})
}

// Period returns the period whose scheduled or charge date is d.
func (s *Sub) Period(d Date) *Period {
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

// Pause skips the next n periods without an attempt (YEARLY: the next one
// when it falls within n months); nothing shifts. A pause that would skip
// nothing is refused.
func (s *Sub) Pause(today Date, n int) error {
	if s.cancelled || n < 1 {
		return ErrRefused
	}
	limit, want := AddMonths(today, n), n
	for _, p := range s.periods {
		if n == 0 {
			break
		}
		if p.Status != Scheduled || len(p.Attempts) > 0 || p.Charge < today {
			continue
		}
		if s.rule.Term == Yearly && p.Charge > limit { // "within N months": up to and including that date
			break
		}
		p.set(Paused)
		s.unremind(p, today)
		n--
	}
	if n == want {
		return fmt.Errorf("%w: no period within %d months", ErrRefused, want)
	}
	return nil
}

// Resume schedules again the paused periods still in the future.
func (s *Sub) Resume(today Date) error {
	if s.cancelled {
		return ErrRefused
	}
	for _, p := range s.periods {
		if p.Status == Paused && p.Charge > today {
			p.set(Scheduled)
			s.remind(p, today)
		}
	}
	return nil
}

// ChangeAmount applies to every later attempt.
func (s *Sub) ChangeAmount(_ Date, amount int64) error {
	if s.cancelled || amount < 1 {
		return ErrRefused
	}
	s.amount = amount
	return nil
}

// ChangeRule changes the payment day (or Friday week) at today: periods
// charged or in flight stay (and every other period that already ended);
// the next period is the new rule's first date at least one term after the
// last of them (none: after today and on or after start), and after today.
func (s *Sub) ChangeRule(today Date, day, week int) error {
	next := s.rule // a YEARLY rule keeps its month: only the day changes
	next.Day, next.Week = day, week
	if s.cancelled || next.Validate() != nil {
		return ErrRefused
	}
	from := max(today.AddDays(1), s.start)
	var kept []*Period
	for _, p := range s.periods {
		if len(p.Attempts) == 0 && (p.Status == Scheduled || p.Status == Paused) {
			s.Dropped = append(s.Dropped, p.Scheduled)
			s.unremind(p, today)
			continue
		}
		kept = append(kept, p)
		// The rule anchors on the last charged period; "no two periods
		// ever less than one term apart" extends that to every period kept
		// (waived, skipped, stale ones too).
		from = max(from, s.termAfter(p.Scheduled))
	}
	s.periods, s.rule = kept, next
	s.scheduleFrom(from, today)
	return nil
}

// termAfter is one term after d: a month later, clamped (YEARLY: 12); for
// Friday billing four weeks, the shortest distance of two of its periods.
func (s *Sub) termAfter(d Date) Date {
	if s.rule.Week != 0 {
		return d.AddDays(28)
	}
	return AddMonths(d, s.rule.Term.Months())
}

// Move charges one period on another date: strictly between its neighbours'
// scheduled dates and after today; later periods keep their dates.
func (s *Sub) Move(today, period, to Date) error {
	i := slices.IndexFunc(s.periods, func(p *Period) bool { return p.Scheduled == period })
	if i < 0 || s.cancelled {
		return ErrRefused
	}
	p := s.periods[i]
	lo, hi := today, Date(1<<30)
	if i > 0 {
		lo = max(lo, s.periods[i-1].Scheduled)
	}
	if i+1 < len(s.periods) {
		hi = s.periods[i+1].Scheduled
	}
	if p.Status != Scheduled || len(p.Attempts) > 0 || to <= lo || to >= hi {
		return fmt.Errorf("%w: move %s to %s outside (%s, %s)", ErrRefused, period, to, lo, hi)
	}
	s.unremind(p, today)
	p.Charge = to
	s.remind(p, today)
	return nil
}

// Cancel ends every period not charged and not in flight.
func (s *Sub) Cancel(today Date) error {
	if s.cancelled {
		return ErrRefused
	}
	s.cancelled = true
	for _, p := range s.periods {
		switch p.Status {
		case Scheduled, Paused, Error:
			p.set(Cancelled)
			s.unremind(p, today)
		}
	}
	return nil
}

// Waive forgives a SCHEDULED or ERROR period.
func (s *Sub) Waive(today, period Date) error {
	p := s.Period(period)
	if p == nil || s.cancelled || (p.Status != Scheduled && p.Status != Error) || p.unresolved() != nil {
		return ErrRefused
	}
	p.set(Waived)
	s.unremind(p, today)
	s.extend(today)
	return nil
}

// PayNow is the oldest ERROR period, to charge at once (the caller reports
// the attempt with Attempted); ErrRefused when there is none or an attempt
// is in flight.
func (s *Sub) PayNow(today Date) (Due, error) {
	for _, p := range s.periods {
		if p.unresolved() != nil {
			return Due{}, ErrRefused
		}
	}
	for _, p := range s.periods {
		if p.Status == Error {
			return Due{Period: p.Scheduled, Charge: p.Charge, Amount: s.amount}, nil
		}
	}
	return Due{}, ErrRefused
}

// Sent records the reminder for payDate as sent on day; an error when no
// reminder for that date may go out that day.
func (s *Sub) Sent(day, payDate Date) error {
	for i := range s.reminders {
		r := &s.reminders[i]
		if r.PayDate == payDate && r.Sent == NoDate && r.From <= day && day <= r.To {
			r.Sent = day
			return nil
		}
	}
	return fmt.Errorf("oracle: no reminder for %s may go out on %s", payDate, day)
}

// Missing are the reminders that should have gone out by the end of today.
func (s *Sub) Missing(today Date) []Reminder {
	var out []Reminder
	for _, r := range s.reminders {
		if r.Sent == NoDate && r.To <= today {
			out = append(out, r)
		}
	}
	return out
}

// Collect is the day's collection: unresolved outcomes are resolved first,
// paused periods whose date came are skipped, failed ones past the stale
// threshold are STALE; it returns the charges to make today: periods whose
// charge date is today and failed ones on a retry day.
func (s *Sub) Collect(today Date) []Due {
	for _, p := range s.periods {
		if a := p.unresolved(); a != nil {
			a.Unresolved = false
			s.apply(p, *a, today)
		}
	}
	var due []Due
	for _, p := range s.periods {
		switch {
		case p.Status == Paused && p.Charge <= today:
			p.set(PausedSkipped)
		case p.Status == Scheduled && p.Charge <= today:
			due = append(due, Due{Period: p.Scheduled, Charge: p.Charge, Amount: s.amount})
		case p.Status == Error && int(today-p.Charge) >= s.cfg.StaleDays:
			p.set(Stale)
		case p.Status == Error && slices.Contains(s.cfg.RetryDays, int(today-p.Charge)) && !s.attemptedOn(p, today):
			due = append(due, Due{Period: p.Scheduled, Charge: p.Charge, Amount: s.amount})
		}
	}
	s.extend(today)
	return due
}

func (s *Sub) attemptedOn(p *Period, day Date) bool {
	for _, a := range p.Attempts {
		if a.Day == day {
			return true
		}
	}
	return false
}

// Attempted records one charge of the period dated period (scheduled or
// charge date) made on today. unknown: the service did not get the answer.
func (s *Sub) Attempted(today, period Date, amount int64, pi string, o Outcome, unknown bool) error {
	p := s.Period(period)
	if p == nil {
		return fmt.Errorf("oracle: no period %s", period)
	}
	a := Attempt{Day: today, Amount: amount, Outcome: o, PI: pi, Unresolved: unknown}
	p.Attempts = append(p.Attempts, a)
	if !unknown {
		s.apply(p, a, today)
	}
	return nil
}

// apply records what Stripe did with a, learned on day.
func (s *Sub) apply(p *Period, a Attempt, day Date) {
	switch a.Outcome {
	case Succeeded:
		s.succeed(p, a, day)
	case Declined:
		p.set(Error)
	case Processing:
		p.set(ACHSent)
	}
}

func (s *Sub) succeed(p *Period, a Attempt, day Date) {
	p.set(Completed)
	s.receipts = append(s.receipts, Receipt{Period: p.Scheduled, PI: a.PI, Amount: a.Amount, Processed: day})
}

func (s *Sub) attempt(pi string) (*Period, *Attempt) {
	for _, p := range s.periods {
		for i := range p.Attempts {
			if p.Attempts[i].PI == pi {
				return p, &p.Attempts[i]
			}
		}
	}
	return nil, nil
}

// Settled is a bank debit's outcome arriving on day: COMPLETED, or ERROR
// (CANCELLED when the subscription was cancelled meanwhile).
func (s *Sub) Settled(day Date, pi string, ok bool) error {
	p, a := s.attempt(pi)
	if p == nil || p.Status != ACHSent {
		return fmt.Errorf("oracle: %s is not a bank debit in flight", pi)
	}
	switch {
	case ok:
		a.Outcome = Succeeded
		s.succeed(p, *a, day)
	case s.cancelled:
		a.Outcome = Declined
		p.set(Cancelled)
	default:
		a.Outcome = Declined
		p.set(Error)
	}
	return nil
}

// Refunded is a full refund of a successful charge.
func (s *Sub) Refunded(_ Date, pi string) error {
	p, _ := s.attempt(pi)
	if p == nil || p.Status != Completed {
		return fmt.Errorf("oracle: %s is not a completed charge", pi)
	}
	p.set(Refunded)
	return nil
}

// Busy reports whether today is a day a period of s is due, retried,
// skipped or marked stale, or an attempt is in flight: an operation then
// would race the day's job, on which §8 is silent.
func (s *Sub) Busy(today Date) bool {
	for _, p := range s.periods {
		switch {
		case p.unresolved() != nil, p.Status == ACHSent:
			return true
		case (p.Status == Scheduled || p.Status == Paused) && p.Charge == today:
			return true
		case p.Status == Error && (slices.Contains(s.cfg.RetryDays, int(today-p.Charge)) || int(today-p.Charge) >= s.cfg.StaleDays):
			return true
		}
	}
	return false
}
