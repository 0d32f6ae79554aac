package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/billing/schedule"
	"github.com/stripe-payments/stripe-payments/internal/lock"
)

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
	Term            *dates.Term // MONTHLY or YEARLY: a rule change, like PaymentDay
	NextPaymentDate dates.Date  // admin move of the next period's billing date
	// SKU with Amount: a plan change (plan.go).
	SKU *string
	// Cause identifies the request in history entries.
	Cause string
}

// UpdateSubscription applies ch holding the account's lock; ErrLocked when a
// collection holds it.
func (lc *Lifecycle) UpdateSubscription(ctx context.Context, account, subID string, ch Change) (model.Subscription, error) {
	if ch.Cause == "" {
		ch.Cause = "api:" + uuid.NewString()[:8]
	}
	var out model.Subscription
	err := lc.WithLock(ctx, account, func(ctx context.Context, _ *lock.Lock) error {
		sub, err := lc.Store.GetSubscription(ctx, account, subID)
		if err != nil {
			return err
		}
		lc, err := lc.forSub(ctx, sub) // its test clock's "today", if it has one
		if err != nil {
			return err
		}
		var before []model.Period
		if sub.Status != model.SubCancelled {
			if before, err = lc.noAttemptInFlight(ctx, sub); err != nil {
				return err
			}
		}
		switch ch.Action {
		case "pause":
			out, err = lc.pause(ctx, sub, ch.Months, ch.Cause)
		case "resume":
			out, err = lc.resume(ctx, sub, ch.Cause)
		case "cancel":
			out, err = lc.cancel(ctx, sub, ch.Cause)
		case "waive":
			out, err = lc.waive(ctx, sub, ch.BillingDate, ch.Cause)
		case "":
			out, err = lc.change(ctx, sub, ch)
		default:
			err = apperr.Invalid("unknown action %q", ch.Action)
		}
		if err != nil || len(before) == 0 {
			return err
		}
		// The periods this change waived, cancelled, or gave a new amount
		// or payment method: their PaymentIntents the customer could still
		// pay are cancelled at Stripe (package outcome, payable.go).
		after, lerr := lc.Store.ListPeriods(ctx, account, subID)
		if lerr != nil {
			lc.Log.Warn("billing: could not read the changed periods to cancel their payable PaymentIntents", "account", account,
				"subscription_id", subID, "error", lerr)
			return nil
		}
		if lc.rec.CancelChanged(ctx, before, after) {
			if fresh, gerr := lc.Store.GetSubscription(ctx, account, subID); gerr == nil {
				out = fresh
			}
		}
		return nil
	})
	return out, err
}

// noAttemptInFlight refuses a change while a collection attempt on any
// period of sub has no recorded outcome: the attempt's rerun must still find
// the subscription as it charged it (a crash must not let a cancelled or
// paused subscription be charged by the rerun).
func (lc *Lifecycle) noAttemptInFlight(ctx context.Context, sub model.Subscription) ([]model.Period, error) {
	periods, err := lc.Store.ListPeriods(ctx, sub.AccountID, sub.SubscriptionID)
	if err != nil {
		return nil, err
	}
	for _, p := range periods {
		if p.InFlightKey != "" {
			return nil, fmt.Errorf("period %s has a collection attempt in flight; retry after the next collection run: %w", p.BillingDate, model.ErrConflict)
		}
	}
	return periods, nil
}

// openPeriod reads the subscription's next period (its cursor), refusing
// one with an attempt in flight (its outcome is not known yet).
func (lc *Lifecycle) openPeriod(ctx context.Context, sub model.Subscription) (model.Period, error) {
	p, err := lc.Store.GetPeriod(ctx, sub.AccountID, sub.SubscriptionID, sub.NextPeriodDate)
	if errors.Is(err, apperr.ErrNotFound) {
		// Lost by an earlier crash between writes cannot happen (one
		// transaction), but be lenient: recreate it.
		return model.NewPeriod(sub, sub.NextPeriodDate, model.Scheduled, model.ProcAdmin, "recreated", lc.Now()), nil
	}
	if err != nil {
		return model.Period{}, err
	}
	if p.InFlightKey != "" {
		return model.Period{}, fmt.Errorf("period %s has a collection attempt in flight: %w", p.BillingDate, model.ErrConflict)
	}
	return p, nil
}

