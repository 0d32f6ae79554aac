package billing

import (
	"context"
	"errors"
	"fmt"
	"net/mail"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/lock"
	"github.com/stripe-payments/stripe-payments/internal/stripeid"
)

// CreateInput is createSubscription's request.
type CreateInput struct {
	SubscriptionID string // optional: a client-chosen id makes the create idempotent
	SKU            string
	Email          string
	PaymentDay     int
	BillingWeek    int
	Amount         int64
	Currency       string
	Term           dates.Term
	Customer       string
	PaymentMethod  string
	StripeAccount  string
	StartDate      dates.Date
	Timezone       string
	// TestClock puts the subscription on a test clock (test mode only).
	TestClock string
}

var currencyRE = regexp.MustCompile(`^[a-z]{3}$`)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Validate reports every problem of in at once.
func (in CreateInput) Validate(account string) error {
	var errs []string
	add := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if !validID(account) {
		add("account_id: 1-128 characters without '#', '/' or spaces")
	}
	if in.SubscriptionID != "" && !validID(in.SubscriptionID) {
		add("subscription_id: 1-128 characters without '#', '/' or spaces")
	}
	if !validID(in.SKU) {
		add("sku: required, 1-128 characters without '#', '/' or spaces")
	}
	if a, err := mail.ParseAddress(in.Email); err != nil || a.Address != in.Email || len(in.Email) > 254 {
		add("email: a plain address is required")
	}
	if err := (dates.Rule{Day: in.PaymentDay, Week: in.BillingWeek, Term: in.Term}).Validate(); err != nil {
		add("%v", err)
	}
	if in.BillingWeek != 0 && in.PaymentDay != 0 {
		add("payment_day and billing_week are exclusive")
	}
	if in.Amount < 1 || in.Amount > 99_999_999 {
		add("amount: 1 to 99999999 minor units")
	}
	if !currencyRE.MatchString(in.Currency) {
		add("currency: a lowercase ISO 4217 code")
	}
	if !stripeid.Valid(in.Customer, "cus_") {
		add("customer: a Stripe customer id (cus_...)")
	}
	if !stripeid.Valid(in.PaymentMethod, "pm_") {
		add("payment_method: a Stripe payment method id (pm_...)")
	}
	if in.StripeAccount != "" && !stripeid.Valid(in.StripeAccount, "acct_") {
		add("stripe_account: a connected account id (acct_...), or absent to charge on the platform's own account")
	}
	if in.Timezone != "" {
		if _, err := time.LoadLocation(in.Timezone); err != nil || in.Timezone == "Local" {
			add("timezone: an IANA time zone name")
		}
	}
	if in.TestClock != "" && !stripeid.Valid(in.TestClock, "clock_") {
		add("test_clock: a test clock id (clock_...)")
	}
	if len(errs) > 0 {
		return invalid("%s", strings.Join(errs, "; "))
	}
	return nil
}

