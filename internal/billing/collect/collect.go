// Package collect charges what is due (docs/design.md §8): the collection
// job, pay now, batches and the resolution of attempts whose outcome is
// unknown. Each attempt is one sequence under the account's lock: claim,
// charge at Stripe, settle (the kernel), record.
package collect

import (
	"context"
	"errors"
	"fmt"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/env"
	"github.com/stripe-payments/stripe-payments/internal/billing/jobs"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/billing/outcome"
	"github.com/stripe-payments/stripe-payments/internal/lock"
)

// Collector makes and settles collection attempts.
type Collector struct {
	*env.Env
	rec    *outcome.Recorder
	runner *jobs.Runner
}

// New is the collector over e; runs share gauge.
func New(e *env.Env, gauge *jobs.Gauge) *Collector {
	return &Collector{Env: e, rec: &outcome.Recorder{Env: e}, runner: &jobs.Runner{Env: e, Gauge: gauge}}
}

// forSub is the collector on sub's clock (env.Env.ForSub).
func (c *Collector) forSub(ctx context.Context, sub model.Subscription) (*Collector, error) {
	e, err := c.ForSub(ctx, sub)
	if err != nil {
		return nil, err
	}
	if e == c.Env {
		return c, nil
	}
	return New(e, c.runner.Gauge), nil
}

// Collect charges what is due on date (collect --date D): subscriptions
// whose next period is due (paused periods are skipped on their dates),
// failed periods whose retry is due. It reads the payments index partitions of date and the LookbackDays
// before it, shard by shard in parallel, and works account by account under
// the account's lease lock.
func (c *Collector) Collect(ctx context.Context, date dates.Date) (*model.Report, error) {
	if c.Charger == nil {
		return nil, errors.New("collect: no Stripe charger configured")
	}
	return c.runner.Run(ctx, "collect", date, model.PaymentsIndex, true, c.collectEntry)
}

// collectEntry acts on one payments-index entry of an account whose lock is
// held: a subscription whose next period is due (to charge, or to skip when
// paused), or a failed period whose retry is due.
func (c *Collector) collectEntry(ctx context.Context, l *lock.Lock, e model.IndexEntry, date dates.Date, rep *model.Report) error {
	switch {
	case e.Kind == model.EntrySubscription:
		sub, p, found, err := c.Store.GetSubscriptionWithPeriod(ctx, e)
		if errors.Is(err, apperr.ErrNotFound) {
			rep.Add(func(r *model.Report) { r.Skipped++ })
			return nil
		}
		if err != nil {
			return err
		}
		var due *model.Period
		if found && p.BillingDate.Equal(sub.NextPeriodDate) {
			due = &p
		}
		return c.collectDue(ctx, l, sub, due, date, rep)
	case e.Kind == model.EntryPeriod:
		return c.retryEntry(ctx, l, e, date, rep)
	}
	rep.Add(func(r *model.Report) { r.Skipped++ })
	return nil
}

// collectDue acts on a subscription's next period if it is due by date
// (charges it, or skips it when paused), and keeps going while the next one
// is due too (catching up after days the job did not run).
// due, when known, is the subscription's next period as read with it.
func (c *Collector) collectDue(ctx context.Context, l *lock.Lock, sub model.Subscription, due *model.Period, date dates.Date, rep *model.Report) error {
	for range 48 {
		today := c.Today(sub)
		cursor, dueDate := sub.NextPeriodDate, sub.DueDate
		if sub.Status == model.SubCancelled || dueDate.IsZero() || dueDate.After(date) || dueDate.After(today) {
			rep.Add(func(r *model.Report) { r.Skipped++ })
			return nil
		}
		next, moved, err := c.collectFirst(ctx, l, sub, due, today, rep)
		due = nil
		if err != nil || !moved || next.NextPeriodDate.Equal(cursor) || next.Status == model.SubCancelled ||
			next.DueDate.After(date) || next.DueDate.After(today) {
			return err
		}
		sub = next
	}
	return nil
}