// pause marks the next N periods not yet charged PAUSED (a YEARLY
// subscription: its next period, when it falls within N months); the
// collection job makes each PAUSED_SKIPPED on its date, and the
// subscription is ACTIVE again after the last one. Nothing shifts: the
// first period after the pause keeps its scheduled date and is announced
// as usual.
func (lc *Lifecycle) pause(ctx context.Context, sub model.Subscription, months int, cause string) (model.Subscription, error) {
	if sub.Status != model.SubActive {
		return sub, apperr.Invalid("only an ACTIVE subscription can be paused (it is %s)", sub.Status)
	}
	if months < 1 || months > lc.Cfg.MaxPauseMonths {
		return sub, apperr.Invalid("months: 1 to %d", lc.Cfg.MaxPauseMonths)
	}
	cur, err := lc.openPeriod(ctx, sub)
	if err != nil {
		return sub, err
	}
	if cur.Status != model.Scheduled {
		return sub, fmt.Errorf("next period %s is %s: %w", cur.BillingDate, cur.Status, model.ErrConflict)
	}
	now, today := lc.Now(), lc.Today(sub)
	n := months
	if sub.Term == dates.Yearly {
		if limit := dates.AddMonthsClamped(today, months); cur.BillingDate.After(limit) {
			return sub, apperr.Invalid("the next period (%s) is not within %d months: nothing to pause", cur.BillingDate, months)
		}
		n = 1
	}
	rule := sub.Rule()
	tx := model.NewTx(cause, now)
	var first model.Period
	for d, paused, steps := cur.BillingDate, 0, 0; paused < n; d, steps = rule.Next(d), steps+1 {
		if steps > n+24 {
			return sub, fmt.Errorf("pause: fewer than %d open periods after %s: %w", n, cur.BillingDate, model.ErrConflict)
		}
		p := cur
		if paused > 0 {
			p, err = lc.Store.GetPeriod(ctx, sub.AccountID, sub.SubscriptionID, d)
			switch {
			case errors.Is(err, apperr.ErrNotFound):
				p = model.NewPeriod(sub, d, model.Paused, model.ProcPause, "paused", now)
			case err != nil:
				return sub, err
			case p.Status == model.Cancelled && p.Attempts == 0:
				schedule.Reopen(&p, sub, model.ProcPause, "paused")
			case p.Status != model.Scheduled:
				continue // ended already (waived ahead): not a period to pause
			}
		}
		p.Status, p.Process, p.UpdatedEvent, p.PauseDurationMonths, p.ChargeDate = model.Paused, model.ProcPause, "paused", months, dates.Date{}
		tx.PutPeriod(&p, false)
		if paused == 0 {
			first = p
		}
		sub.PausedUntil = d
		paused++
	}
	sub.PausedFrom, sub.PauseMonths = first.BillingDate, months
	lc.Sched.Point(&sub, first, today, true)
	tx.PutSubscription(&sub)
	if err := lc.Store.Commit(ctx, tx); err != nil {
		return sub, fmt.Errorf("pause: %w", err)
	}
	return sub, nil
}

// resume ends a pause early: the PAUSED periods still in the future are
// SCHEDULED again (and announced, BILLING_REMINDER_DAYS before or at once),
// the ones whose date has come are PAUSED_SKIPPED.
func (lc *Lifecycle) resume(ctx context.Context, sub model.Subscription, cause string) (model.Subscription, error) {
	if sub.Status != model.SubPaused {
		return sub, apperr.Invalid("only a PAUSED subscription can be resumed (it is %s)", sub.Status)
	}
	now, today := lc.Now(), lc.Today(sub)
	rule := sub.Rule()
	tx := model.NewTx(cause, now)
	var first *model.Period
	for d := sub.NextPeriodDate; !d.After(sub.PausedUntil); d = rule.Next(d) {
		p, err := lc.Store.GetPeriod(ctx, sub.AccountID, sub.SubscriptionID, d)
		if errors.Is(err, apperr.ErrNotFound) {
			continue
		}
		if err != nil {
			return sub, err
		}
		if p.Status != model.Paused {
			continue
		}
		p.Process = model.ProcPause
		if d.After(today) {
			p.Status, p.UpdatedEvent = model.Scheduled, "resumed"
			if first == nil {
				first = &p
			}
		} else {
			p.Status, p.UpdatedEvent, p.CompletionDate = model.PausedSkipped, "pause-skipped", now
		}
		tx.PutPeriod(&p, false)
	}
	last := sub.PausedUntil
	sub.Status, sub.PausedFrom, sub.PausedUntil, sub.PauseMonths = model.SubActive, dates.Date{}, dates.Date{}, 0
	if first != nil {
		lc.Sched.Point(&sub, *first, today, true)
	} else if err := lc.Sched.Advance(ctx, tx, &sub, last, today, model.ProcPause, now); err != nil {
		return sub, err
	}
	tx.PutSubscription(&sub)
	if err := lc.Store.Commit(ctx, tx); err != nil {
		return sub, fmt.Errorf("resume: %w", err)
	}
	return sub, nil
}