// CreateSubscription creates a subscription and its first SCHEDULED period
// (createSubscription). The first payment is on the first payment day after
// today (or on/after start_date when later): today's job may have run.
func (s *Service) CreateSubscription(ctx context.Context, account string, in CreateInput) (Subscription, error) {
	// No stripe_account: the platform charges its own customer on its own
	// account, with no Stripe-Account header (DESIGN §4), whatever account_id.
	in.Currency = strings.ToLower(in.Currency)
	if err := in.Validate(account); err != nil {
		return Subscription{}, err
	}
	if in.TestClock != "" {
		if s.cfg.Livemode {
			return Subscription{}, ErrLivemode
		}
		if _, err := s.store.GetClock(ctx, in.TestClock); errors.Is(err, ErrNotFound) {
			return Subscription{}, invalid("test_clock: no test clock %s", in.TestClock)
		} else if err != nil {
			return Subscription{}, err
		}
	}
	s, err := s.forSub(ctx, Subscription{TestClock: in.TestClock})
	if err != nil {
		return Subscription{}, err
	}
	now := s.now()
	sub := Subscription{
		AccountID: account, SubscriptionID: in.SubscriptionID, SKU: in.SKU, Email: in.Email,
		PaymentDay: in.PaymentDay, BillingWeek: in.BillingWeek, Amount: in.Amount, Currency: in.Currency,
		Term: in.Term, Timezone: in.Timezone, Status: SubActive, CreatedAt: now, TestClock: in.TestClock,
		PaymentDetails: PaymentDetails{Customer: in.Customer, PaymentMethod: in.PaymentMethod, StripeAccount: in.StripeAccount},
	}
	if sub.SubscriptionID == "" {
		sub.SubscriptionID = uuid.NewString()
	}
	if existing, err := s.store.GetSubscription(ctx, account, sub.SubscriptionID); err == nil {
		if existing.SKU == sub.SKU && existing.Amount == sub.Amount && existing.PaymentDetails == sub.PaymentDetails &&
			existing.TestClock == sub.TestClock {
			return existing, nil // a retried create
		}
		return Subscription{}, fmt.Errorf("subscription %s: %w", sub.SubscriptionID, ErrDuplicate)
	} else if !errors.Is(err, ErrNotFound) {
		return Subscription{}, err
	}
	today := s.today(sub)
	sub.StartDate = in.StartDate
	first := sub.Rule().First(dates.Max(today.AddDays(1), in.StartDate))
	p := newPeriod(sub, first, Scheduled, ProcInitial, "created", now)
	s.point(&sub, p, today, true)

	// Registered before the subscription exists, so the poller's account
	// list always covers every account the table charges on.
	if err := s.store.RegisterChargedAccounts(ctx, sub.PaymentDetails.StripeAccount); err != nil {
		return Subscription{}, err
	}
	tx := s.store.NewTx("create:"+sub.SubscriptionID, now)
	tx.PutSubscription(&sub)
	tx.PutPeriod(&p, false)
	if sub.TestClock != "" {
		tx.PutClockMember(sub) // DELETE of the clock cancels it
	}
	if err := s.store.Commit(ctx, tx); err != nil {
		if errors.Is(err, ErrConflict) {
			return Subscription{}, fmt.Errorf("subscription %s: %w", sub.SubscriptionID, ErrDuplicate)
		}
		return Subscription{}, fmt.Errorf("create subscription: %w", err)
	}
	return sub, nil
}

// Change is an updateSubscription request: one action, or field changes.
type Change struct {
	// Action: "pause" (Months), "resume", "cancel", "waive" (BillingDate),
	// or "" for field changes.
	Action      string
	Months      int
	BillingDate dates.Date
	// Field changes.
	Amount          *int64
	PaymentMethod   *string // also used by the retries of failed periods
	PaymentDay      *int
	BillingWeek     *int
	NextPaymentDate dates.Date // admin move of the next period's billing date
	// Cause identifies the request in history entries.
	Cause string
}

// UpdateSubscription applies ch holding the account's lock; ErrLocked when a
// collection holds it.
func (s *Service) UpdateSubscription(ctx context.Context, account, subID string, ch Change) (Subscription, error) {
	if ch.Cause == "" {
		ch.Cause = "api:" + uuid.NewString()[:8]
	}
	var out Subscription
	err := s.withLock(ctx, account, func(ctx context.Context, _ *lock.Lock) error {
		sub, err := s.store.GetSubscription(ctx, account, subID)
		if err != nil {
			return err
		}
		s, err := s.forSub(ctx, sub) // its test clock's "today", if it has one
		if err != nil {
			return err
		}
		if sub.Status != SubCancelled {
			if _, err := s.noAttemptInFlight(ctx, sub); err != nil {
				return err
			}
		}
		switch ch.Action {
		case "pause":
			out, err = s.pause(ctx, sub, ch.Months, ch.Cause)
		case "resume":
			out, err = s.resume(ctx, sub, ch.Cause)
		case "cancel":
			out, err = s.cancel(ctx, sub, ch.Cause)
		case "waive":
			out, err = s.waive(ctx, sub, ch.BillingDate, ch.Cause)
		case "":
			out, err = s.change(ctx, sub, ch)
		default:
			err = invalid("unknown action %q", ch.Action)
		}
		return err
	})
	return out, err
}

