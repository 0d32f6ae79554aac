// Package app wires the service together from a Config: clients, stores, the
// handler and the HTTP server. cmd/stripe-payments and the end-to-end tests
// both start the real program through it.
package app

import (
	"context"
	"errors"
	"fmt"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/stripe-payments/stripe-payments/internal/authlimit"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	billingstore "github.com/stripe-payments/stripe-payments/internal/billing/store"
	"github.com/stripe-payments/stripe-payments/internal/billing/testclock"
	"github.com/stripe-payments/stripe-payments/internal/config"
	"github.com/stripe-payments/stripe-payments/internal/dispatch"
	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/handler"
	"github.com/stripe-payments/stripe-payments/internal/httpserver"
	"github.com/stripe-payments/stripe-payments/internal/incidents"
	"github.com/stripe-payments/stripe-payments/internal/ingest"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
	"github.com/stripe-payments/stripe-payments/internal/opsdata"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/postgres"
	"github.com/stripe-payments/stripe-payments/internal/recordq"
	"github.com/stripe-payments/stripe-payments/internal/safego"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/thin"
	"github.com/stripe-payments/stripe-payments/internal/tracking"
)

// App is one running instance of the service. Its exported fields are what
// cmd/stripe-payments and the end-to-end tests reach; the rest is wiring.
type App struct {
	Config config.Config
	// Storage (storage.go): the DynamoDB client, the Postgres pool, the
	// instance's Prometheus registry.
	Dynamo  *dynamodb.Client
	Pool    *pgxpool.Pool
	Metrics *metrics.Metrics

	// Ingest (ingest.go): the events table, reading through its
	// write-behind (Records) and queued thin notifications' records
	// (ThinRecords); the one event handler; Ingest, the one entry point for
	// a verified event body of either shape, and Thin, the thin events'
	// intake, hydrator and account registry (thin.go).
	Events      *events.Store
	Records     *recordq.Queue
	ThinRecords *thin.Recorder
	Handler     *handler.Handler
	Ingest      *ingest.Intake
	Thin        *ThinEvents
	// Actions delivers the outbox's actions to ACTIONS_URL.
	Actions *dispatch.Dispatcher

	// Billing is the recurring billing core, Clocks its test clocks,
	// BillingStore its DynamoDB store (the poller lists the Stripe accounts
	// it charges on) (billing.go).
	Billing      *billing.Service
	Clocks       *testclock.Service
	BillingStore *billingstore.Store

	// What the operator sees: failed and rejected events (OpsProblems),
	// incidents (docs/design.md §4), bulk replays and batch collections.
	OpsProblems *opsdata.Problems
	Incidents   *incidents.Store
	Replays     *Replays
	Batches     *Batches
	// Triggers: the collections the platform triggers (docs/design.md §8).
	Triggers *Triggers
	// Reconciliations compare the service with Stripe (docs/design.md §11).
	Reconciliations *Reconciliations

	// Server is the public listener (LISTEN_ADDR): the webhook and
	// /healthz only. Admin (ADMIN_LISTEN_ADDR) serves the console, the
	// internal and purchase APIs, /metrics, /readyz and /healthz
	// (docs/design.md §3 "Two listeners").
	Server *httpserver.Server
	Admin  *httpserver.Server

	log *slog.Logger
	// safe starts every background goroutine: a panic is recovered,
	// logged, counted (stripe_payments_panics_total) and the loop restarted.
	safe *safego.Starter
	// The Stripe API client, drawing on stripeBudget, the Stripe API budget
	// every replica shares (stripe.go).
	stripe       *client.API
	stripeBudget *stripebudget.Shared
	ledger       *ledger.Ledger
	tracking     *tracking.Store
	// pollerMetrics counts what serve's poller finds, and keeps its
	// per-account figures for the console.
	pollerMetrics *metrics.Poller
	// recordMetrics watches the write-behind and the handler's batches.
	recordMetrics *metrics.Records
	// emails sends reminder emails through SES; nil unless SES_FROM_ADDRESS.
	emails *outbox.Worker
	// billingFeed applies the Stripe events about billing's charges
	// (outbox topic "billing").
	billingFeed *outbox.Worker
	// outbox lists and re-drives dead letters and reads backlog figures
	// (internal API, operator console).
	outbox        *outbox.Store
	outboxMetrics *metrics.Outbox
	// What the console records: events per hour, billing runs.
	opsCounter *opsdata.Counter
	opsRuns    *opsdata.Runs
	// billingQueueSQS and billingQueueRuns: the billing queue's client and
	// run store (BILLING_QUEUE_URL; nil without it).
	billingQueueSQS  *sqs.Client
	billingQueueRuns *opsdata.QueueRuns
	// authFailures limits wrong INTERNAL_API_TOKEN guesses per client
	// address, on the console's login and the bearer APIs alike.
	authFailures *authlimit.Limiter

	// clockLife bounds the test clocks' advances, which outlive the
	// requests that start them; stopClocks ends them at shutdown (an
	// advance stops between two days and is continued by the next advance
	// request).
	clockLife  context.Context
	stopClocks context.CancelFunc
	// stopBg stops the background workers; stopWorkers what Start started
	// beyond the server and them (poller, billing, pprof).
	stopBg      func()
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
	a, err := newStorage(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	if err := a.build(ctx, o); err != nil {
		a.Pool.Close()
		return nil, err
	}
	return a, nil
}

// build builds every component on a's storage, in the order they need
// each other.
func (a *App) build(ctx context.Context, o options) error {
	a.clockLife, a.stopClocks = context.WithCancel(context.Background())
	a.newOutbox()
	a.newOps()
	a.newEvents()
	if err := a.newStripe(); err != nil {
		return err
	}
	if err := a.newEmails(ctx); err != nil {
		return err
	}
	if err := a.newBilling(); err != nil {
		return err
	}
	if err := a.newBillingQueue(ctx); err != nil {
		return err
	}
	if err := a.newHandler(o.routes); err != nil {
		return err
	}
	a.newServers()
	a.newThin()
	return a.registerRoutes()
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

// startBackground runs the actions dispatcher until stopBackground.
func (a *App) startBackground() {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	a.safe.Go(ctx, &wg, "records_sweep", func(ctx context.Context) { _ = a.Records.Run(ctx) })
	a.safe.Go(ctx, &wg, "actions", func(ctx context.Context) {
		if err := a.Actions.Run(ctx); err != nil {
			a.log.Error("actions dispatcher stopped", "error", err)
		}
	})
	a.startOutboxHousekeeping(ctx, &wg)
	a.startThin(ctx, &wg)
	a.startReplays(ctx, &wg)
	a.startBatches(ctx, &wg)
	a.startTriggerProcessor(ctx, &wg)
	a.startReconciliations(ctx, &wg)
	if a.emails != nil {
		a.safe.Go(ctx, &wg, "emails", func(ctx context.Context) { _ = a.emails.Run(ctx) })
	}
	a.safe.Go(ctx, &wg, "ops_counter", func(ctx context.Context) { a.opsCounter.Run(ctx, 10*time.Second) })
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
	a.log.Info("listening", "addr", a.Server.Addr(), "admin_addr", a.Admin.Addr())
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
	stopTriggerQueue, err := a.startTriggerQueue(ctx)
	if err != nil {
		stopEventBridge()
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
		stopTriggerQueue()
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
		a.log.Warn("batches still in flight at shutdown", "error", derr)
	}
	if ferr := a.Records.Flush(ctx); ferr != nil {
		a.log.Warn("event records still pending at shutdown; the next start writes them", "error", ferr)
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
	a.log.Info("shutting down")
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
