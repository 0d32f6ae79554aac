// Package app wires the service together from a Config: clients, stores, the
// handler and the HTTP server. cmd/stripe-payments and the end-to-end tests
// both start the real program through it.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/stripe-payments/stripe-payments/internal/api"
	"github.com/stripe-payments/stripe-payments/internal/authlimit"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/feedqueue"
	billingstore "github.com/stripe-payments/stripe-payments/internal/billing/store"
	"github.com/stripe-payments/stripe-payments/internal/billing/testclock"
	"github.com/stripe-payments/stripe-payments/internal/config"
	"github.com/stripe-payments/stripe-payments/internal/dispatch"
	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/email"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/handler"
	"github.com/stripe-payments/stripe-payments/internal/httpserver"
	"github.com/stripe-payments/stripe-payments/internal/incidents"
	"github.com/stripe-payments/stripe-payments/internal/ingest"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
	"github.com/stripe-payments/stripe-payments/internal/ops"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/postgres"
	"github.com/stripe-payments/stripe-payments/internal/purchase"
	"github.com/stripe-payments/stripe-payments/internal/recordq"
	"github.com/stripe-payments/stripe-payments/internal/safego"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/stripeclient"
	"github.com/stripe-payments/stripe-payments/internal/thin"
	"github.com/stripe-payments/stripe-payments/internal/tracking"
	"github.com/stripe-payments/stripe-payments/webhook"
)

// App is one running instance of the service.
type App struct {
	Config  config.Config
	Log     *slog.Logger
	Dynamo  *dynamodb.Client
	Pool    *pgxpool.Pool
	Events  *events.Store  // the events table, reading through Records
	Records *recordq.Queue // the events table's write-behind
	Ledger  *ledger.Ledger
	Handler *handler.Handler
	Metrics *metrics.Metrics
	// Server is the public listener (LISTEN_ADDR): the webhook and
	// /healthz only. Admin (ADMIN_LISTEN_ADDR) serves the console, the
	// internal and purchase APIs, /metrics, /readyz and /healthz (docs/design.md §3
	// "Two listeners").
	Server *httpserver.Server
	Admin  *httpserver.Server
	// Safe starts every background goroutine: a panic is recovered,
	// logged, counted (stripe_payments_panics_total) and the loop restarted.
	Safe *safego.Starter

	// Stripe API client, tracking store, actions dispatcher (started by
	// Start, stopped by Stop).
	Stripe *client.API
	// StripeBudget is the Stripe API budget every replica shares.
	StripeBudget *stripebudget.Shared
	Tracking     *tracking.Store
	Actions      *dispatch.Dispatcher
	// Emails sends reminder emails through SES; nil unless SES_FROM_ADDRESS.
	Emails *outbox.Worker
	stopBg func()

	// Billing is the recurring billing core; BillingFeed applies the Stripe
	// events about its charges (outbox topic "billing").
	Billing     *billing.Service
	BillingFeed *outbox.Worker
	// Clocks is the test-clock service over Billing.
	Clocks *testclock.Service
	// BillingStore is the billing core's DynamoDB store (the poller lists
	// the Stripe accounts it charges on).
	BillingStore *billingstore.Store

	// Outbox lists and re-drives dead letters and reads backlog figures
	// (internal API, operator console).
	Outbox        *outbox.Store
	OutboxMetrics *metrics.Outbox

	// Ops: what the operator console records (events per hour, failed and
	// rejected events, billing runs).
	OpsCounter  *ops.Counter
	OpsProblems *ops.Problems
	// Incidents groups what is broken (docs/design.md §4, incidents).
	Incidents *incidents.Store
	Replays   *Replays
	Batches   *Batches
	OpsRuns   *ops.Runs
	// AuthFailures limits wrong INTERNAL_API_TOKEN guesses per client
	// address, on the console's login and the bearer APIs alike.
	AuthFailures *authlimit.Limiter

	// Thin events (intake, hydrator, account registry) and Ingest, the one
	// entry point for a verified event body of either shape (thin.go).
	Thin *ThinEvents
	// ThinRecords writes queued thin notifications' records behind the
	// answer and reads them until then (part of Events' read-through).
	ThinRecords *thin.Recorder
	Ingest      *ingest.Intake

	// clocks bounds the test clocks' advances, which outlive the requests
	// that start them; stopClocks ends them at shutdown (an advance stops
	// between two days and is continued by the next advance request).
	clocks     context.Context
	stopClocks context.CancelFunc
	// stopWorkers stops what Start started beyond the server and the
	// background workers (poller, billing, pprof).
	stopWorkers func()
}

