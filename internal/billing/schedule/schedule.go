// Package schedule says what is due when (docs/design.md §8 "Billing
// schedule semantics"): a subscription's cursor (its next period, due date
// and next payment) and its pending reminder, and how they move when a
// period is charged, skipped or given up on. It reads the period records a
// move steps over and writes nothing: the changes go into the caller's Tx.
package schedule

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
)

// PeriodReader reads one period record (the store's).
type PeriodReader interface {
	GetPeriod(ctx context.Context, account, sub string, d dates.Date) (model.Period, error)
}

// Schedule moves subscriptions' cursors and reminders.
type Schedule struct {
	// ReminderDays is BILLING_REMINDER_DAYS: a reminder goes out this many
	// days before a payment.
	ReminderDays int
	Periods      PeriodReader
}

// Remind points the pending reminder at the period scheduled on
// period, charged on pay: BILLING_REMINDER_DAYS before pay, or today when
// that day has passed. It leaves a reminder that already points at that
// period or a later one (one reminder per period), unless force (the
// period's charge date changed and it was not announced yet).
func (s Schedule) Remind(sub *model.Subscription, period, pay, today dates.Date, force bool) {
	if !force && !sub.RemindFor.IsZero() && !sub.RemindFor.Before(period) {
		return
	}
	sub.RemindFor = period
	sub.ReminderPending = dates.Date{}
	sub.NextReminderDate = dates.ReminderDate(pay, s.ReminderDays, today)
}

// ChargeDate is the date the period scheduled on period is charged: the
// cursor's may have been moved, later ones are charged on their dates.
func ChargeDate(sub model.Subscription, period dates.Date) dates.Date {
	if period.Equal(sub.NextPeriodDate) && sub.Status == model.SubActive && !sub.DueDate.IsZero() {
		return sub.DueDate
	}
	return period
}

// Point makes p (SCHEDULED or PAUSED) the subscription's next period: the
// cursor, the due date, the next payment, the status (PAUSED while the
// cursor is on a paused period) and the reminder of the next charge.
// force re-announces the next charge (its date changed).
func (s Schedule) Point(sub *model.Subscription, p model.Period, today dates.Date, force bool) {
	sub.NextPeriodDate = p.BillingDate
	next := p.BillingDate
	if p.Status == model.Paused {
		sub.Status, sub.DueDate = model.SubPaused, p.BillingDate
		next = sub.Rule().Next(sub.PausedUntil)
		sub.NextPaymentDate = next
	} else {
		if sub.Status == model.SubPaused {
			sub.Status, sub.PausedFrom, sub.PausedUntil, sub.PauseMonths = model.SubActive, dates.Date{}, dates.Date{}, 0
		}
		sub.DueDate, sub.NextPaymentDate = p.Due(), p.Due()
	}
	s.Remind(sub, next, sub.NextPaymentDate, today, force)
}

// Advance moves sub's cursor past the period scheduled on from (attempted,
// skipped or given up on) to the next one: the rule's next date, whose
// record is reused when it exists (PAUSED or SCHEDULED already, a period
// cancelled by a rule change scheduled again) or created SCHEDULED;
// periods that already ended (waived ahead) are stepped over.
func (s Schedule) Advance(ctx context.Context, tx *model.Tx, sub *model.Subscription, from, today dates.Date, proc model.Process, now time.Time) error {
	rule := sub.Rule()
	next := rule.Next(from)
	for range 120 {
		p, err := s.Periods.GetPeriod(ctx, sub.AccountID, sub.SubscriptionID, next)
		switch {
		case errors.Is(err, apperr.ErrNotFound):
			p = model.NewPeriod(*sub, next, model.Scheduled, proc, "scheduled", now)
			tx.PutPeriod(&p, false)
		case err != nil:
			return fmt.Errorf("next period: %w", err)
		case p.Status == model.Scheduled || p.Status == model.Paused:
		case p.Status == model.Cancelled && p.Attempts == 0 && sub.Status != model.SubCancelled:
			Reopen(&p, *sub, proc, "rescheduled")
			tx.PutPeriod(&p, false)
		default:
			next = rule.Next(next)
			continue
		}
		s.Point(sub, p, today, false)
		return nil
	}
	return fmt.Errorf("next period after %s: no open period within 120 terms", from)
}

