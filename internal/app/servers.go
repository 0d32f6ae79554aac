package app

import (
	"context"
	"fmt"

	"github.com/stripe-payments/stripe-payments/internal/api"
	"github.com/stripe-payments/stripe-payments/internal/authlimit"
	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/httpserver"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/ops"
	"github.com/stripe-payments/stripe-payments/internal/opsdata"
	"github.com/stripe-payments/stripe-payments/internal/purchase"
	"github.com/stripe-payments/stripe-payments/internal/replay"
	"github.com/stripe-payments/stripe-payments/internal/stripeclient"
	"github.com/stripe-payments/stripe-payments/webhook"
)

// newServers builds the two listeners (not listening yet): the public one
// and the admin one with its readiness checks; the handler first.
func (a *App) newServers() {
	cfg := a.Config
	a.Server = httpserver.NewPublic(a.log, a.Metrics)
	a.Server.TrustProxies(cfg.Admin.TrustedProxies)
	a.Admin = httpserver.New(a.log, a.Metrics, []httpserver.Check{
		{Name: "dynamodb", Run: func(ctx context.Context) error { return dynamo.Ping(ctx, a.Dynamo, cfg.EventsTable) }},
		{Name: "postgres", Run: func(ctx context.Context) error { return a.Pool.Ping(ctx) }},
		{Name: "ingest", Run: a.Handler.Ready},
	})
	a.Admin.TrustProxies(cfg.Admin.TrustedProxies)
	a.authFailures = authlimit.New(authlimit.Config{Registerer: a.Metrics.Registry})
}

// registerRoutes mounts the webhook on the public listener, and the
// internal and purchase APIs and the operator console on the admin one,
// side by side over the same services, with the bulk replays and batch
// collections they start; every other builder first.
func (a *App) registerRoutes() error {
	cfg, log := a.Config, a.log
	verifier := webhook.NewVerifier(cfg.WebhookSecrets, cfg.WebhookTolerance, nil)
	webhook.NewEndpoint(verifier, a.Ingest, cfg.WebhookMaxBody, log).Register(a.Server.Echo)
	// One replay path for the API, the console and the bulk runner.
	replayer := replay.One{Events: a.Events, Handler: a.Handler, Platform: cfg.PlatformAccount,
		Fetcher: stripeclient.EventFetcher{API: a.stripe, PlatformAccount: cfg.PlatformAccount}}
	apiDeps := api.Deps{
		Events:     a.Events,
		Replayer:   replayer,
		Tracking:   a.tracking,
		Purchases:  purchase.NewService(a.tracking, a.stripe, log.With("component", "purchase")),
		Billing:    a.Billing,
		TestClocks: a.Clocks,
		Outbox:     a.outbox,
		Incidents:  a.Incidents,
		Livemode:   cfg.Livemode(),
		Background: a.clockLife,
		Failures:   a.authFailures,
		Log:        log.With("component", "api"),
	}
	apiDeps.Replays = a.newReplays(replayer)
	apiDeps.Batches = a.newBatches()
	apiDeps.Triggers = a.newTriggers()
	apiDeps.Reconciliations = a.newReconciliations()
	apiDeps.QueueRuns = a.billingQueueRuns
	api.Register(a.Admin.Echo, cfg.InternalAPIToken, apiDeps)
	if err := ops.Register(a.Admin.Echo, ops.Deps{
		Token: cfg.InternalAPIToken, Events: a.Events, Replayer: replayer,
		Billing: a.Billing, TestClocks: a.Clocks, Counter: a.opsCounter, Problems: a.OpsProblems, Runs: a.opsRuns, Outbox: a.outbox,
		Sessions: opsdata.NewSessions(a.Pool), Checkpoints: ledger.NewCheckpoints(a.Pool), Thin: a.Thin.Queue, Quarantine: a.Records,
		Poller: a.pollerMetrics, Log: log.With("component", "ops"), Livemode: cfg.Livemode(), Clocks: a.clockLife,
		Development: cfg.Development, Failures: a.authFailures,
		SessionIdle: cfg.Admin.SessionIdle, SessionMaxAge: cfg.Admin.SessionMaxAge,
		Incidents: a.Incidents, Replays: a.Replays.Store, ReplayNudge: a.Replays.Runner.Nudge,
		Batches: a.Batches.Store, BatchNudge: a.Batches.Runner.Nudge, Triggers: a.Triggers.Store,
		Reconciliations: a.Reconciliations.Store, ReconcileNudge: a.Reconciliations.Runner.Nudge,
		QueueRuns: a.billingQueueRuns,
	}); err != nil {
		return fmt.Errorf("operator console: %w", err)
	}
	return nil
}
