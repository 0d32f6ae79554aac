package model

import (
	"time"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// ClockStatus is a test clock's state (Stripe's names).
type ClockStatus string

const (
	ClockReady     ClockStatus = "ready"
	ClockAdvancing ClockStatus = "advancing"
	// ClockFailed: the last advance stopped on a job that did not finish
	// cleanly (Error says why); advancing again continues from ReachedTime.
	ClockFailed ClockStatus = "internal_failure"
)

// ErrLivemode: test clocks exist in test mode only.
var ErrLivemode = apperr.New(apperr.CodeLivemode, "test clocks are for test mode only: STRIPE_API_KEY is a live key")

// Clock is a test clock, as the store keeps it.
type Clock struct {
	ID   string
	Name string
	// FrozenTime is the time the clock is set to: the target while an
	// advance runs.
	FrozenTime time.Time
	// ReachedTime is how far the jobs have run: FrozenTime once ready. A
	// clock's subscriptions take "now" from it.
	ReachedTime time.Time
	Status      ClockStatus
	Error       string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	Version     int64

	// LeaseOwner holds the clock while it advances, until LeaseUntil (a
	// replica that went away loses it then).
	LeaseOwner string
	LeaseUntil time.Time
}

// ClockMember names one subscription of a test clock.
type ClockMember struct{ AccountID, SubscriptionID string }

// ClockRun is one day of a test clock's advance: the reminder and
// collection jobs run at Time (job date Date).
type ClockRun struct {
	Time time.Time
	Date dates.Date
	// Entries read from the clock's index partitions by both jobs.
	Entries       int
	Reminded      int
	Charged       int // succeeded
	Processing    int // bank debits submitted (ACHSENT)
	Declined      int
	Stale         int
	PausedSkipped int
	Unresolved    int
	Errors        int
	// DebitsSettled are the bank debits whose outcome Stripe's webhook
	// brought while the clock waited on their settlement day;
	// DebitsUnsettled the ones it waited for in vain (they settle on the
	// clock's date of whenever the webhook comes).
	DebitsSettled   int
	DebitsUnsettled int
	// Error: why the advance stopped at this run (status internal_failure).
	Error string
}
