package app

import (
	"context"
	"sync"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/ingest"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/thin"
)

// HydrationRate is the requests per second this process's own Stripe
// budget allows thin-event hydration (DESIGN §9) until the shared fleet
// budget replaces stripebudget.Local behind the same interface.
const HydrationRate = 20

// ThinEvents is the thin-event side of the program (issue 25).
type ThinEvents struct {
	Queue    *thin.Queue
	Registry *thin.Registry
	Intake   *thin.Intake
	Hydrator *thin.Hydrator
	Budget   stripebudget.Budget
}

// newThin builds the thin intake and its hydrator, and the one ingest entry
// point (a.Ingest) the webhook and the EventBridge intake hand verified
// bodies to. The handler must exist.
func (a *App) newThin() {
	cfg := a.Config
	t := &ThinEvents{Queue: thin.NewQueue(a.Pool), Registry: thin.NewRegistry(a.Pool), Budget: stripebudget.NewLocal(HydrationRate)}
	log := a.Log.With("component", "thin")
	obs := a.Metrics.NewThin(func(ctx context.Context) (int, time.Time, error) {
		b, err := t.Queue.Backlog(ctx)
		return b.Count, b.Oldest, err
	})
	// The events table itself, not the write-behind: a thin record is
	// written once, conditionally, before the answer.
	store := a.Events
	t.Hydrator = thin.NewHydrator(thin.HydratorConfig{Livemode: cfg.Livemode(), Log: log, Observer: obs},
		t.Queue, store, thin.StripeAPI{BaseURL: cfg.StripeAPIBase, Key: cfg.StripeAPIKey}, t.Budget, a.Handler, t.Registry)
	t.Intake = thin.NewIntake(thin.IntakeConfig{PlatformAccount: cfg.PlatformAccount, EventTTL: cfg.EventTTL,
		Livemode: cfg.Livemode(), Log: log, Observer: obs}, store, t.Queue, t.Hydrator.Nudge)
	a.Thin = t
	a.Ingest = ingest.New(a.Handler, t.Intake)
}

// startThin runs the hydrator until ctx ends.
func (a *App) startThin(ctx context.Context, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = a.Thin.Hydrator.Run(ctx)
	}()
}
