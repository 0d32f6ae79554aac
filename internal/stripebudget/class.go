// Package stripebudget is the one Stripe API budget of docs/design.md §9: every
// request any replica or job sends to Stripe draws on a single rate of
// STRIPE_RATE_LIMIT requests per second, kept as a GCRA schedule in Postgres
// (the stripe_budget row), with priorities between classes of requests.
//
// Each replica leases small batches of request slots from the shared
// schedule and hands them to its waiting requests, highest class first.
// Transport applies the budget to an http.Client, so stripe-go's requests
// (its own network retries included) all pass through it; the class of a
// request travels in its context (WithClass). See docs/stripe-budget.md.
package stripebudget

import "context"

// Class is a request's priority; a lower value is served first.
type Class int

// Priority is Class under the name the Budget interface's callers use.
type Priority = Class

// The classes of docs/design.md §9, highest first.
const (
	// Charges: the collections and pay now (the billing core's
	// PaymentIntents and the lookups that settle them).
	Charges Class = iota
	// Hydration: thin-event hydration and the purchase API's requests; the
	// class of a request that names none.
	Hydration
	// Background: the poller and its backfills, bulk replays, test-clock
	// advances.
	Background

	numClasses Class = 3
)

// String is the class's metric label.
func (c Class) String() string {
	switch c {
	case Charges:
		return "charges"
	case Hydration:
		return "hydration"
	case Background:
		return "background"
	}
	return "unknown"
}

func (c Class) valid() bool { return c >= Charges && c < numClasses }

type classKey struct{}

// WithClass returns ctx carrying class c: the Stripe requests made with it
// draw on the budget at that priority.
func WithClass(ctx context.Context, c Class) context.Context {
	return context.WithValue(ctx, classKey{}, c)
}

// ClassOf is the class ctx carries, or def if none.
func ClassOf(ctx context.Context, def Class) Class {
	if c, ok := ctx.Value(classKey{}).(Class); ok && c.valid() {
		return c
	}
	return def
}