// collectFirst makes the first attempt on sub's next period, or marks it
// STALE when it is too old to collect, or PAUSED_SKIPPED when it is paused.
// It returns the subscription as written when it moved on.
func (c *Collector) collectFirst(ctx context.Context, l *lock.Lock, sub model.Subscription, due *model.Period, today dates.Date, rep *model.Report) (model.Subscription, bool, error) {
	var p model.Period
	if due != nil {
		p = *due
	} else {
		var err error
		p, err = c.Store.GetPeriod(ctx, sub.AccountID, sub.SubscriptionID, sub.NextPeriodDate)
		switch {
		case errors.Is(err, apperr.ErrNotFound):
			p = model.NewPeriod(sub, sub.NextPeriodDate, model.Scheduled, model.ProcInitial, "recreated", c.Now())
		case err != nil:
			return sub, false, err
		}
	}
	if p.Status == model.Paused {
		return c.skipPaused(ctx, sub, p, today, rep)
	}
	if p.Status != model.Scheduled {
		return c.moveOn(ctx, sub, p, today, rep)
	}
	if c.Cfg.Retry.IsStale(p.Due(), today) && p.InFlightKey == "" {
		return c.markNextStale(ctx, sub, p, today, rep)
	}
	if sub.RemindFor.Equal(p.BillingDate) && p.InFlightKey == "" {
		// Its reminder has not gone out (its day had passed when the period
		// was scheduled or moved, and no reminder run came in between): it
		// goes out now, before the charge (deduplicated per charge date).
		if err := c.Notifier.Notify(ctx, model.ReminderAction(sub, p.BillingDate, p.Due(), c.Now())); err != nil {
			return sub, false, err
		}
		rep.Add(func(r *model.Report) { r.Reminded++ })
	}
	return c.attempt(ctx, l, sub, p, model.ProcInitial, today, rep)
}

// skipPaused makes a paused period whose date came PAUSED_SKIPPED and
// moves the subscription on (collectFirst).
func (c *Collector) skipPaused(ctx context.Context, sub model.Subscription, p model.Period, today dates.Date, rep *model.Report) (model.Subscription, bool, error) {
	// A paused period whose date came: skipped, and the subscription
	// moves on (ACTIVE again after the last one).
	now := c.Now()
	tx := model.NewTx(fmt.Sprintf("collect:%s:pause-skip", today), now)
	p.Status, p.Process, p.UpdatedEvent, p.CompletionDate = model.PausedSkipped, model.ProcPause, "pause-skipped", now
	tx.PutPeriod(&p, false)
	if err := c.Sched.Advance(ctx, tx, &sub, p.BillingDate, today, model.ProcPause, now); err != nil {
		return sub, false, err
	}
	tx.PutSubscription(&sub)
	if err := c.Store.Commit(ctx, tx); err != nil {
		if errors.Is(err, model.ErrConflict) {
			rep.Add(func(r *model.Report) { r.Skipped++ })
			return sub, false, nil
		}
		return sub, false, fmt.Errorf("skip paused period: %w", err)
	}
	rep.Add(func(r *model.Report) {
		r.PausedSkipped++
		if sub.Status == model.SubActive {
			r.Resumed++
		}
	})
	return sub, true, nil
}

