// Package reconcile is the reconciliation of docs/design.md §11: what the
// service holds (a purchase's PaymentIntent, a product purchase's
// subscription) compared with what Stripe holds now, beyond the 30 days
// the Events API keeps. Each difference is a finding; unless the run is a
// dry run it is healed by handing the one event handler a snapshot event
// built from Stripe's object, so the live rules apply: state only moves
// forward, effects happen once.
//
// A run is a row of reconciliations and its items, the local objects in
// scope when it was asked for; a background runner (package lease) carries
// it out item by item, its Stripe requests at the budget's background
// class, and a restart resumes at the first item not yet recorded.
package reconcile

import (
	"fmt"
	"slices"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
)

// Kinds of objects a run compares.
const (
	// KindPaymentIntent: a legacy or one-off purchase's PaymentIntent.
	KindPaymentIntent = "payment_intent"
	// KindSubscription: a recurring purchase's Stripe subscription.
	KindSubscription = "subscription"
	// KindBillingAttempt: the billing core's attempt whose bank debit
	// waits to settle (period ACHSENT), named by its PaymentIntent; or
	// whose outcome is unknown (an attempt in flight), named by its
	// idempotency key and settled by the billing core's resolver.
	KindBillingAttempt = "billing_attempt"
	// KindAccount: a connected account the poller walks; one whose access
	// Stripe revoked (deauthorized) stops being polled.
	KindAccount = "account"
)

// AllKinds are the kinds a run compares when none are named.
var AllKinds = []string{KindPaymentIntent, KindSubscription, KindBillingAttempt, KindAccount}

// DefaultWindow is RECONCILE_WINDOW's default: final objects changed
// within it are compared again.
const DefaultWindow = 90 * 24 * time.Hour

// Status of a run.
const (
	StatusRunning = "running"
	StatusDone    = "done"
)

// Outcomes of one item.
const (
	OutcomeInSync = "in_sync"
	OutcomeHealed = "healed"
	OutcomeDrift  = "drift" // found and left as it is: a dry run, or nothing the rules can do
	OutcomeFailed = "failed"
)

// Request asks for a run.
type Request struct {
	DryRun bool
	// Since: final objects changed since then are compared too (zero: now
	// less the window). Objects not final are compared whatever their age.
	Since time.Time
	// Kinds to compare (empty: AllKinds).
	Kinds []string
}

// Normalize checks r and fills its defaults; now and window give Since's.
func (r Request) Normalize(now time.Time, window time.Duration) (Request, error) {
	if window <= 0 {
		window = DefaultWindow
	}
	if r.Since.IsZero() {
		r.Since = now.Add(-window)
	}
	if r.Since.After(now) {
		return r, apperr.Invalid("since must not be in the future")
	}
	r.Since = r.Since.UTC()
	if len(r.Kinds) == 0 {
		r.Kinds = AllKinds
	}
	seen := map[string]bool{}
	var kinds []string
	for _, k := range r.Kinds {
		if !slices.Contains(AllKinds, k) {
			return r, apperr.Invalid("kinds: %q is not one of %v", clip(k), AllKinds)
		}
		if !seen[k] {
			seen[k] = true
			kinds = append(kinds, k)
		}
	}
	r.Kinds = kinds
	return r, nil
}

// Run is one reconciliation and its counts.
type Run struct {
	ID         string
	Status     string
	DryRun     bool
	Since      time.Time
	Kinds      []string
	Matched    int // items in scope
	Checked    int // items compared
	Drifted    int // differences found
	Healed     int // differences the handler healed
	Failed     int // items that could not be compared or healed
	CreatedBy  string
	CreatedAt  time.Time
	FinishedAt time.Time
}

// Finding is one difference.
type Finding struct {
	Object        string
	Kind          string
	StripeAccount string
	Local         string // the service's state
	Stripe        string // Stripe's state
	Action        string // what was done
	Error         string
	At            time.Time
}

// ParseSince reads a run's `since`: an RFC 3339 time or a date
// (YYYY-MM-DD, midnight UTC); "" is the window's start (zero).
func ParseSince(raw string) (time.Time, error) {
	if raw == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, raw); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, raw); err == nil {
		return t, nil
	}
	return time.Time{}, apperr.Invalid("since must be an RFC 3339 time or a date (YYYY-MM-DD)")
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

func errorf(format string, args ...any) error { return fmt.Errorf("reconcile: "+format, args...) }
