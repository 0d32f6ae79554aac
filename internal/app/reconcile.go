package app

import (
	"context"
	"sync"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/api"
	billingstore "github.com/stripe-payments/stripe-payments/internal/billing/store"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
	"github.com/stripe-payments/stripe-payments/internal/reconcile"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/thin"
	"github.com/stripe-payments/stripe-payments/poller"
)

// ScheduleActor is who a run started by RECONCILE_EVERY names.
const ScheduleActor = "schedule"

// ReconcileLease is how long a run is held without progress before
// another process takes it over.
const ReconcileLease = 5 * time.Minute

// Reconciliations (docs/design.md §11): the store the API, the console
// and the CLI start runs in, and the runner serve (or the CLI) carries
// them out with, through the one handler, its Stripe requests at the
// budget's background class.
type Reconciliations struct {
	Store  *reconcile.Store
	Runner *reconcile.Runner
}

// newReconciliations builds the store and runner; the handler and the
// Stripe budget must exist.
func (a *App) newReconciliations() *api.Reconciliations {
	cfg := a.Config
	// The accounts the poller walks, from the same sources as the poller.
	polled := thin.Polled{Registry: a.Thin.Registry,
		Others: poller.Accounts{ledger.NewAccounts(a.Pool), billingstore.ChargedAccounts{Store: a.BillingStore}}}
	store := reconcile.NewStore(a.Pool, cfg.ReconcileWindow, a.BillingStore).WithAccounts(polled, cfg.PlatformAccount)
	reader := reconcile.HTTPReader{Client: a.stripeBudget.Client(nil, stripebudget.Background), Key: cfg.StripeAPIKey,
		BaseURL: cfg.StripeAPIBase, Platform: cfg.PlatformAccount}
	runner := reconcile.NewRunner(store, reader, a.Handler, a.Billing, reconcile.RunnerConfig{
		// Longer than the reader's worst wait under a 429 storm (about 3.5
		// min of backoff on one request), so a throttled run is not taken
		// over half-way; a stopped process's run resumes after it.
		Lease: ReconcileLease,
		Log:   a.log.With("component", "reconcile"), Observer: metrics.NewReconcile(a.Metrics.Registry),
		APIVersion: cfg.StripeAPIVersion, Accounts: a.Thin.Registry})
	a.Reconciliations = &Reconciliations{Store: store, Runner: runner}
	return &api.Reconciliations{Service: store, Nudge: runner.Nudge}
}

// startReconciliations runs the runner until ctx ends (a run started by
// the API resumes where it was after a restart), and with RECONCILE_EVERY
// starts a run that often, once across every replica.
func (a *App) startReconciliations(ctx context.Context, wg *sync.WaitGroup) {
	a.safe.Go(ctx, wg, "reconcile", a.Reconciliations.Runner.Run)
	every := a.Config.ReconcileEvery
	if every <= 0 {
		return
	}
	a.safe.Go(ctx, wg, "reconcile_schedule", func(ctx context.Context) {
		// Checked more often than every, so that a replica that restarts
		// does not push the next run back by a whole period.
		tick := time.NewTicker(min(every, time.Minute))
		defer tick.Stop()
		for {
			run, started, err := a.Reconciliations.Store.StartDue(ctx, reconcile.Request{}, ScheduleActor, every)
			switch {
			case err != nil && ctx.Err() == nil:
				a.log.Error("scheduled reconciliation not started", "error", err)
			case started:
				a.log.Info("scheduled reconciliation started", "reconciliation", run.ID, "matched", run.Matched)
				a.Reconciliations.Runner.Nudge()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
}
