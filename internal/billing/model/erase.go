package model

import (
	"context"
	"errors"
)

// Erasure is what an erasure of personal data changed.
type Erasure struct {
	Subscription   bool // the subscription's email was removed
	Periods        int  // periods whose copy of the email was removed
	HistoryEntries int  // history entries that quoted the address
	QueuedEmails   int  // reminder emails (queued, dead-lettered or sent) that held the address
}

// QueuedEraser is a notifier that keeps copies of what it queued (package
// notify: the reminder emails in the outbox, each holding the address it is
// sent to); an erasure removes the subscriber's address from them.
type QueuedEraser interface {
	// EraseQueued erases the address from the messages of subscription
	// sub of account; addr is the address the subscription has now.
	EraseQueued(ctx context.Context, account, sub, addr string) (int, error)
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