// moveOn moves the subscription past a next period that is no longer
// SCHEDULED, without charging (collectFirst).
func (c *Collector) moveOn(ctx context.Context, sub model.Subscription, p model.Period, today dates.Date, rep *model.Report) (model.Subscription, bool, error) {
	// Settled elsewhere (a webhook about a charge made outside this job):
	// nothing to charge, but the subscription must move on.
	c.Log.Warn("billing job: next payment's period is no longer SCHEDULED; moving on without charging",
		"account", sub.AccountID, "subscription_id", sub.SubscriptionID, "billing_date", p.BillingDate.String(), "status", string(p.Status))
	now := c.Now()
	tx := model.NewTx(c.Cause("collect", p, today), now)
	if err := c.Sched.Advance(ctx, tx, &sub, p.BillingDate, today, model.ProcInitial, now); err != nil {
		return sub, false, err
	}
	tx.PutSubscription(&sub)
	if err := c.Store.Commit(ctx, tx); err != nil {
		if errors.Is(err, model.ErrConflict) {
			return sub, false, nil
		}
		return sub, false, fmt.Errorf("move on: %w", err)
	}
	rep.Add(func(r *model.Report) { r.Skipped++ })
	return sub, true, nil
}

// markNextStale gives up on a next period too old to collect and moves the
// subscription on (collectFirst).
func (c *Collector) markNextStale(ctx context.Context, sub model.Subscription, p model.Period, today dates.Date, rep *model.Report) (model.Subscription, bool, error) {
	now := c.Now()
	tx := model.NewTx(c.Cause("collect", p, today), now)
	p.Status, p.Process, p.UpdatedEvent, p.CompletionDate = model.Stale, model.ProcInitial, "stale", now
	tx.PutPeriod(&p, false)
	if err := c.Sched.Advance(ctx, tx, &sub, p.BillingDate, today, model.ProcInitial, now); err != nil {
		return sub, false, err
	}
	tx.PutSubscription(&sub)
	if err := c.Store.Commit(ctx, tx); err != nil {
		return sub, false, fmt.Errorf("mark stale: %w", err)
	}
	rep.Add(func(r *model.Report) { r.Stale++ })
	return sub, true, nil
}

// retryEntry handles a failed period whose next look is due: retry it,
// or mark it STALE, or (subscription paused) put the retry off.
func (c *Collector) retryEntry(ctx context.Context, l *lock.Lock, e model.IndexEntry, date dates.Date, rep *model.Report) error {
	p, err := c.Store.GetPeriodAt(ctx, e)
	if errors.Is(err, apperr.ErrNotFound) {
		rep.Add(func(r *model.Report) { r.Skipped++ })
		return nil
	}
	if err != nil {
		return err
	}
	sub, err := c.Store.GetSubscription(ctx, p.AccountID, p.SubscriptionID)
	if err != nil {
		return err
	}
	today := c.Today(sub)
	if p.Status != model.Error || p.NextAttemptDate.IsZero() || p.NextAttemptDate.After(date) || p.NextAttemptDate.After(today) {
		rep.Add(func(r *model.Report) { r.Skipped++ })
		return nil
	}
	now := c.Now()
	tx := model.NewTx(c.Cause("retry", p, today), now)
	switch {
	case p.InFlightKey != "":
		// A crashed attempt: finish it with the same key (even if stale now:
		// the charge may already have happened).
		_, _, err := c.attempt(ctx, l, sub, p, model.ProcRetry, today, rep)
		return err
	case sub.Status == model.SubCancelled:
		p.Status, p.Process, p.UpdatedEvent, p.CompletionDate, p.NextAttemptDate = model.Cancelled, model.ProcRetry, "cancelled", now, dates.Date{}
	case c.Cfg.Retry.IsStale(p.Due(), today):
		p.Status, p.Process, p.UpdatedEvent, p.CompletionDate, p.NextAttemptDate = model.Stale, model.ProcRetry, "stale", now, dates.Date{}
		rep.Add(func(r *model.Report) { r.Stale++ })
	default:
		// A pause is about periods not yet charged: a failed period's
		// retries go on.
		_, _, err := c.attempt(ctx, l, sub, p, model.ProcRetry, today, rep)
		return err
	}
	tx.PutPeriod(&p, false)
	if err := c.Store.Commit(ctx, tx); err != nil {
		return fmt.Errorf("update failed period: %w", err)
	}
	return nil
}
