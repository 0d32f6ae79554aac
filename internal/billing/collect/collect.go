// Package collect charges what is due (docs/design.md §8): the collection
// job, pay now, batches and the resolution of attempts whose outcome is
// unknown. Each attempt is one sequence under the account's lock: claim,
// charge at Stripe, settle (the kernel), record.
package collect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/env"
	"github.com/stripe-payments/stripe-payments/internal/billing/jobs"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/billing/outcome"
	"github.com/stripe-payments/stripe-payments/internal/billing/schedule"
	"github.com/stripe-payments/stripe-payments/internal/lock"
)

// Collector makes and settles collection attempts.
type Collector struct {
	*env.Env
	rec    *outcome.Recorder
	runner *jobs.Runner
	// queue: the billing queue collection runs go through (nil: in
	// process), shared by the copies on other clocks.
	queue *Queue
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
	return c.on(e), nil
}

// onClock is the collector on test clock clock ("": real time) whose time
// is now (env.Env.OnClock).
func (c *Collector) onClock(clock string, now func() time.Time) *Collector {
	return c.on(c.Env.OnClock(clock, now))
}

// on is a copy of the collector over e, sharing its gauge and queue.
func (c *Collector) on(e *env.Env) *Collector {
	n := New(e, c.runner.Gauge)
	n.queue = c.queue
	return n
}

// Collect charges what is due on date (collect --date D): subscriptions
// whose next period is due (paused periods are skipped on their dates),
// failed periods whose retry is due. It reads the payments index
// partitions of date and the LookbackDays before it, shard by shard in
// parallel, and works account by account under the account's lease lock.
//
// Following one collection: Collect → jobs.Runner.Run (the index read, an
// account at a time) → collectAccount (the lock, an entry at a time) →
// collectDue (what is due: schedule.Due, schedule.NextStep) → attempt
// (claim, Stripe's Charge, settle.Decide, outcome.Recorder.Record).
func (c *Collector) Collect(ctx context.Context, date dates.Date) (*model.Report, error) {
	if c.Charger == nil {
		return nil, errors.New("collect: no Stripe charger configured")
	}
	if c.queue != nil {
		return c.queue.enqueueCollect(ctx, c, date)
	}
	return c.runner.Run(ctx, "collect", date, model.PaymentsIndex, true, c.collectAccount)
}

// collectAccount works one account's payments-index entries holding the
// account's lock: a subscription whose next period is due (collectDue), or
// a failed period whose retry is due (retryEntry). An entry that fails is
// logged and counted and the next one is worked; a crash or the loss of
// the lock ends the account's work.
func (c *Collector) collectAccount(ctx context.Context, account string, entries []model.IndexEntry, date dates.Date, rep *model.Report) error {
	l, err := c.Lock(ctx, account)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err = ctx.Err(); err != nil {
			break
		}
		if !l.Valid() {
			err = fmt.Errorf("account %s: %w", account, lock.ErrNotOwner)
			break
		}
		var eerr error
		switch e.Kind {
		case model.EntrySubscription:
			eerr = c.collectDue(ctx, l, e, date, rep)
		case model.EntryPeriod:
			eerr = c.retryEntry(ctx, l, e, date, rep)
		default:
			rep.Add(func(r *model.Report) { r.Skipped++ })
		}
		if jobs.Fatal(eerr) {
			err = eerr
			break
		}
		if eerr != nil {
			c.runner.EntryFailed(account, e, eerr, rep)
		}
	}
	return c.Unlock(ctx, account, l, err)
}

// collectDue acts on the next period of the subscription at e if it is due
// by date: charges it, or skips it when paused, moves past it when it was
// settled elsewhere, or gives up on it when it is too old to collect
// (schedule.NextStep); and keeps going while the next one is due too
// (catching up after days the job did not run).
func (c *Collector) collectDue(ctx context.Context, l *lock.Lock, e model.IndexEntry, date dates.Date, rep *model.Report) error {
	sub, p, found, err := c.Store.GetSubscriptionWithPeriod(ctx, e)
	if errors.Is(err, apperr.ErrNotFound) {
		rep.Add(func(r *model.Report) { r.Skipped++ })
		return nil
	}
	if err != nil {
		return err
	}
	// p, read with the subscription, is its next period when it is dated
	// on the cursor; after a move the next one is read.
	read := !found || !p.BillingDate.Equal(sub.NextPeriodDate)
	for range 48 {
		today := c.Today(sub)
		if !schedule.Due(sub, date, today) {
			rep.Add(func(r *model.Report) { r.Skipped++ })
			return nil
		}
		cursor := sub.NextPeriodDate
		if read {
			p, err = c.Store.GetPeriod(ctx, sub.AccountID, sub.SubscriptionID, sub.NextPeriodDate)
			switch {
			case errors.Is(err, apperr.ErrNotFound):
				p = model.NewPeriod(sub, sub.NextPeriodDate, model.Scheduled, model.ProcInitial, "recreated", c.Now())
			case err != nil:
				return err
			}
		}
		read = true
		var (
			next  model.Subscription
			moved bool
		)
		switch schedule.NextStep(p, today, c.Cfg.Retry) {
		case schedule.SkipPaused:
			next, moved, err = c.skipPaused(ctx, sub, p, today, rep)
		case schedule.MoveOn:
			next, moved, err = c.moveOn(ctx, sub, p, today, rep)
		case schedule.GiveUp:
			next, moved, err = c.markNextStale(ctx, sub, p, today, rep)
		default:
			if sub.RemindFor.Equal(p.BillingDate) && p.InFlightKey == "" {
				// Its reminder has not gone out (its day had passed when
				// the period was scheduled or moved, and no reminder run
				// came in between): it goes out now, before the charge
				// (deduplicated per charge date).
				if err := c.Notifier.Notify(ctx, model.ReminderAction(sub, p.BillingDate, p.Due(), c.Now())); err != nil {
					return err
				}
				rep.Add(func(r *model.Report) { r.Reminded++ })
			}
			next, moved, err = c.attempt(ctx, l, sub, p, model.ProcInitial, today, rep)
		}
		if err != nil || !moved || next.NextPeriodDate.Equal(cursor) || next.Status == model.SubCancelled ||
			next.DueDate.After(date) || next.DueDate.After(today) {
			return err
		}
		sub = next
	}
	return nil
}

// skipPaused makes a paused period whose date came PAUSED_SKIPPED and
// moves the subscription on (collectDue).
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
// SCHEDULED, without charging (collectDue).
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
// subscription on (collectDue).
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
