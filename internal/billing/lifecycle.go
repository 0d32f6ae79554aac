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
	if !strings.HasPrefix(in.Customer, "cus_") {
		add("customer: a Stripe customer id (cus_...)")
	}
	if !strings.HasPrefix(in.PaymentMethod, "pm_") {
		add("payment_method: a Stripe payment method id (pm_...)")
	}
	if in.StripeAccount != "" && !strings.HasPrefix(in.StripeAccount, "acct_") {
		add("stripe_account: a connected account id (acct_...), or absent to charge on the platform's own account")
	}
	if in.Timezone != "" {
		if _, err := time.LoadLocation(in.Timezone); err != nil || in.Timezone == "Local" {
			add("timezone: an IANA time zone name")
		}
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
	now := s.now()
	sub := Subscription{
		AccountID: account, SubscriptionID: in.SubscriptionID, SKU: in.SKU, Email: in.Email,
		PaymentDay: in.PaymentDay, BillingWeek: in.BillingWeek, Amount: in.Amount, Currency: in.Currency,
		Term: in.Term, Timezone: in.Timezone, Status: SubActive, CreatedAt: now,
		PaymentDetails: PaymentDetails{Customer: in.Customer, PaymentMethod: in.PaymentMethod, StripeAccount: in.StripeAccount},
	}
	if sub.SubscriptionID == "" {
		sub.SubscriptionID = uuid.NewString()
	}
	if existing, err := s.store.GetSubscription(ctx, account, sub.SubscriptionID); err == nil {
		if existing.SKU == sub.SKU && existing.Amount == sub.Amount && existing.PaymentDetails == sub.PaymentDetails {
			return existing, nil // a retried create
		}
		return Subscription{}, fmt.Errorf("subscription %s: %w", sub.SubscriptionID, ErrDuplicate)
	} else if !errors.Is(err, ErrNotFound) {
		return Subscription{}, err
	}
	today := s.today(sub)
	from := dates.Max(today.AddDays(1), in.StartDate)
	first := sub.Rule().First(from)
	sub.NextPaymentDate = first
	s.scheduleReminder(&sub, first, today, true)

	// Registered before the subscription exists, so the poller's account
	// list always covers every account the table charges on.
	if err := s.store.RegisterChargedAccounts(ctx, sub.PaymentDetails.StripeAccount); err != nil {
		return Subscription{}, err
	}
	tx := s.store.NewTx("create:"+sub.SubscriptionID, now)
	tx.PutSubscription(&sub)
	p := newPeriod(sub, first, Scheduled, ProcInitial, "created", now)
	tx.PutPeriod(&p, false)
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
		if sub.Status != SubCancelled {
			if _, err := s.noAttemptInFlight(ctx, sub); err != nil {
				return err
			}
		}
		switch ch.Action {
		case "pause":
			out, err = s.pause(ctx, sub, ch.Months, ch.Cause)
		case "resume":
			out, err = s.resume(ctx, sub, dates.Date{}, ProcPause, "pause-resume", ch.Cause)
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

// openPeriod reads the SCHEDULED period of the next payment, refusing one
// with an attempt in flight (its outcome is not known yet).
func (s *Service) openPeriod(ctx context.Context, sub Subscription) (Period, error) {
	p, err := s.store.GetPeriod(ctx, sub.AccountID, sub.SubscriptionID, sub.NextPaymentDate)
	if errors.Is(err, ErrNotFound) {
		// Lost by an earlier crash between writes cannot happen (one
		// transaction), but be lenient: recreate it.
		return newPeriod(sub, sub.NextPaymentDate, Scheduled, ProcAdmin, "recreated", s.now()), nil
	}
	if err != nil {
		return Period{}, err
	}
	if p.InFlightKey != "" {
		return Period{}, fmt.Errorf("period %s has a collection attempt in flight: %w", p.BillingDate, ErrConflict)
	}
	return p, nil
}

// pause skips every billing period in the window [next payment, +months):
// the next period becomes PAUSED, the subscription leaves the indexes, and
// a resume marker waits in the payments index for the day before the first
// post-pause reminder. YEARLY subscriptions pause in whole years.
func (s *Service) pause(ctx context.Context, sub Subscription, months int, cause string) (Subscription, error) {
	if sub.Status != SubActive {
		return sub, invalid("only an ACTIVE subscription can be paused (it is %s)", sub.Status)
	}
	if months < 1 || months > s.cfg.MaxPauseMonths {
		return sub, invalid("months: 1 to %d", s.cfg.MaxPauseMonths)
	}
	if sub.Term == dates.Yearly && months%12 != 0 {
		return sub, invalid("months: a YEARLY subscription pauses in multiples of 12")
	}
	p, err := s.openPeriod(ctx, sub)
	if err != nil {
		return sub, err
	}
	now, today := s.now(), s.today(sub)
	from := sub.NextPaymentDate
	until := dates.AddMonthsClamped(from, months)
	resumeAt := sub.Rule().FirstAfter(from, until.AddDays(-1))
	trigger := dates.Max(dates.ReminderDate(resumeAt, s.cfg.ReminderDays, dates.Date{}).AddDays(-1), today.AddDays(1))

	tx := s.store.NewTx(cause, now)
	p.Status, p.Process, p.UpdatedEvent, p.PauseDurationMonths = Paused, ProcPause, "paused", months
	tx.PutPeriod(&p, false)
	sub.Status, sub.PausedFrom, sub.PausedUntil, sub.PauseMonths = SubPaused, from, until, months
	sub.NextPaymentDate = resumeAt
	s.scheduleReminder(&sub, resumeAt, today, true)
	tx.PutSubscription(&sub)
	m, err := s.store.GetResumeMarker(ctx, sub.AccountID, sub.SubscriptionID)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return sub, err
	}
	m.AccountID, m.SubscriptionID, m.SKU, m.ResumeDate, m.TriggerDate = sub.AccountID, sub.SubscriptionID, sub.SKU, until, trigger
	tx.PutResumeMarker(&m)
	if err := s.store.Commit(ctx, tx); err != nil {
		return sub, fmt.Errorf("pause: %w", err)
	}
	return sub, nil
}

// resume ends a pause. at is the first date billing may resume (zero: the
// day after today, a manual resume). Skipped periods become PAUSED_SKIPPED;
// the first period on or after at is SCHEDULED.
func (s *Service) resume(ctx context.Context, sub Subscription, at dates.Date, proc Process, event, cause string) (Subscription, error) {
	if sub.Status != SubPaused {
		return sub, invalid("only a PAUSED subscription can be resumed (it is %s)", sub.Status)
	}
	now, today := s.now(), s.today(sub)
	if at.IsZero() {
		at = today.AddDays(1)
	}
	rule := sub.Rule()
	from := sub.PausedFrom
	if from.IsZero() {
		from = sub.NextPaymentDate
	}
	next := rule.FirstAfter(from, at.AddDays(-1))
	tx := s.store.NewTx(cause, now)
	first, err := s.store.GetPeriod(ctx, sub.AccountID, sub.SubscriptionID, from)
	switch {
	case errors.Is(err, ErrNotFound):
		first = newPeriod(sub, from, Paused, ProcPause, "paused", now)
	case err != nil:
		return sub, err
	}
	if first.Status == Paused {
		if next.Equal(from) {
			first.Status, first.UpdatedEvent = Scheduled, event
		} else {
			first.Status, first.UpdatedEvent = PausedSkipped, "pause-skipped"
		}
		first.Process = proc
		if first.Status.Terminal() {
			first.CompletionDate = now
		}
		tx.PutPeriod(&first, false)
	}
	for d := rule.Next(from); d.Before(next); d = rule.Next(d) {
		skipped := newPeriod(sub, d, PausedSkipped, proc, "pause-skipped", now)
		skipped.PauseDurationMonths, skipped.CompletionDate = sub.PauseMonths, now
		tx.PutPeriod(&skipped, false)
	}
	if !next.Equal(from) {
		np := newPeriod(sub, next, Scheduled, proc, event, now)
		tx.PutPeriod(&np, false)
	}
	sub.Status, sub.PausedFrom, sub.PausedUntil, sub.PauseMonths = SubActive, dates.Date{}, dates.Date{}, 0
	sub.NextPaymentDate = next
	s.scheduleReminder(&sub, next, today, false)
	tx.PutSubscription(&sub)
	if m, err := s.store.GetResumeMarker(ctx, sub.AccountID, sub.SubscriptionID); err == nil {
		tx.DeleteResumeMarker(m)
	} else if !errors.Is(err, ErrNotFound) {
		return sub, err
	}
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
	if m, err := s.store.GetResumeMarker(ctx, sub.AccountID, sub.SubscriptionID); err == nil {
		tx.DeleteResumeMarker(m)
	} else if !errors.Is(err, ErrNotFound) {
		return sub, err
	}
	if err := s.store.Commit(ctx, tx); err != nil {
		return sub, fmt.Errorf("cancel: %w", err)
	}
	return sub, nil
}

// waive forgives one period (SCHEDULED or ERROR) without payment. Waiving
// the next payment moves the subscription on to the following one.
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
	now := s.now()
	tx := s.store.NewTx(cause, now)
	p.Status, p.Process, p.UpdatedEvent, p.CompletionDate, p.NextAttemptDate = Waived, ProcAdmin, "waived", now, dates.Date{}
	tx.PutPeriod(&p, false)
	if sub.Status == SubActive && sub.NextPaymentDate.Equal(d) {
		s.advance(tx, &sub, d, s.today(sub), ProcAdmin, now)
		tx.PutSubscription(&sub)
	}
	if err := s.store.Commit(ctx, tx); err != nil {
		return sub, fmt.Errorf("waive: %w", err)
	}
	return sub, nil
}

