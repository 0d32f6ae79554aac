package lifecycle

import (
	"context"
	"fmt"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/lock"
)

// ErasePersonalData erases the subscriber's personal fields (the email)
// from subscription sub of account, its periods and its history entries,
// and appends one history entry recording the erasure (Process ADMIN, no
// billing date of a period: the date of the erasure). It holds the
// account's billing lock, as every writer of these items does. The
// subscription goes on as before: later reminders and payments carry no
// email (no reminder email is sent) until a new one is set.
//
// The reminder emails already queued hold the address too, and the email
// worker sends to the address stored in the message: those copies are
// erased first (QueuedEraser), rather than having the worker look the
// address up when it sends. Erasing the copies leaves no address at rest
// in the outbox (dead letters are kept for weeks and may be re-driven),
// keeps the worker free of the billing store (an outage of DynamoDB does
// not stop emails), and under the lock no reminder with the old address
// can be queued meanwhile. A message a worker already handed to SES
// cannot be recalled.
func (lc *Lifecycle) ErasePersonalData(ctx context.Context, account, sub string) (model.Erasure, error) {
	eraser, ok := lc.Store.(model.PersonalDataEraser)
	if !ok {
		return model.Erasure{}, model.ErrCannotErase
	}
	if !model.ValidID(account) || !model.ValidID(sub) {
		return model.Erasure{}, apperr.New(apperr.CodeNotFound, "not found")
	}
	var out model.Erasure
	err := lc.WithLock(ctx, account, func(ctx context.Context, _ *lock.Lock) error {
		now := lc.Wall().UTC()
		entry := model.HistoryEntry{AccountID: account, SubscriptionID: sub, BillingDate: lc.Today(model.Subscription{}),
			Process: model.ProcAdmin, UpdatedEvent: model.ErasureEvent, LastRunDate: now, Cause: "api: personal data erased (email)"}
		queued := 0
		if qe, ok := lc.Notifier.(model.QueuedEraser); ok {
			current, err := lc.Store.GetSubscription(ctx, account, sub)
			if err != nil {
				return err
			}
			if queued, err = qe.EraseQueued(ctx, account, sub, current.Email); err != nil {
				return err
			}
		}
		var err error
		out, err = eraser.ErasePersonalData(ctx, account, sub, entry)
		out.QueuedEmails = queued
		return err
	})
	if err != nil {
		return out, fmt.Errorf("erase personal data of %s: %w", sub, err)
	}
	lc.Log.Info("personal data erased", "account", account, "subscription_id", sub,
		"periods", out.Periods, "history_entries", out.HistoryEntries, "queued_emails", out.QueuedEmails)
	return out, nil
}
