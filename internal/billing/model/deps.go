package model

import (
	"context"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// The service's collaborators, declared here where they are used; the app
// wires the implementations: internal/billing/store (DynamoDB),
// internal/billing/stripecharge (Stripe), internal/billing/notify (the
// Postgres outbox). Tests decorate them (billingtest.Crasher).

// Store is what the service reads and writes: records, the due-date
// indexes, listings, the sweep watermark, the registry of charged accounts
// and test clocks. Errors are the package's vocabulary (apperr.ErrNotFound,
// ErrConflict, apperr.ErrInvalid for a cursor), never a driver's.
type Store interface {
	RecordStore
	IndexStore
	ListStore
	ClockReader
	// RegisterChargedAccounts records that the billing core charges on
	// these Stripe accounts (idempotent; "" needs no entry).
	RegisterChargedAccounts(ctx context.Context, accounts ...string) error
}

// RecordStore reads subscriptions, periods and PaymentIntent references
// (strongly consistent) and commits changes.
type RecordStore interface {
	// Commit applies every write of tx and appends its history entries, all
	// or nothing. ErrConflict: an item changed since it was read; nothing
	// was written.
	Commit(ctx context.Context, tx *Tx) error
	GetSubscription(ctx context.Context, account, sub string) (Subscription, error)
	GetPeriod(ctx context.Context, account, sub string, d dates.Date) (Period, error)
	// ListPeriods reads every billing period of a subscription, oldest first.
	ListPeriods(ctx context.Context, account, sub string) ([]Period, error)
	// GetPaymentRef finds the period a PaymentIntent was created for.
	GetPaymentRef(ctx context.Context, pi string) (PaymentRef, error)
}

// IndexStore reads the due-date indexes the jobs work from.
type IndexStore interface {
	// Shards is the configured write-shard count of the indexes.
	Shards() int
	// QueryIndex reads the partition of date and shard of index (eventually
	// consistent: callers re-check on the table before acting): of real
	// time when clock is empty, else of that test clock.
	QueryIndex(ctx context.Context, index Index, clock string, date dates.Date, shard int) ([]IndexEntry, error)
	GetSubscriptionAt(ctx context.Context, e IndexEntry) (Subscription, error)
	GetPeriodAt(ctx context.Context, e IndexEntry) (Period, error)
	// GetSubscriptionWithPeriod reads the subscription at a payments-index
	// entry and its period dated on the entry's partition date; found is
	// false when that period does not exist.
	GetSubscriptionWithPeriod(ctx context.Context, e IndexEntry) (sub Subscription, p Period, found bool, err error)
	// SweepWatermark reads the date through which job's runs left nothing
	// behind (zero: never); AdvanceSweep moves it, never backwards.
	SweepWatermark(ctx context.Context, job string) (dates.Date, error)
	AdvanceSweep(ctx context.Context, job string, through dates.Date) error
}

// ListStore pages through what the API lists.
type ListStore interface {
	ListSubscriptions(ctx context.Context, account string, limit int32, cursor string) (Page[Subscription], error)
	ListReceipts(ctx context.Context, account string, now time.Time, retention time.Duration, limit int32, cursor string) (Page[Receipt], error)
	ListHistory(ctx context.Context, account, sub string, limit int32, cursor string) (Page[HistoryEntry], error)
	// ListPeriodsToWatch reads an account's periods with a collection
	// attempt whose outcome is not recorded, and those left unpaid (ERROR,
	// STALE).
	ListPeriodsToWatch(ctx context.Context, account string) ([]Period, error)
	// ListPeriodsPage pages through a subscription's periods, newest first.
	ListPeriodsPage(ctx context.Context, account, sub string, limit int32, cursor string) (Page[Period], error)
	// ListOpenPeriods reads at most limit periods of a subscription that
	// are SCHEDULED or ERROR, or have an attempt in flight, oldest first.
	ListOpenPeriods(ctx context.Context, account, sub string, limit int32) ([]Period, error)
	// FindSubscriptions reads the subscriptions a subscription id, a
	// Stripe customer or an email finds (at most limit), in any account.
	FindSubscriptions(ctx context.Context, by LookupBy, value string, limit int32) ([]Subscription, error)
}

// LookupBy is how FindSubscriptions finds subscriptions.
type LookupBy string

const (
	BySubscription LookupBy = "subscription"
	ByCustomer     LookupBy = "customer"
	ByEmail        LookupBy = "email"
)

// ClockReader reads the test clocks (clock.go): the billing core only takes
// a subscription's "now" from its clock and lists the clocks' batch keys;
// package testclock keeps them (testclock.Store).
type ClockReader interface {
	GetClock(ctx context.Context, id string) (Clock, error)
	ListClockIDs(ctx context.Context) ([]string, error)
}

// Index names one of the due-date indexes.
type Index int

const (
	// PaymentsIndex: subscriptions on their due date, failed periods on
	// their next attempt date (the collection job).
	PaymentsIndex Index = iota + 1
	// RemindersIndex: subscriptions on their next reminder date.
	RemindersIndex
)

// EntryKind is what an index entry points at.
type EntryKind int

const (
	EntryOther EntryKind = iota
	EntrySubscription
	EntryPeriod
)

// IndexEntry is one item of a due-date index partition. PK and SK are the
// item's keys, opaque to the service (the store reads the item at them).
type IndexEntry struct {
	PK, SK string
	// Date is the date of the partition the entry was read from.
	Date dates.Date
	// AccountID is the account the item belongs to; Kind what it is.
	AccountID string
	Kind      EntryKind
}

// Page of a list.
type Page[T any] struct {
	Items      []T
	NextCursor string
}

// Charger makes and looks up the collection's charges at Stripe.
type Charger interface {
	// Charge creates and confirms the PaymentIntent. The error is non-nil
	// exactly when the outcome is Unknown.
	Charge(ctx context.Context, req ChargeRequest) (ChargeResult, error)
	// FindAttempt asks Stripe for the PaymentIntent an attempt whose
	// outcome is unknown created. The error is non-nil when Stripe could
	// not be asked.
	FindAttempt(ctx context.Context, q AttemptQuery) (Lookup, error)
	// Retrieve reads one PaymentIntent on an account ("": the platform).
	Retrieve(ctx context.Context, account, id string) (*stripe.PaymentIntent, error)
	// Cancel cancels a PaymentIntent that can still be paid; when its
	// state forbids it (paid meanwhile, cancelled already) it returns the
	// PaymentIntent as read. The error is non-nil when Stripe could not be
	// asked.
	Cancel(ctx context.Context, account, id, idempotencyKey string) (*stripe.PaymentIntent, error)
	// Refund refunds a succeeded PaymentIntent in full and returns the
	// refund's id.
	Refund(ctx context.Context, account, paymentIntent, idempotencyKey string) (string, error)
}