// change applies field changes: amount (the subscription and its scheduled
// period), payment day or Friday week (the next period moves within its
// month, or to the next term when that day has passed), or an admin move of
// the next period's billing date. A move changes the period's sort key: the
// old record is deleted and the new one put in the same transaction.
func (s *Service) change(ctx context.Context, sub Subscription, ch Change) (Subscription, error) {
	if ch.Amount == nil && ch.PaymentMethod == nil && ch.PaymentDay == nil && ch.BillingWeek == nil && ch.NextPaymentDate.IsZero() {
		return sub, invalid("nothing to change")
	}
	if ch.PaymentMethod != nil && !strings.HasPrefix(*ch.PaymentMethod, "pm_") {
		return sub, invalid("payment_method: a Stripe payment method id (pm_...)")
	}
	if sub.Status == SubCancelled {
		return sub, invalid("the subscription is CANCELLED")
	}
	dateChange := ch.PaymentDay != nil || ch.BillingWeek != nil || !ch.NextPaymentDate.IsZero()
	if dateChange && sub.Status != SubActive {
		return sub, invalid("billing dates change only on an ACTIVE subscription (it is %s)", sub.Status)
	}
	if ch.Amount != nil && (*ch.Amount < 1 || *ch.Amount > 99_999_999) {
		return sub, invalid("amount: 1 to 99999999 minor units")
	}
	now, today := s.now(), s.today(sub)
	tx := s.store.NewTx(ch.Cause, now)
	var open Period
	if sub.Status == SubActive {
		var err error
		if open, err = s.openPeriod(ctx, sub); err != nil {
			return sub, err
		}
	}
	orig := open
	if ch.Amount != nil {
		sub.Amount = *ch.Amount
		open.Amount = *ch.Amount
		open.UpdatedEvent = "amount-changed"
	}
	if ch.PaymentMethod != nil {
		sub.PaymentDetails.PaymentMethod = *ch.PaymentMethod
		open.PaymentDetails.PaymentMethod = *ch.PaymentMethod
		open.UpdatedEvent = "payment-method-changed"
		// Failed periods are retried with the new payment method too.
		periods, err := s.store.ListPeriods(ctx, sub.AccountID, sub.SubscriptionID)
		if err != nil {
			return sub, err
		}
		for _, p := range periods {
			if p.Status == Error {
				p.PaymentDetails.PaymentMethod, p.Process, p.UpdatedEvent = *ch.PaymentMethod, ProcAdmin, "payment-method-changed"
				tx.PutPeriod(&p, false)
			}
		}
	}
	newDate := sub.NextPaymentDate
	if ch.PaymentDay != nil || ch.BillingWeek != nil {
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
		newDate = rule.InMonth(sub.NextPaymentDate.Year(), sub.NextPaymentDate.Month())
		if !newDate.After(today) {
			newDate = rule.Next(newDate)
		}
	}
	if !ch.NextPaymentDate.IsZero() {
		newDate = ch.NextPaymentDate
		if !newDate.After(today) {
			return sub, invalid("next_payment_date must be after today (%s)", today)
		}
		if !newDate.Before(sub.Rule().Next(sub.NextPaymentDate)) {
			return sub, invalid("next_payment_date must be before the following period (%s)", sub.Rule().Next(sub.NextPaymentDate))
		}
		if !sub.LastPaymentDate.IsZero() && !newDate.After(sub.LastPaymentDate) {
			return sub, invalid("next_payment_date must be after the last payment (%s)", sub.LastPaymentDate)
		}
	}
	switch {
	case sub.Status == SubActive && !newDate.Equal(sub.NextPaymentDate):
		tx.DeletePeriod(orig, "billing-date-changed-to-"+newDate.String())
		moved := open
		moved.BillingDate, moved.Version, moved.Process = newDate, 0, ProcAdmin
		moved.UpdatedEvent = "billing-date-changed-from-" + sub.NextPaymentDate.String()
		tx.PutPeriod(&moved, false)
		sub.NextPaymentDate = newDate
		s.scheduleReminder(&sub, newDate, today, true)
	case sub.Status == SubActive && (ch.Amount != nil || ch.PaymentMethod != nil):
		open.Process = ProcAdmin
		tx.PutPeriod(&open, false)
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
