package billing

import (
	"context"
	"errors"
	"fmt"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/billing/schedule"
	"github.com/stripe-payments/stripe-payments/internal/lock"
)

// remindEntry sends a due reminder: claim (conditional write naming the
// period it announces), notify (idempotent per subscription and payment
// date), then move the reminder on to the following period.
func (s *Service) remindEntry(ctx context.Context, _ *lock.Lock, e IndexEntry, date dates.Date, rep *Report) error {
	if e.Kind != EntrySubscription {
		return nil
	}
	sub, err := s.store.GetSubscriptionAt(ctx, e)
	if errors.Is(err, apperr.ErrNotFound) {
		rep.Add(func(r *Report) { r.Skipped++ })
		return nil
	}
	if err != nil {
		return err
	}
	today := s.today(sub)
	if sub.Status == SubCancelled || sub.NextReminderDate.IsZero() || sub.NextReminderDate.After(date) || sub.NextReminderDate.After(today) {
		rep.Add(func(r *Report) { r.Skipped++ })
		return nil
	}
	// target is the period announced (its scheduled date), pay its charge
	// date.
	target := sub.RemindFor
	if target.IsZero() {
		target = sub.NextPeriodDate
	}
	pay := schedule.ChargeDate(sub, target)
	if target.Equal(sub.NextPeriodDate) && sub.Status == SubPaused {
		// Cannot happen (a pause announces the period after it), but a
		// paused period is never announced.
		pay = dates.Date{}
	}
	if !pay.IsZero() && !target.Equal(sub.NextPeriodDate) {
		// A period ahead of the cursor may have ended already (waived
		// after an early resume): none of those is announced (docs/design.md §8).
		p, err := s.store.GetPeriod(ctx, sub.AccountID, sub.SubscriptionID, target)
		switch {
		case err == nil && p.Status != Scheduled:
			pay = dates.Date{}
		case err != nil && !errors.Is(err, apperr.ErrNotFound):
			return err
		}
	}
	now := s.now()
	if !pay.IsZero() && !pay.Before(today) {
		if !sub.ReminderPending.Equal(target) {
			sub.ReminderPending = target
			claim := NewTx("remind", now)
			claim.PutSubscription(&sub)
			if err := s.store.Commit(ctx, claim); err != nil {
				if errors.Is(err, ErrConflict) {
					rep.Add(func(r *Report) { r.Skipped++ })
					return nil
				}
				return fmt.Errorf("claim reminder: %w", err)
			}
		}
		if err := s.notifier.Notify(ctx, model.ReminderAction(sub, target, pay, now)); err != nil {
			return err
		}
		sent := date
		if sent.After(today) {
			sent = today
		}
		sub.LastReminderDate = sent
		rep.Add(func(r *Report) { r.Reminded++ })
	} else {
		rep.Add(func(r *Report) { r.Skipped++ }) // too late to remind (the payment date passed), or not charged
	}
	next := sub.Rule().Next(target)
	sub.ReminderPending, sub.RemindFor = dates.Date{}, next
	sub.NextReminderDate = dates.ReminderDate(schedule.ChargeDate(sub, next), s.cfg.ReminderDays, today.AddDays(1))
	tx := NewTx("remind", now)
	tx.PutSubscription(&sub)
	if err := s.store.Commit(ctx, tx); err != nil && !errors.Is(err, ErrConflict) {
		return fmt.Errorf("advance reminder: %w", err)
	}
	return nil
}