// noAttemptInFlight refuses a change while a collection attempt on any
// period of sub has no recorded outcome: the attempt's rerun must still find
// the subscription as it charged it (a crash must not let a cancelled or
// paused subscription be charged by the rerun).
func (s *Service) noAttemptInFlight(ctx context.Context, sub Subscription) ([]Period, error) {
	periods, err := s.store.ListPeriods(ctx, sub.AccountID, sub.SubscriptionID)
	if err != nil {
		return nil, err
	}
	for _, p := range periods {
		if p.InFlightKey != "" {
			return nil, fmt.Errorf("period %s has a collection attempt in flight; retry after the next collection run: %w", p.BillingDate, ErrConflict)
		}
	}
	return periods, nil
}

// openPeriod reads the subscription's next period (its cursor), refusing
// one with an attempt in flight (its outcome is not known yet).
func (s *Service) openPeriod(ctx context.Context, sub Subscription) (Period, error) {
	p, err := s.store.GetPeriod(ctx, sub.AccountID, sub.SubscriptionID, sub.NextPeriodDate)
	if errors.Is(err, ErrNotFound) {
		// Lost by an earlier crash between writes cannot happen (one
		// transaction), but be lenient: recreate it.
		return newPeriod(sub, sub.NextPeriodDate, Scheduled, ProcAdmin, "recreated", s.now()), nil
	}
	if err != nil {
		return Period{}, err
	}
	if p.InFlightKey != "" {
		return Period{}, fmt.Errorf("period %s has a collection attempt in flight: %w", p.BillingDate, ErrConflict)
	}
	return p, nil
}

// pause marks the next N periods not yet charged PAUSED (a YEARLY
// subscription: its next period, when it falls within N months); the
// collection job makes each PAUSED_SKIPPED on its date, and the
// subscription is ACTIVE again after the last one. Nothing shifts: the
// first period after the pause keeps its scheduled date and is announced
// as usual.
func (s *Service) pause(ctx context.Context, sub Subscription, months int, cause string) (Subscription, error) {
	if sub.Status != SubActive {
		return sub, invalid("only an ACTIVE subscription can be paused (it is %s)", sub.Status)
	}
	if months < 1 || months > s.cfg.MaxPauseMonths {
		return sub, invalid("months: 1 to %d", s.cfg.MaxPauseMonths)
	}
	cur, err := s.openPeriod(ctx, sub)
	if err != nil {
		return sub, err
	}
	if cur.Status != Scheduled {
		return sub, fmt.Errorf("next period %s is %s: %w", cur.BillingDate, cur.Status, ErrConflict)
	}
	now, today := s.now(), s.today(sub)
	n := months
	if sub.Term == dates.Yearly {
		if limit := dates.AddMonthsClamped(today, months); cur.BillingDate.After(limit) {
			return sub, invalid("the next period (%s) is not within %d months: nothing to pause", cur.BillingDate, months)
		}
		n = 1
	}
	rule := sub.Rule()
	tx := s.store.NewTx(cause, now)
	var first Period
	for d, paused, steps := cur.BillingDate, 0, 0; paused < n; d, steps = rule.Next(d), steps+1 {
		if steps > n+24 {
			return sub, fmt.Errorf("pause: fewer than %d open periods after %s: %w", n, cur.BillingDate, ErrConflict)
		}
		p := cur
		if paused > 0 {
			p, err = s.store.GetPeriod(ctx, sub.AccountID, sub.SubscriptionID, d)
			switch {
			case errors.Is(err, ErrNotFound):
				p = newPeriod(sub, d, Paused, ProcPause, "paused", now)
			case err != nil:
				return sub, err
			case p.Status == Cancelled && p.Attempts == 0:
				s.reopen(&p, sub, ProcPause, "paused")
			case p.Status != Scheduled:
				continue // ended already (waived ahead): not a period to pause
			}
		}
		p.Status, p.Process, p.UpdatedEvent, p.PauseDurationMonths, p.ChargeDate = Paused, ProcPause, "paused", months, dates.Date{}
		tx.PutPeriod(&p, false)
		if paused == 0 {
			first = p
		}
		sub.PausedUntil = d
		paused++
	}
	sub.PausedFrom, sub.PauseMonths = first.BillingDate, months
	s.point(&sub, first, today, true)
	tx.PutSubscription(&sub)
	if err := s.store.Commit(ctx, tx); err != nil {
		return sub, fmt.Errorf("pause: %w", err)
	}
	return sub, nil
}