// Option customises New.
type Option func(*options)

type options struct {
	routes []func(handler.Routes) handler.Routes
}

// WithRoutes changes the handler's route table (handler.NewRoutes) before
// the handler is built: tests add a step with Routes.With, e.g. to inject a
// panic.
func WithRoutes(change func(handler.Routes) handler.Routes) Option {
	return func(o *options) { o.routes = append(o.routes, change) }
}

// New connects to DynamoDB and Postgres and builds every component. It does
// not listen yet.
func New(ctx context.Context, cfg config.Config, log *slog.Logger, opts ...Option) (*App, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	m := metrics.New()
	ddb, err := dynamo.NewClient(ctx, cfg.AWSRegion, cfg.DynamoEndpoint,
		dynamo.WithTimeout(cfg.Limits.DynamoTimeout),
		dynamo.WithRequestCounter(func(op string) { m.DynamoRequests.WithLabelValues(op).Inc() }))
	if err != nil {
		return nil, err
	}
	pool, err := postgres.ConnectWith(ctx, cfg.DatabaseURL, postgres.PoolLimits{
		MaxConns:         int32(cfg.Limits.DatabaseMaxConns),
		ConnectTimeout:   cfg.Limits.DatabaseConnectTimeout,
		StatementTimeout: cfg.Limits.DatabaseStatementTimeout,
		TCPUserTimeout:   cfg.Limits.DatabaseTCPUserTimeout,
	})
	if err != nil {
		return nil, err
	}
	a := &App{Config: cfg, Log: log, Dynamo: ddb, Pool: pool, Metrics: m,
		Safe: safego.New(log, metrics.NewPanics(m.Registry), time.Second)}
	a.clocks, a.stopClocks = context.WithCancel(context.Background())
	a.newOutbox()
	a.OpsProblems = ops.NewProblems(pool, log.With("component", "ops"))
	a.Incidents = incidents.New(pool, incidents.Config{PlatformAccount: cfg.PlatformAccount})
	a.Metrics.WatchIncidents(a.Incidents.Counts)
	table := events.NewStore(ddb, cfg.EventsTable, cfg.EventTTL, nil)
	recordMetrics := m.NewRecords()
	// The write-behind writes through the console's problem tracking, as
	// the handler does: a re-driven event leaves the dead-letter list when
	// its processed record is written.
	a.Records = recordq.New(pool, a.OpsProblems.Track(table), recordq.Config{
		Writers: cfg.IngestRecords.Writers, MaxBacklog: cfg.IngestRecords.Backlog, Linger: cfg.IngestRecords.Linger,
		MaxBacklogBytes: cfg.IngestRecords.BacklogBytes, QuarantineAfter: cfg.IngestRecords.QuarantineAfter,
		Log: log.With("component", "records"), Observer: recordMetrics, Safe: a.Safe,
	})
	// Queued thin notifications are read from their queue until their
	// records are written behind the answer (thin.Recorder).
	a.ThinRecords = &thin.Recorder{Queue: thin.NewQueue(pool), Table: table, PlatformAccount: cfg.PlatformAccount, EventTTL: cfg.EventTTL}
	// Failures and rejections written through a.Events are marked for the
	// write-behind (events.Marker): the joined Pending does not pass Mark on.
	a.Events = table.WithPending(events.JoinPending(a.Records, a.ThinRecords)).WithMarker(a.Records)
	a.Ledger = ledger.New(pool)
	// Every Stripe request of this replica draws on the one shared budget
	// (docs/design.md §9); a request names its class in its context, else it is
	// the client's.
	a.StripeBudget, err = stripebudget.New(stripebudget.PGStore{Pool: pool}, stripebudget.Config{
		Rate: cfg.Billing.StripeRateLimit, Replicas: cfg.Billing.StripeExpectedReplicas,
		Log: log, Observer: metrics.NewStripeBudget(m.Registry)})
	if err != nil {
		pool.Close()
		return nil, err
	}
	a.Stripe = stripeclient.New(stripeclient.Options{APIKey: cfg.StripeAPIKey, BaseURL: cfg.StripeAPIBase, Log: log,
		HTTPClient: a.StripeBudget.Client(nil, stripebudget.Hydration)})
	a.Tracking = tracking.NewStore(pool)
	a.Actions = dispatch.New(pool, dispatch.Config{URL: cfg.ActionsURL, Secret: cfg.ActionsSecret, Log: log.With("component", "actions"), Policy: a.outboxPolicy()})
	flows := tracking.NewFlows(tracking.FlowsConfig{Log: log, Invoices: stripeclient.InvoiceFetcher(a.Stripe), Processed: a.Ledger.Processed})
	if cfg.SESFromAddress != "" {
		ses, err := email.NewSESClient(ctx, cfg.AWSRegion, cfg.SESEndpoint)
		if err != nil {
			pool.Close()
			return nil, err
		}
		sender := email.Sender{Client: ses, From: cfg.SESFromAddress, ConfigurationSet: cfg.SESConfigurationSet}
		a.Emails = &outbox.Worker{Pool: pool, Topic: email.Topic, Deliver: sender.Deliver, Log: log.With("component", "email")}
		a.outboxPolicy().Apply(a.Emails)
	}
	if err := a.newBilling(); err != nil {
		pool.Close()
		return nil, err
	}
	a.OpsCounter = ops.NewCounter(pool, log.With("component", "ops"), nil)
	a.OpsRuns = ops.NewRuns(pool, m.Registry)
	routes := handler.NewRoutes(flows, feedqueue.Enqueue)
	for _, change := range o.routes {
		routes = change(routes)
	}
	if err := routes.Check(); err != nil {
		pool.Close()
		return nil, fmt.Errorf("event routes: %w", err)
	}
	a.Handler = handler.New(handler.Config{
		PlatformAccount: cfg.PlatformAccount,
		EventTTL:        cfg.EventTTL,
		Livemode:        cfg.Livemode(),
		APIVersion:      cfg.StripeAPIVersion,
		MaxBatch:        cfg.IngestMaxBatch,
		Flushers:        cfg.IngestFlushers,
		DeliveryTimeout: cfg.Limits.IngestTimeout,
		BatchTimeout:    cfg.Limits.IngestBatchTimeout,
		QueueMax:        cfg.Limits.IngestQueueMax,
		QueueMaxBytes:   cfg.Limits.IngestQueueMaxBytes,
	}, a.OpsProblems.Track(a.Events), a.Ledger, log,
		append([]handler.Option{handler.WithRoutes(routes),
			handler.WithObserver(ops.Observers{a.Metrics, a.OpsCounter}), handler.WithIngestObserver(a.Metrics),
			handler.WithBatchObserver(recordMetrics)}, recordOptions(cfg, a.Records)...)...)
	a.Metrics.WatchIngest(func() metrics.IngestQueue { return metrics.IngestQueue(a.Handler.Stats()) })

	a.Server = httpserver.NewPublic(log, a.Metrics)
	a.Server.TrustProxies(cfg.Admin.TrustedProxies)
	a.Admin = httpserver.New(log, a.Metrics, []httpserver.Check{
		{Name: "dynamodb", Run: func(ctx context.Context) error { return dynamo.Ping(ctx, ddb, cfg.EventsTable) }},
		{Name: "postgres", Run: func(ctx context.Context) error { return pool.Ping(ctx) }},
		{Name: "ingest", Run: a.Handler.Ready},
	})
	a.Admin.TrustProxies(cfg.Admin.TrustedProxies)
	a.AuthFailures = authlimit.New(authlimit.Config{Registerer: m.Registry})
	verifier := webhook.NewVerifier(cfg.WebhookSecrets, cfg.WebhookTolerance, nil)
	a.newThin()
	webhook.NewEndpoint(verifier, a.Ingest, cfg.WebhookMaxBody, log).Register(a.Server.Echo)
	apiDeps := api.Deps{
		Events:          a.Events,
		Handler:         a.Handler,
		Fetcher:         stripeclient.EventFetcher{API: a.Stripe, PlatformAccount: cfg.PlatformAccount},
		PlatformAccount: cfg.PlatformAccount,
		Tracking:        a.Tracking,
		Purchases:       purchase.NewService(a.Tracking, a.Stripe, log.With("component", "purchase")),
		Billing:         a.Billing,
		TestClocks:      a.Clocks,
		Outbox:          a.Outbox,
		Incidents:       a.Incidents,
		Livemode:        cfg.Livemode(),
		Background:      a.clocks,
		Failures:        a.AuthFailures,
		Log:             log.With("component", "api"),
	}
	apiDeps.Replays = a.newReplays(api.NewReplayer(apiDeps))
	apiDeps.Batches = a.newBatches()
	api.Register(a.Admin.Echo, cfg.InternalAPIToken, apiDeps)
	if err := ops.Register(a.Admin.Echo, ops.Deps{
		Token: cfg.InternalAPIToken, Pool: pool, Events: a.Events, Replayer: api.NewReplayer(apiDeps),
		Billing: a.Billing, TestClocks: a.Clocks, Counter: a.OpsCounter, Problems: a.OpsProblems, Runs: a.OpsRuns, Outbox: a.Outbox,
		Gatherer: a.Metrics.Registry, Log: log.With("component", "ops"), Livemode: cfg.Livemode(), Clocks: a.clocks,
		Development: cfg.Development, Failures: a.AuthFailures,
		SessionIdle: cfg.Admin.SessionIdle, SessionMaxAge: cfg.Admin.SessionMaxAge,
		Incidents: a.Incidents, Replays: a.Replays.Store, ReplayNudge: a.Replays.Runner.Nudge,
		Batches: a.Batches.Store, BatchNudge: a.Batches.Runner.Nudge,
	}); err != nil {
		pool.Close()
		return nil, fmt.Errorf("operator console: %w", err)
	}
	return a, nil
}

