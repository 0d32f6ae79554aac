// Package lifecycle changes subscriptions (docs/design.md §8): create,
// change (amount, payment method, plan, billing dates), pause, resume,
// cancel, waive, reactivate, and the erasure of personal data. Every change
// but a create holds the account's billing lock and is refused while a
// collection attempt is in flight.
package lifecycle

import (
	"context"

	"github.com/stripe-payments/stripe-payments/internal/billing/env"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/billing/outcome"
)

// Lifecycle makes the changes.
type Lifecycle struct {
	*env.Env
	rec *outcome.Recorder
}

// New is the lifecycle over e.
func New(e *env.Env) *Lifecycle { return &Lifecycle{Env: e, rec: &outcome.Recorder{Env: e}} }

// forSub is the lifecycle on sub's clock (env.Env.ForSub).
func (lc *Lifecycle) forSub(ctx context.Context, sub model.Subscription) (*Lifecycle, error) {
	e, err := lc.ForSub(ctx, sub)
	if err != nil {
		return nil, err
	}
	if e == lc.Env {
		return lc, nil
	}
	return New(e), nil
}