// resume ends a pause early: the PAUSED periods still in the future are
// SCHEDULED again (and announced, BILLING_REMINDER_DAYS before or at once),
// the ones whose date has come are PAUSED_SKIPPED.
func (s *Service) resume(ctx context.Context, sub Subscription, cause string) (Subscription, error) {
	if sub.Status != SubPaused {
		return sub, invalid("only a PAUSED subscription can be resumed (it is %s)", sub.Status)
	}
	now, today := s.now(), s.today(sub)
	rule := sub.Rule()
	tx := s.store.NewTx(cause, now)
	var first *Period
	for d := sub.NextPeriodDate; !d.After(sub.PausedUntil); d = rule.Next(d) {
		p, err := s.store.GetPeriod(ctx, sub.AccountID, sub.SubscriptionID, d)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return sub, err
		}
		if p.Status != Paused {
			continue
		}
		p.Process = ProcPause
		if d.After(today) {
			p.Status, p.UpdatedEvent = Scheduled, "resumed"
			if first == nil {
				first = &p
			}
		} else {
			p.Status, p.UpdatedEvent, p.CompletionDate = PausedSkipped, "pause-skipped", now
		}
		tx.PutPeriod(&p, false)
	}
	last := sub.PausedUntil
	sub.Status, sub.PausedFrom, sub.PausedUntil, sub.PauseMonths = SubActive, dates.Date{}, dates.Date{}, 0
	if first != nil {
		s.point(&sub, *first, today, true)
	} else if err := s.advance(ctx, tx, &sub, last, today, ProcPause, now); err != nil {
		return sub, err
	}
	tx.PutSubscription(&sub)
	if err := s.store.Commit(ctx, tx); err != nil {
		return sub, fmt.Errorf("resume: %w", err)
	}
	return sub, nil
}

// cancel ends a subscription: it leaves the indexes, and its open periods
// (scheduled, paused, failed awaiting a retry) become CANCELLED. A period
// with a payment on its way (ACHSENT) is left for its webhook to settle: the
// money moved or it did not. (UpdateSubscription refuses while an attempt
// is in flight.)
func (s *Service) cancel(ctx context.Context, sub Subscription, cause string) (Subscription, error) {
	if sub.Status == SubCancelled {
		return sub, nil
	}
	now := s.now()
	periods, err := s.store.ListPeriods(ctx, sub.AccountID, sub.SubscriptionID)
	if err != nil {
		return sub, err
	}
	tx := s.store.NewTx(cause, now)
	for _, p := range periods {
		switch p.Status {
		case Scheduled, Paused, Error:
			p.Status, p.Process, p.UpdatedEvent, p.CompletionDate, p.NextAttemptDate = Cancelled, ProcAdmin, "cancelled", now, dates.Date{}
			tx.PutPeriod(&p, false)
		}
	}
	sub.Status = SubCancelled
	sub.NextReminderDate, sub.RemindFor, sub.ReminderPending = dates.Date{}, dates.Date{}, dates.Date{}
	tx.PutSubscription(&sub)
	if err := s.store.Commit(ctx, tx); err != nil {
		return sub, fmt.Errorf("cancel: %w", err)
	}
	return sub, nil
}

