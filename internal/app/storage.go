package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/config"
	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
	"github.com/stripe-payments/stripe-payments/internal/postgres"
	"github.com/stripe-payments/stripe-payments/internal/safego"
)

// newStorage connects to DynamoDB and Postgres: the App every other
// builder adds to, with its metrics registry and goroutine starter.
func newStorage(ctx context.Context, cfg config.Config, log *slog.Logger) (*App, error) {
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
	return &App{Config: cfg, log: log, Dynamo: ddb, Pool: pool, Metrics: m, pollerMetrics: metrics.NewPoller(m.Registry),
		safe: safego.New(log, metrics.NewPanics(m.Registry), time.Second)}, nil
}