// cancel ends a subscription: it leaves the indexes, and its open periods
// (scheduled, paused, failed awaiting a retry) become CANCELLED. A period
// with a payment on its way (ACHSENT) is left for its webhook to settle: the
// money moved or it did not. (UpdateSubscription refuses while an attempt
// is in flight.)
func (lc *Lifecycle) cancel(ctx context.Context, sub model.Subscription, cause string) (model.Subscription, error) {
	if sub.Status == model.SubCancelled {
		return sub, nil
	}
	now := lc.Now()
	periods, err := lc.Store.ListPeriods(ctx, sub.AccountID, sub.SubscriptionID)
	if err != nil {
		return sub, err
	}
	tx := model.NewTx(cause, now)
	for _, p := range periods {
		switch p.Status {
		case model.Scheduled, model.Paused, model.Error:
			p.Status, p.Process, p.UpdatedEvent, p.CompletionDate, p.NextAttemptDate = model.Cancelled, model.ProcAdmin, "cancelled", now, dates.Date{}
			tx.PutPeriod(&p, false)
		}
	}
	sub.Status = model.SubCancelled
	sub.NextReminderDate, sub.RemindFor, sub.ReminderPending = dates.Date{}, dates.Date{}, dates.Date{}
	tx.PutSubscription(&sub)
	if err := lc.Store.Commit(ctx, tx); err != nil {
		return sub, fmt.Errorf("cancel: %w", err)
	}
	return sub, nil
}

// waive forgives one period (SCHEDULED or ERROR) without payment. Waiving
// the next period moves the subscription on to the following one.
func (lc *Lifecycle) waive(ctx context.Context, sub model.Subscription, d dates.Date, cause string) (model.Subscription, error) {
	if d.IsZero() {
		return sub, apperr.Invalid("billing_date is required to waive")
	}
	p, err := lc.Store.GetPeriod(ctx, sub.AccountID, sub.SubscriptionID, d)
	if errors.Is(err, apperr.ErrNotFound) {
		return sub, apperr.New(apperr.CodeNotFound, "period %s not found", d)
	}
	if err != nil {
		return sub, err
	}
	if p.Status != model.Scheduled && p.Status != model.Error {
		return sub, apperr.Invalid("only a SCHEDULED or ERROR period can be waived (it is %s)", p.Status)
	}
	if p.InFlightKey != "" {
		return sub, fmt.Errorf("period %s has a collection attempt in flight: %w", d, model.ErrConflict)
	}
	now, today := lc.Now(), lc.Today(sub)
	tx := model.NewTx(cause, now)
	p.Status, p.Process, p.UpdatedEvent, p.CompletionDate, p.NextAttemptDate = model.Waived, model.ProcAdmin, "waived", now, dates.Date{}
	tx.PutPeriod(&p, false)
	switch {
	case sub.Status != model.SubCancelled && sub.NextPeriodDate.Equal(d):
		if err := lc.Sched.Advance(ctx, tx, &sub, d, today, model.ProcAdmin, now); err != nil {
			return sub, err
		}
		tx.PutSubscription(&sub)
	case sub.Status != model.SubCancelled && sub.RemindFor.Equal(d):
		// A period ahead of the cursor (scheduled again by a resume): no
		// reminder for it; announce the one after.
		next := sub.Rule().Next(d)
		lc.Sched.Remind(&sub, next, schedule.ChargeDate(sub, next), today, true)
		tx.PutSubscription(&sub)
	}
	if err := lc.Store.Commit(ctx, tx); err != nil {
		return sub, fmt.Errorf("waive: %w", err)
	}
	return sub, nil
}