// waive forgives one period (SCHEDULED or ERROR) without payment. Waiving
// the next period moves the subscription on to the following one.
func (s *Service) waive(ctx context.Context, sub Subscription, d dates.Date, cause string) (Subscription, error) {
	if d.IsZero() {
		return sub, invalid("billing_date is required to waive")
	}
	p, err := s.store.GetPeriod(ctx, sub.AccountID, sub.SubscriptionID, d)
	if errors.Is(err, ErrNotFound) {
		return sub, fmt.Errorf("period %s: %w", d, ErrNotFound)
	}
	if err != nil {
		return sub, err
	}
	if p.Status != Scheduled && p.Status != Error {
		return sub, invalid("only a SCHEDULED or ERROR period can be waived (it is %s)", p.Status)
	}
	if p.InFlightKey != "" {
		return sub, fmt.Errorf("period %s has a collection attempt in flight: %w", d, ErrConflict)
	}
	now, today := s.now(), s.today(sub)
	tx := s.store.NewTx(cause, now)
	p.Status, p.Process, p.UpdatedEvent, p.CompletionDate, p.NextAttemptDate = Waived, ProcAdmin, "waived", now, dates.Date{}
	tx.PutPeriod(&p, false)
	switch {
	case sub.Status != SubCancelled && sub.NextPeriodDate.Equal(d):
		if err := s.advance(ctx, tx, &sub, d, today, ProcAdmin, now); err != nil {
			return sub, err
		}
		tx.PutSubscription(&sub)
	case sub.Status != SubCancelled && sub.RemindFor.Equal(d):
		// A period ahead of the cursor (scheduled again by a resume): no
		// reminder for it; announce the one after.
		next := sub.Rule().Next(d)
		s.scheduleReminder(&sub, next, chargeDate(sub, next), today, true)
		tx.PutSubscription(&sub)
	}
	if err := s.store.Commit(ctx, tx); err != nil {
		return sub, fmt.Errorf("waive: %w", err)
	}
	return sub, nil
}

// replacedByRule reports a period a rule change cancelled (it is no
// period of the subscription's rule any more).
func replacedByRule(p Period) bool {
	return p.Status == Cancelled && strings.HasPrefix(p.UpdatedEvent, "rule-changed")
}

// lastKept is the scheduled date of the latest period a rule change must
// keep its distance from: one charged (whatever came of it) or ended
// (waived, skipped, stale); zero when there is none. Periods still to come
// (SCHEDULED, PAUSED) and the ones a rule change replaced do not count.
func lastKept(sub Subscription, periods []Period) dates.Date {
	last := sub.LastChargedPeriod
	for _, p := range periods {
		if p.Status == Scheduled && p.Attempts == 0 && p.InFlightKey == "" || p.Status == Paused || replacedByRule(p) {
			continue
		}
		if p.BillingDate.After(last) {
			last = p.BillingDate
		}
	}
	return last
}

