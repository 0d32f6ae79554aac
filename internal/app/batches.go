package app

import (
	"context"
	"sync"

	"github.com/stripe-payments/stripe-payments/internal/api"
	"github.com/stripe-payments/stripe-payments/internal/billing/batchrun"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
)

// Batches are the batch collections (docs/design.md §4, §8): the store the API
// and the console start them in, and the runner serve carries them out
// with, through the billing core's BatchCharge at the charges class.
type Batches struct {
	Store  *batchrun.Store
	Runner *batchrun.Runner
}

// newBatches builds the store and runner; the billing core must exist.
func (a *App) newBatches() *api.Batches {
	store := batchrun.NewStore(a.Pool, a.Billing)
	a.Batches = &Batches{Store: store, Runner: batchrun.NewRunner(store, a.Billing, batchrun.RunnerConfig{
		Log: a.log.With("component", "billing_batch"), Observer: metrics.NewBatches(a.Metrics.Registry)})}
	return &api.Batches{Service: store, Nudge: a.Batches.Runner.Nudge}
}

// startBatches runs the batch runner until ctx ends (through safego: a
// panic restarts it, and the batch resumes where it was).
func (a *App) startBatches(ctx context.Context, wg *sync.WaitGroup) {
	a.safe.Go(ctx, wg, "billing_batch", a.Batches.Runner.Run)
}