// TableSpecs are the DynamoDB tables this configuration uses.
func (a *App) TableSpecs() []dynamo.TableSpec { return TableSpecs(a.Config) }

// TableSpecs are the DynamoDB tables of cfg: what `migrate` creates and what
// the Terraform parity test compares terraform/ with.
func TableSpecs(cfg config.Config) []dynamo.TableSpec {
	return []dynamo.TableSpec{
		dynamo.EventsTable(cfg.EventsTable),
		dynamo.BillingTable(cfg.BillingTable),
		dynamo.BillingHistoryTable(cfg.BillingHistoryTable),
		dynamo.LocksTable(cfg.LocksTable),
	}
}

// Migrate creates missing DynamoDB tables and applies Postgres migrations.
func (a *App) Migrate(ctx context.Context) error {
	if err := dynamo.EnsureTables(ctx, a.Dynamo, a.TableSpecs()...); err != nil {
		return fmt.Errorf("migrate dynamodb: %w", err)
	}
	if err := postgres.Migrate(ctx, a.Pool); err != nil {
		return fmt.Errorf("migrate postgres: %w", err)
	}
	return nil
}

// recordOptions leaves event records to the write-behind when configured
// (INGEST_WRITE_BEHIND, on by default). The queue's writers run in serve
// only: elsewhere (poll --in-process) the handler writes records itself.
func recordOptions(cfg config.Config, q *recordq.Queue) []handler.Option {
	if !cfg.IngestRecords.WriteBehind {
		return nil
	}
	return []handler.Option{handler.WithRecordQueue(q)}
}