// Reopen schedules again a period that a rule change had cancelled (the
// rule brought its date back): its next version, with the subscription's
// current amount and payment details.
func Reopen(p *model.Period, sub model.Subscription, proc model.Process, event string) {
	p.Status, p.Process, p.UpdatedEvent = model.Scheduled, proc, event
	p.Term, p.BillingWeek = sub.Term, sub.BillingWeek // a period of the current rule now
	p.Amount, p.Currency, p.PaymentDetails, p.Email = sub.Amount, sub.Currency, sub.PaymentDetails, sub.Email
	p.SKU = sub.SKU // and of its plan (a plan change since it ended)
	p.ChargeDate, p.CompletionDate, p.NextAttemptDate, p.Error, p.PauseDurationMonths = dates.Date{}, time.Time{}, dates.Date{}, "", 0
}

// OnCursor reports whether p is sub's next period: once p is charged or
// given up on, the cursor moves past it (Advance).
func OnCursor(sub model.Subscription, p model.Period) bool {
	return sub.Status != model.SubCancelled && sub.NextPeriodDate.Equal(p.BillingDate)
}

// Charged records on sub a charge of p (by a job or a webhook) whatever its
// outcome: the last charged period, the last payment, the end of a pending
// downgrade. It reports whether sub changed.
func Charged(sub *model.Subscription, p model.Period) bool {
	changed := false
	if p.BillingDate.After(sub.LastChargedPeriod) {
		sub.LastChargedPeriod = p.BillingDate
		changed = true
	}
	if (p.Status == model.Completed || p.Status == model.Refunded) && p.Due().After(sub.LastPaymentDate) {
		sub.LastPaymentDate = p.Due()
		changed = true
	}
	if DowngradeApplied(*sub, p) { // the first period at the new, lower plan is paid
		sub.PendingDowngrade, changed = false, true
	}
	return changed
}

// DowngradeApplied reports that p's success ends sub's pending downgrade:
// p was charged at the plan and amount sub has now.
func DowngradeApplied(sub model.Subscription, p model.Period) bool {
	return sub.PendingDowngrade && p.Status == model.Completed && p.SKU == sub.SKU && p.Amount == sub.Amount
}

// Due reports whether sub's next period is due by date (the job's date)
// and by today (the subscription's own date): the collection acts on it.
func Due(sub model.Subscription, date, today dates.Date) bool {
	return sub.Status != model.SubCancelled && !sub.DueDate.IsZero() && !sub.DueDate.After(date) && !sub.DueDate.After(today)
}

// Step is what the collection does with a subscription's next period
// once it is due.
type Step int

const (
	// Charge: attempt it (or settle the attempt in flight).
	Charge Step = iota
	// SkipPaused: a paused period whose date came becomes PAUSED_SKIPPED.
	SkipPaused
	// MoveOn: it was settled elsewhere (no longer SCHEDULED): the cursor
	// moves past it, nothing is charged.
	MoveOn
	// GiveUp: too old to collect: STALE, and the cursor moves on.
	GiveUp
)

// NextStep decides what the collection does with p, the due next period
// of a subscription, on today (its date).
func NextStep(p model.Period, today dates.Date, retry dates.RetryPolicy) Step {
	switch {
	case p.Status == model.Paused:
		return SkipPaused
	case p.Status != model.Scheduled:
		return MoveOn
	case retry.IsStale(p.Due(), today) && p.InFlightKey == "":
		return GiveUp
	}
	return Charge
}
