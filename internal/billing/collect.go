package billing

import (
	"context"
	"errors"
	"fmt"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/lock"
)

// collectEntry acts on one payments-index entry of an account whose lock is
// held: a subscription whose next period is due (to charge, or to skip when
// paused), or a failed period whose retry is due.
func (s *Service) collectEntry(ctx context.Context, l *lock.Lock, e IndexEntry, date dates.Date, rep *Report) error {
	switch {
	case e.Kind == EntrySubscription:
		sub, p, found, err := s.store.GetSubscriptionWithPeriod(ctx, e)
		if errors.Is(err, apperr.ErrNotFound) {
			rep.Add(func(r *Report) { r.Skipped++ })
			return nil
		}
		if err != nil {
			return err
		}
		var due *Period
		if found && p.BillingDate.Equal(sub.NextPeriodDate) {
			due = &p
		}
		return s.collectDue(ctx, l, sub, due, date, rep)
	case e.Kind == EntryPeriod:
		return s.retryEntry(ctx, l, e, date, rep)
	}
	rep.Add(func(r *Report) { r.Skipped++ })
	return nil
}

// collectDue acts on a subscription's next period if it is due by date
// (charges it, or skips it when paused), and keeps going while the next one
// is due too (catching up after days the job did not run).
// due, when known, is the subscription's next period as read with it.
func (s *Service) collectDue(ctx context.Context, l *lock.Lock, sub Subscription, due *Period, date dates.Date, rep *Report) error {
	for range 48 {
		today := s.today(sub)
		cursor, dueDate := sub.NextPeriodDate, sub.DueDate
		if sub.Status == SubCancelled || dueDate.IsZero() || dueDate.After(date) || dueDate.After(today) {
			rep.Add(func(r *Report) { r.Skipped++ })
			return nil
		}
		next, moved, err := s.collectFirst(ctx, l, sub, due, today, rep)
		due = nil
		if err != nil || !moved || next.NextPeriodDate.Equal(cursor) || next.Status == SubCancelled ||
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
func (s *Service) collectFirst(ctx context.Context, l *lock.Lock, sub Subscription, due *Period, today dates.Date, rep *Report) (Subscription, bool, error) {
	var p Period
	if due != nil {
		p = *due
	} else {
		var err error
		p, err = s.store.GetPeriod(ctx, sub.AccountID, sub.SubscriptionID, sub.NextPeriodDate)
		switch {
		case errors.Is(err, apperr.ErrNotFound):
			p = model.NewPeriod(sub, sub.NextPeriodDate, Scheduled, ProcInitial, "recreated", s.now())
		case err != nil:
			return sub, false, err
		}
	}
	if p.Status == Paused {
		return s.skipPaused(ctx, sub, p, today, rep)
	}
	if p.Status != Scheduled {
		return s.moveOn(ctx, sub, p, today, rep)
	}
	if s.cfg.Retry.IsStale(p.Due(), today) && p.InFlightKey == "" {
		return s.markNextStale(ctx, sub, p, today, rep)
	}
	if sub.RemindFor.Equal(p.BillingDate) && p.InFlightKey == "" {
		// Its reminder has not gone out (its day had passed when the period
		// was scheduled or moved, and no reminder run came in between): it
		// goes out now, before the charge (deduplicated per charge date).
		if err := s.notifier.Notify(ctx, model.ReminderAction(sub, p.BillingDate, p.Due(), s.now())); err != nil {
			return sub, false, err
		}
		rep.Add(func(r *Report) { r.Reminded++ })
	}
	return s.attempt(ctx, l, sub, p, ProcInitial, today, rep)
}

// skipPaused makes a paused period whose date came PAUSED_SKIPPED and
// moves the subscription on (collectFirst).
func (s *Service) skipPaused(ctx context.Context, sub Subscription, p Period, today dates.Date, rep *Report) (Subscription, bool, error) {
	// A paused period whose date came: skipped, and the subscription
	// moves on (ACTIVE again after the last one).
	now := s.now()
	tx := NewTx(fmt.Sprintf("collect:%s:pause-skip", today), now)
	p.Status, p.Process, p.UpdatedEvent, p.CompletionDate = PausedSkipped, ProcPause, "pause-skipped", now
	tx.PutPeriod(&p, false)
	if err := s.sched.Advance(ctx, tx, &sub, p.BillingDate, today, ProcPause, now); err != nil {
		return sub, false, err
	}
	tx.PutSubscription(&sub)
	if err := s.store.Commit(ctx, tx); err != nil {
		if errors.Is(err, ErrConflict) {
			rep.Add(func(r *Report) { r.Skipped++ })
			return sub, false, nil
		}
		return sub, false, fmt.Errorf("skip paused period: %w", err)
	}
	rep.Add(func(r *Report) {
		r.PausedSkipped++
		if sub.Status == SubActive {
			r.Resumed++
		}
	})
	return sub, true, nil
}

// moveOn moves the subscription past a next period that is no longer
// SCHEDULED, without charging (collectFirst).
func (s *Service) moveOn(ctx context.Context, sub Subscription, p Period, today dates.Date, rep *Report) (Subscription, bool, error) {
	// Settled elsewhere (a webhook about a charge made outside this job):
	// nothing to charge, but the subscription must move on.
	s.log.Warn("billing job: next payment's period is no longer SCHEDULED; moving on without charging",
		"account", sub.AccountID, "subscription_id", sub.SubscriptionID, "billing_date", p.BillingDate.String(), "status", string(p.Status))
	now := s.now()
	tx := NewTx(s.cause("collect", p, today), now)
	if err := s.sched.Advance(ctx, tx, &sub, p.BillingDate, today, ProcInitial, now); err != nil {
		return sub, false, err
	}
	tx.PutSubscription(&sub)
	if err := s.store.Commit(ctx, tx); err != nil {
		if errors.Is(err, ErrConflict) {
			return sub, false, nil
		}
		return sub, false, fmt.Errorf("move on: %w", err)
	}
	rep.Add(func(r *Report) { r.Skipped++ })
	return sub, true, nil
}

// markNextStale gives up on a next period too old to collect and moves the
// subscription on (collectFirst).
func (s *Service) markNextStale(ctx context.Context, sub Subscription, p Period, today dates.Date, rep *Report) (Subscription, bool, error) {
	now := s.now()
	tx := NewTx(s.cause("collect", p, today), now)
	p.Status, p.Process, p.UpdatedEvent, p.CompletionDate = Stale, ProcInitial, "stale", now
	tx.PutPeriod(&p, false)
	if err := s.sched.Advance(ctx, tx, &sub, p.BillingDate, today, ProcInitial, now); err != nil {
		return sub, false, err
	}
	tx.PutSubscription(&sub)
	if err := s.store.Commit(ctx, tx); err != nil {
		return sub, false, fmt.Errorf("mark stale: %w", err)
	}
	rep.Add(func(r *Report) { r.Stale++ })
	return sub, true, nil
}

func (s *Service) cause(job string, p Period, today dates.Date) string {
	return fmt.Sprintf("%s:%s:attempt-%d", job, today, p.Attempts+1)
}

// retryEntry handles a failed period whose next look is due: retry it,
// or mark it STALE, or (subscription paused) put the retry off.
func (s *Service) retryEntry(ctx context.Context, l *lock.Lock, e IndexEntry, date dates.Date, rep *Report) error {
	p, err := s.store.GetPeriodAt(ctx, e)
	if errors.Is(err, apperr.ErrNotFound) {
		rep.Add(func(r *Report) { r.Skipped++ })
		return nil
	}
	if err != nil {
		return err
	}
	sub, err := s.store.GetSubscription(ctx, p.AccountID, p.SubscriptionID)
	if err != nil {
		return err
	}
	today := s.today(sub)
	if p.Status != Error || p.NextAttemptDate.IsZero() || p.NextAttemptDate.After(date) || p.NextAttemptDate.After(today) {
		rep.Add(func(r *Report) { r.Skipped++ })
		return nil
	}
	now := s.now()
	tx := NewTx(s.cause("retry", p, today), now)
	switch {
	case p.InFlightKey != "":
		// A crashed attempt: finish it with the same key (even if stale now:
		// the charge may already have happened).
		_, _, err := s.attempt(ctx, l, sub, p, ProcRetry, today, rep)
		return err
	case sub.Status == SubCancelled:
		p.Status, p.Process, p.UpdatedEvent, p.CompletionDate, p.NextAttemptDate = Cancelled, ProcRetry, "cancelled", now, dates.Date{}
	case s.cfg.Retry.IsStale(p.Due(), today):
		p.Status, p.Process, p.UpdatedEvent, p.CompletionDate, p.NextAttemptDate = Stale, ProcRetry, "stale", now, dates.Date{}
		rep.Add(func(r *Report) { r.Stale++ })
	default:
		// A pause is about periods not yet charged: a failed period's
		// retries go on.
		_, _, err := s.attempt(ctx, l, sub, p, ProcRetry, today, rep)
		return err
	}
	tx.PutPeriod(&p, false)
	if err := s.store.Commit(ctx, tx); err != nil {
		return fmt.Errorf("update failed period: %w", err)
	}
	return nil
}
