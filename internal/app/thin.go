package app

import (
	"context"
	"sync"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/ingest"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/thin"
	"github.com/stripe-payments/stripe-payments/poller"
)

// ThinEvents is the thin-event side of the program.
type ThinEvents struct {
	Queue    *thin.Queue
	Registry *thin.Registry
	Intake   *thin.Intake
	Hydrator *thin.Hydrator
	Budget   stripebudget.Budget
	// Sweeper lists the Events API v2 for thin events never delivered; serve
	// runs it every POLL_EVERY, beside the poller.
	Sweeper *thin.Sweeper
}

// newThin builds the thin intake and its hydrator, and the one ingest entry
// point (a.Ingest) the webhook and the EventBridge intake hand verified
// bodies to. The handler must exist.
func (a *App) newThin() {
	cfg := a.Config
	t := &ThinEvents{Queue: thin.NewQueue(a.Pool), Registry: thin.NewRegistry(a.Pool), Budget: a.stripeBudget} // the fleet's budget (docs/design.md §9)
	log := a.log.With("component", "thin")
	obs := a.Metrics.NewThin(func(ctx context.Context) (int, time.Time, error) {
		b, err := t.Queue.Backlog(ctx)
		return b.Count, b.Oldest, err
	})
	store := a.Events
	t.Hydrator = thin.NewHydrator(thin.HydratorConfig{Livemode: cfg.Livemode(), PlatformAccount: cfg.PlatformAccount,
		Log: log, Observer: obs, Safe: a.safe, Problems: a.OpsProblems},
		t.Queue, a.ThinRecords, store, thin.StripeAPI{BaseURL: cfg.StripeAPIBase, Key: cfg.StripeAPIKey}, t.Budget, a.Handler, t.Registry)
	t.Intake = thin.NewIntake(thin.IntakeConfig{PlatformAccount: cfg.PlatformAccount, EventTTL: cfg.EventTTL,
		Livemode: cfg.Livemode(), Log: log, Observer: obs}, store, t.Queue, t.Hydrator.Nudge)
	t.Sweeper = &thin.Sweeper{API: thin.StripeAPI{BaseURL: cfg.StripeAPIBase, Key: cfg.StripeAPIKey}, Budget: t.Budget,
		Registry: t.Registry, Records: store, Intake: t.Intake, Log: log}
	a.Thin = t
	a.Ingest = ingest.New(a.Handler, t.Intake)
}

// startThin runs the hydrator, and the thin sweep every POLL_EVERY, until
// ctx ends.
func (a *App) startThin(ctx context.Context, wg *sync.WaitGroup) {
	a.safe.Go(ctx, wg, "thin_hydrator", func(ctx context.Context) { _ = a.Thin.Hydrator.Run(ctx) })
	if a.Config.PollEvery <= 0 {
		return
	}
	a.safe.Go(ctx, wg, "thin_sweep", func(ctx context.Context) {
		poller.Every(ctx, a.Config.PollEvery, func(ctx context.Context) {
			rep, err := a.Thin.Sweeper.Run(ctx)
			if err != nil && ctx.Err() == nil {
				a.log.Warn("thin sweep incomplete", "error", err, "accounts", rep.Accounts, "listed", rep.Listed, "taken", rep.Taken)
				return
			}
			a.log.Info("thin sweep done", "accounts", rep.Accounts, "listed", rep.Listed, "taken", rep.Taken)
		})
	})
}

// ingestOutcome adapts ingest.Intake to the EventBridge intake's Ingester,
// which needs the outcome only.
type ingestOutcome struct{ in *ingest.Intake }

func (o ingestOutcome) Ingest(ctx context.Context, body []byte, source stripeevent.Source) (stripeevent.Outcome, error) {
	res, err := o.in.Ingest(ctx, body, source)
	return res.Outcome, err
}
