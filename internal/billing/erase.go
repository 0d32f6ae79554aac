package billing

import (
	"context"
	"errors"
	"fmt"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/lock"
)

// Erasure is what an erasure of personal data changed.
type Erasure struct {
	Subscription   bool // the subscription's email was removed
	Periods        int  // periods whose copy of the email was removed
	HistoryEntries int  // history entries that quoted the address
}

// PersonalDataEraser is the store's erasure (package store implements it;
// a store without it cannot erase).
type PersonalDataEraser interface {
	ErasePersonalData(ctx context.Context, account, sub string, entry HistoryEntry) (Erasure, error)
}

// ErasureEvent is the updated_event of the history entry that records an
// erasure.
const ErasureEvent = "personal_data_erased"

// ErrCannotErase: the configured store has no erasure.
var ErrCannotErase = errors.New("this store cannot erase personal data")

// ErasePersonalData erases the subscriber's personal fields (the email)
// from subscription sub of account, its periods and its history entries,
// and appends one history entry recording the erasure (Process ADMIN, no
// billing date of a period: the date of the erasure). It holds the
// account's billing lock, as every writer of these items does. The
// subscription goes on as before: later reminders and payments carry no
// email (no reminder email is sent) until a new one is set.
func (s *Service) ErasePersonalData(ctx context.Context, account, sub string) (Erasure, error) {
	eraser, ok := s.store.(PersonalDataEraser)
	if !ok {
		return Erasure{}, ErrCannotErase
	}
	if !ValidID(account) || !ValidID(sub) {
		return Erasure{}, apperr.New(apperr.CodeNotFound, "not found")
	}
	var out Erasure
	err := s.withLock(ctx, account, func(ctx context.Context, _ *lock.Lock) error {
		now := s.wall().UTC()
		entry := HistoryEntry{AccountID: account, SubscriptionID: sub, BillingDate: s.today(Subscription{}),
			Process: ProcAdmin, UpdatedEvent: ErasureEvent, LastRunDate: now, Cause: "api: personal data erased (email)"}
		var err error
		out, err = eraser.ErasePersonalData(ctx, account, sub, entry)
		return err
	})
	if err != nil {
		return out, fmt.Errorf("erase personal data of %s: %w", sub, err)
	}
	s.log.Info("personal data erased", "account", account, "subscription_id", sub,
		"periods", out.Periods, "history_entries", out.HistoryEntries)
	return out, nil
}