// startBackground runs the actions dispatcher until stopBackground.
func (a *App) startBackground() {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	a.Safe.Go(ctx, &wg, "records_sweep", func(ctx context.Context) { _ = a.Records.Run(ctx) })
	a.Safe.Go(ctx, &wg, "actions", func(ctx context.Context) {
		if err := a.Actions.Run(ctx); err != nil {
			a.Log.Error("actions dispatcher stopped", "error", err)
		}
	})
	a.startOutboxHousekeeping(ctx, &wg)
	a.startThin(ctx, &wg)
	a.startReplays(ctx, &wg)
	a.startBatches(ctx, &wg)
	if a.Emails != nil {
		a.Safe.Go(ctx, &wg, "emails", func(ctx context.Context) { _ = a.Emails.Run(ctx) })
	}
	a.Safe.Go(ctx, &wg, "ops_counter", func(ctx context.Context) { a.OpsCounter.Run(ctx, 10*time.Second) })
	a.stopBg = func() { cancel(); wg.Wait() }
}

// stopBackground stops the dispatcher after the delivery in flight (bounded
// by its HTTP timeout).
func (a *App) stopBackground() {
	if a.stopBg != nil {
		a.stopBg()
		a.stopBg = nil
	}
}

// Start listens on the configured address and starts every worker of
// serve: the events-table writers, the actions dispatcher, the outbox
// housekeeping, the email worker, the console's counter, pprof
// (PPROF_ADDR), the in-serve poller (POLL_EVERY), the EventBridge intake
// (EVENTBRIDGE_QUEUE_URL), the billing feed and the billing jobs
// (BILLING_EVERY). Run and the end-to-end tests both start the
// program through it, so a test runs what production runs. The workers
// stop with Stop (not with ctx, which only bounds the poller's and the
// billing jobs' work, as serve's signal context does).
func (a *App) Start(ctx context.Context) error {
	if err := a.Server.Open(a.Config.ListenAddr); err != nil {
		return err
	}
	if err := a.Admin.Open(a.Config.Admin.ListenAddr); err != nil {
		_ = a.Server.Close(context.WithoutCancel(ctx))
		return err
	}
	a.Log.Info("listening", "addr", a.Server.Addr(), "admin_addr", a.Admin.Addr())
	a.startBackground()
	stopProfiling, err := a.startProfiling()
	if err != nil {
		a.abortStart(ctx)
		return err
	}
	stopPolling, err := a.startPolling(ctx)
	if err != nil {
		stopProfiling()
		a.abortStart(ctx)
		return err
	}
	stopEventBridge, err := a.startEventBridge(ctx)
	if err != nil {
		stopPolling()
		stopProfiling()
		a.abortStart(ctx)
		return err
	}
	bctx, stopBilling := context.WithCancel(ctx)
	waitBilling := a.startBilling(bctx)
	a.stopWorkers = func() {
		stopPolling()     // the poller replays through this server: stop it first
		stopEventBridge() // its messages in hand finish before the handler drains
		stopBilling()
		a.stopClocks()
		waitBilling()
		a.Clocks.Wait()
		stopProfiling()
	}
	return nil
}

