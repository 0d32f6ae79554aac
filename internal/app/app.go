// Package app wires the service together from a Config: clients, stores, the
// handler and the HTTP server. cmd/stripe-payments and the end-to-end tests
// both start the real program through it.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/api"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/config"
	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/handler"
	"github.com/stripe-payments/stripe-payments/internal/httpserver"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/tracking"
	"github.com/stripe-payments/stripe-payments/webhook"
)

// App is one running instance of the service.
type App struct {
	Config  config.Config
	Log     *slog.Logger
	Dynamo  *dynamodb.Client
	Pool    *pgxpool.Pool
	Events  *events.Store
	Ledger  *tracking.Ledger
	Handler *handler.Handler
	Metrics *metrics.Metrics
	Server  *httpserver.Server
	// Billing is the recurring billing core; BillingFeed applies the Stripe
	// events about its charges (outbox topic "billing").
	Billing     *billing.Service
	BillingFeed *outbox.Worker
}

// New connects to DynamoDB and Postgres and builds every component. It does
// not listen yet.
func New(ctx context.Context, cfg config.Config, log *slog.Logger) (*App, error) {
	ddb, err := dynamo.NewClient(ctx, cfg.AWSRegion, cfg.DynamoEndpoint)
	if err != nil {
		return nil, err
	}
	pool, err := tracking.Connect(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	a := &App{Config: cfg, Log: log, Dynamo: ddb, Pool: pool, Metrics: metrics.New()}
	a.Events = events.NewStore(ddb, cfg.EventsTable, cfg.EventTTL, nil)
	a.Ledger = tracking.NewLedger(pool)
	if err := a.newBilling(); err != nil {
		pool.Close()
		return nil, err
	}
	a.Handler = handler.New(handler.Config{
		PlatformAccount: cfg.PlatformAccount,
		EventTTL:        cfg.EventTTL,
		Livemode:        cfg.Livemode(),
	}, a.Events, a.Ledger, log, append([]handler.Option{handler.WithObserver(a.Metrics)}, billingAppliers()...)...)

	a.Server = httpserver.New(log, a.Metrics, []httpserver.Check{
		{Name: "dynamodb", Run: func(ctx context.Context) error { return dynamo.Ping(ctx, ddb, cfg.EventsTable) }},
		{Name: "postgres", Run: func(ctx context.Context) error { return pool.Ping(ctx) }},
	})
	verifier := webhook.NewVerifier(cfg.WebhookSecrets, cfg.WebhookTolerance, nil)
	webhook.NewEndpoint(verifier, a.Handler, cfg.WebhookMaxBody, log).Register(a.Server.Echo)
	api.Register(a.Server.Echo, cfg.InternalAPIToken, api.Deps{Events: a.Events, Billing: a.Billing})
	return a, nil
}

// TableSpecs are the DynamoDB tables this configuration uses.
func (a *App) TableSpecs() []dynamo.TableSpec {
	return append([]dynamo.TableSpec{dynamo.EventsTable(a.Config.EventsTable)}, a.billingTables()...)
}

// Migrate creates missing DynamoDB tables and applies Postgres migrations.
func (a *App) Migrate(ctx context.Context) error {
	if err := dynamo.EnsureTables(ctx, a.Dynamo, a.TableSpecs()...); err != nil {
		return fmt.Errorf("migrate dynamodb: %w", err)
	}
	if err := tracking.Migrate(ctx, a.Pool); err != nil {
		return fmt.Errorf("migrate postgres: %w", err)
	}
	return nil
}

// Open starts listening on the configured address.
func (a *App) Open() error {
	if err := a.Server.Open(a.Config.ListenAddr); err != nil {
		return err
	}
	a.Log.Info("listening", "addr", a.Server.Addr())
	return nil
}

// Run serves until ctx is cancelled or the server fails, then shuts down
// gracefully, letting in-flight requests finish.
func (a *App) Run(ctx context.Context) error {
	if err := a.Open(); err != nil {
		return err
	}
	bctx, stopBilling := context.WithCancel(ctx)
	defer stopBilling()
	waitBilling := a.startBilling(bctx)
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-a.Server.Done():
	}
	a.Log.Info("shutting down")
	stopBilling()
	waitBilling()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.Config.ShutdownTimeout)
	defer cancel()
	if err := a.Server.Close(shutdownCtx); err != nil {
		return err
	}
	return serveErr
}

// Close releases the clients.
func (a *App) Close() {
	a.Pool.Close()
}

// Shutdown is a helper for tests: graceful close with a deadline.
func (a *App) Shutdown(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := a.Server.Close(ctx)
	a.Close()
	return err
}
