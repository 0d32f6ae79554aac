// Package remind sends the reminders of coming payments (the remind job,
// docs/design.md §8): one per period, BILLING_REMINDER_DAYS before its
// charge date.
package remind

import (
	"context"
	"errors"
	"fmt"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/env"
	"github.com/stripe-payments/stripe-payments/internal/billing/jobs"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/billing/schedule"
)

// Reminder runs the reminder job.
type Reminder struct {
	*env.Env
	runner *jobs.Runner
}

// New is the reminder over e; runs share gauge.
func New(e *env.Env, gauge *jobs.Gauge) *Reminder {
	return &Reminder{Env: e, runner: &jobs.Runner{Env: e, Gauge: gauge}}
}

// Remind sends the reminders due on date (remind --date D).
func (r *Reminder) Remind(ctx context.Context, date dates.Date) (*model.Report, error) {
	return r.runner.Run(ctx, "remind", date, model.RemindersIndex, false, r.remindAccount)
}

// remindAccount sends the reminders due in one account's entries (no lock:
// a reminder's claim is a conditional write).
func (r *Reminder) remindAccount(ctx context.Context, account string, entries []model.IndexEntry, date dates.Date, rep *model.Report) error {
	return r.runner.EachEntry(ctx, account, entries, date, rep, r.remindEntry)
}

// remindEntry sends a due reminder: claim (conditional write naming the
// period it announces), notify (idempotent per subscription and payment
// date), then move the reminder on to the following period.
func (r *Reminder) remindEntry(ctx context.Context, e model.IndexEntry, date dates.Date, rep *model.Report) error {
	if e.Kind != model.EntrySubscription {
		return nil
	}
	sub, err := r.Store.GetSubscriptionAt(ctx, e)
	if errors.Is(err, apperr.ErrNotFound) {
		rep.Add(func(r *model.Report) { r.Skipped++ })
		return nil
	}
	if err != nil {
		return err
	}
	today := r.Today(sub)
	if sub.Status == model.SubCancelled || sub.NextReminderDate.IsZero() || sub.NextReminderDate.After(date) || sub.NextReminderDate.After(today) {
		rep.Add(func(r *model.Report) { r.Skipped++ })
		return nil
	}
	// target is the period announced (its scheduled date), pay its charge
	// date.
	target := sub.RemindFor
	if target.IsZero() {
		target = sub.NextPeriodDate
	}
	pay := schedule.ChargeDate(sub, target)
	if target.Equal(sub.NextPeriodDate) && sub.Status == model.SubPaused {
		// Cannot happen (a pause announces the period after it), but a
		// paused period is never announced.
		pay = dates.Date{}
	}
	if !pay.IsZero() && !target.Equal(sub.NextPeriodDate) {
		// A period ahead of the cursor may have ended already (waived
		// after an early resume): none of those is announced (docs/design.md §8).
		p, err := r.Store.GetPeriod(ctx, sub.AccountID, sub.SubscriptionID, target)
		switch {
		case err == nil && p.Status != model.Scheduled:
			pay = dates.Date{}
		case err != nil && !errors.Is(err, apperr.ErrNotFound):
			return err
		}
	}
	now := r.Now()
	if !pay.IsZero() && !pay.Before(today) {
		if !sub.ReminderPending.Equal(target) {
			sub.ReminderPending = target
			claim := model.NewTx("remind", now)
			claim.PutSubscription(&sub)
			if err := r.Store.Commit(ctx, claim); err != nil {
				if errors.Is(err, model.ErrConflict) {
					rep.Add(func(r *model.Report) { r.Skipped++ })
					return nil
				}
				return fmt.Errorf("claim reminder: %w", err)
			}
		}
		if err := r.Notifier.Notify(ctx, model.ReminderAction(sub, target, pay, now)); err != nil {
			return err
		}
		sent := date
		if sent.After(today) {
			sent = today
		}
		sub.LastReminderDate = sent
		rep.Add(func(r *model.Report) { r.Reminded++ })
	} else {
		rep.Add(func(r *model.Report) { r.Skipped++ }) // too late to remind (the payment date passed), or not charged
	}
	next := sub.Rule().Next(target)
	sub.ReminderPending, sub.RemindFor = dates.Date{}, next
	sub.NextReminderDate = dates.ReminderDate(schedule.ChargeDate(sub, next), r.Cfg.ReminderDays, today.AddDays(1))
	tx := model.NewTx("remind", now)
	tx.PutSubscription(&sub)
	if err := r.Store.Commit(ctx, tx); err != nil && !errors.Is(err, model.ErrConflict) {
		return fmt.Errorf("advance reminder: %w", err)
	}
	return nil
}