// abortStart undoes a Start that failed half-way.
func (a *App) abortStart(ctx context.Context) {
	_ = a.Server.Close(context.WithoutCancel(ctx))
	_ = a.Admin.Close(context.WithoutCancel(ctx))
	a.stopBackground()
}

// Stop shuts down gracefully what Start started: the poller and the
// billing work first, then the server (in-flight requests finish), the
// handler's batches and the events-table writes within ctx, then the
// background workers.
func (a *App) Stop(ctx context.Context) error {
	if a.stopWorkers != nil {
		a.stopWorkers()
		a.stopWorkers = nil
	}
	err := errors.Join(a.Server.Close(ctx), a.Admin.Close(ctx))
	if derr := a.Handler.Drain(ctx); derr != nil {
		a.Log.Warn("batches still in flight at shutdown", "error", derr)
	}
	if ferr := a.Records.Flush(ctx); ferr != nil {
		a.Log.Warn("event records still pending at shutdown; the next start writes them", "error", ferr)
	}
	a.stopBackground()
	return err
}

// Run serves until ctx is cancelled or the server fails, then shuts down
// gracefully, letting in-flight requests finish.
func (a *App) Run(ctx context.Context) error {
	if err := a.Start(ctx); err != nil {
		return err
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-a.Server.Done():
	case serveErr = <-a.Admin.Done():
	}
	a.Log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.Config.ShutdownTimeout)
	defer cancel()
	if err := a.Stop(shutdownCtx); err != nil {
		return err
	}
	return serveErr
}

// Close releases the clients.
func (a *App) Close() {
	a.stopClocks()
	a.Clocks.Wait()
	a.Pool.Close()
}

// Shutdown is Stop within timeout, then Close (tests).
func (a *App) Shutdown(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := a.Stop(ctx)
	a.Close()
	return err
}