// change applies field changes (DESIGN §8 "Billing schedule semantics"):
//   - amount and payment method: the subscription and every period not yet
//     charged (SCHEDULED, PAUSED, and ERROR for its retries), never a charge
//     in flight;
//   - payment day or Friday week (a rule change): the next period becomes
//     the first date of the new rule at least one term after the last
//     charged (or ended: waived, skipped, stale) period's scheduled date
//     (none: the first after today, on or after start_date), so no two
//     periods are less than a term apart; the replaced periods are
//     CANCELLED;
//   - next_payment_date (a move): that one period is charged on the new
//     date, strictly between its neighbours' scheduled dates and not in the
//     past; it keeps its scheduled date, and so do the periods after it.
func (s *Service) change(ctx context.Context, sub Subscription, ch Change) (Subscription, error) {
	if ch.Amount == nil && ch.PaymentMethod == nil && ch.PaymentDay == nil && ch.BillingWeek == nil && ch.NextPaymentDate.IsZero() {
		return sub, invalid("nothing to change")
	}
	if ch.PaymentMethod != nil && !stripeid.Valid(*ch.PaymentMethod, "pm_") {
		return sub, invalid("payment_method: a Stripe payment method id (pm_...)")
	}
	if sub.Status == SubCancelled {
		return sub, invalid("the subscription is CANCELLED")
	}
	ruleChange := ch.PaymentDay != nil || ch.BillingWeek != nil
	if (ruleChange || !ch.NextPaymentDate.IsZero()) && sub.Status != SubActive {
		return sub, invalid("billing dates change only on an ACTIVE subscription (it is %s)", sub.Status)
	}
	if ruleChange && !ch.NextPaymentDate.IsZero() {
		return sub, invalid("change the payment day or move the next payment, not both at once")
	}
	if ch.Amount != nil && (*ch.Amount < 1 || *ch.Amount > 99_999_999) {
		return sub, invalid("amount: 1 to 99999999 minor units")
	}
	now, today := s.now(), s.today(sub)
	periods, err := s.store.ListPeriods(ctx, sub.AccountID, sub.SubscriptionID)
	if err != nil {
		return sub, err
	}
	// Each period is written once, in its final state.
	byDate := map[dates.Date]*Period{}
	var order []dates.Date
	touch := func(p Period) *Period {
		if q, ok := byDate[p.BillingDate]; ok {
			return q
		}
		byDate[p.BillingDate] = &p
		order = append(order, p.BillingDate)
		return &p
	}
	var cur *Period
	for _, p := range periods {
		if p.BillingDate.Equal(sub.NextPeriodDate) {
			p := p
			cur = &p
		}
	}
	if cur == nil {
		p := newPeriod(sub, sub.NextPeriodDate, Scheduled, ProcAdmin, "recreated", now)
		cur = touch(p)
	}

	if ch.Amount != nil || ch.PaymentMethod != nil {
		if ch.Amount != nil {
			sub.Amount = *ch.Amount
		}
		if ch.PaymentMethod != nil {
			sub.PaymentDetails.PaymentMethod = *ch.PaymentMethod
		}
		for _, p := range append(periods, *cur) {
			// Not yet charged: scheduled, paused, or failed (its retries).
			if p.InFlightKey != "" || !(p.Status == Scheduled || p.Status == Paused || p.Status == Error) {
				continue
			}
			q := touch(p)
			if ch.Amount != nil && q.Amount != *ch.Amount {
				q.Amount, q.UpdatedEvent = *ch.Amount, "amount-changed"
			}
			if ch.PaymentMethod != nil && q.PaymentDetails.PaymentMethod != *ch.PaymentMethod {
				q.PaymentDetails.PaymentMethod, q.UpdatedEvent = *ch.PaymentMethod, "payment-method-changed"
			}
			q.Process = ProcAdmin
		}
	}

	switch {
	case ruleChange:
		rule := sub.Rule()
		if ch.PaymentDay != nil {
			rule.Day, rule.Week = *ch.PaymentDay, 0
		}
		if ch.BillingWeek != nil {
			rule.Week, rule.Day = *ch.BillingWeek, 0
		}
		if err := rule.Validate(); err != nil {
			return sub, invalid("%v", err)
		}
		sub.PaymentDay, sub.BillingWeek = rule.Day, rule.Week
		lower := dates.Max(today.AddDays(1), sub.StartDate)
		if last := lastKept(sub, periods); !last.IsZero() {
			lower = dates.Max(lower, rule.OneTermAfter(last))
		}
		next := rule.FirstOnOrAfter(cur.BillingDate, lower)
		// Every period scheduled from the cursor on belongs to the old rule:
		// cancelled, but for the new next period itself.
		var target *Period
		for _, p := range append(periods, *cur) {
			if p.Status != Scheduled || p.InFlightKey != "" || p.BillingDate.Before(cur.BillingDate) {
				continue
			}
			q := touch(p)
			if q.BillingDate.Equal(next) {
				target = q
				continue
			}
			q.Status, q.Process, q.UpdatedEvent = Cancelled, ProcAdmin, "rule-changed-to-"+next.String()
			q.ChargeDate, q.CompletionDate = dates.Date{}, now
		}
		if target == nil {
			for _, p := range periods {
				if p.BillingDate.Equal(next) {
					if !replacedByRule(p) || p.Attempts > 0 {
						return sub, fmt.Errorf("period %s exists and is %s: %w", next, p.Status, ErrConflict)
					}
					target = touch(p)
					s.reopen(target, sub, ProcAdmin, "rule-changed-from-"+cur.BillingDate.String())
				}
			}
		}
		if target == nil {
			target = touch(newPeriod(sub, next, Scheduled, ProcAdmin, "rule-changed-from-"+cur.BillingDate.String(), now))
		}
		target.ChargeDate = dates.Date{}
		s.point(&sub, *target, today, true)
	case !ch.NextPaymentDate.IsZero():
		to := ch.NextPaymentDate
		if cur.Status != Scheduled || cur.InFlightKey != "" {
			return sub, fmt.Errorf("next period %s is %s: %w", cur.BillingDate, cur.Status, ErrConflict)
		}
		if to.Before(today) {
			return sub, invalid("next_payment_date must not be in the past (today is %s)", today)
		}
		following := sub.Rule().Next(cur.BillingDate)
		if !to.Before(following) {
			return sub, invalid("next_payment_date must be before the following period (%s)", following)
		}
		for _, p := range periods {
			if p.BillingDate.Before(cur.BillingDate) && !replacedByRule(p) && !to.After(p.BillingDate) {
				return sub, invalid("next_payment_date must be after the previous period (%s)", p.BillingDate)
			}
		}
		q := touch(*cur)
		q.ChargeDate, q.Process, q.UpdatedEvent = to, ProcAdmin, "charge-date-moved-to-"+to.String()
		if to.Equal(q.BillingDate) {
			q.ChargeDate = dates.Date{}
		}
		// The new charge date is announced (one reminder per charge date),
		// unless it did not change.
		s.point(&sub, *q, today, !q.Due().Equal(cur.Due()))
	}

	tx := s.store.NewTx(ch.Cause, now)
	for _, d := range order {
		tx.PutPeriod(byDate[d], false)
	}
	tx.PutSubscription(&sub)
	if err := s.store.Commit(ctx, tx); err != nil {
		return sub, fmt.Errorf("change subscription: %w", err)
	}
	return sub, nil
}

// GetSubscription reads one subscription.
func (s *Service) GetSubscription(ctx context.Context, account, sub string) (Subscription, error) {
	return s.store.GetSubscription(ctx, account, sub)
}

// ListSubscriptions pages through an account's subscriptions.
func (s *Service) ListSubscriptions(ctx context.Context, account string, limit int32, cursor string) (Page[Subscription], error) {
	return s.store.ListSubscriptions(ctx, account, limit, cursor)
}

// ListReceipts pages through an account's unexpired receipts, newest first.
func (s *Service) ListReceipts(ctx context.Context, account string, limit int32, cursor string) (Page[Receipt], error) {
	return s.store.ListReceipts(ctx, account, s.now(), s.cfg.ReceiptTTL, limit, cursor)
}

// ListHistory pages through a subscription's history; ErrNotFound when the
// account has no such subscription.
func (s *Service) ListHistory(ctx context.Context, account, sub string, limit int32, cursor string) (Page[HistoryEntry], error) {
	if _, err := s.store.GetSubscription(ctx, account, sub); err != nil {
		return Page[HistoryEntry]{}, err
	}
	return s.store.ListHistory(ctx, account, sub, limit, cursor)
}
