// Package postgres opens the service's Postgres pool (with the limits that
// keep a stalled server from hanging calls) and applies the schema
// migrations embedded from sql/. It knows no table: the stores that own them
// are internal/ledger, internal/tracking, internal/outbox and the others
// docs/architecture.md lists.
package postgres

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	migrations "github.com/stripe-payments/stripe-payments/sql"
)

// PoolLimits bound the pool and every connection of it, so that a Postgres
// that stops answering (failover, partition) fails calls instead of hanging
// them. Zero fields take DefaultPoolLimits' values.
type PoolLimits struct {
	// MaxConns is the pool size.
	MaxConns int32
	// ConnectTimeout bounds dial, TLS and startup of a new connection.
	ConnectTimeout time.Duration
	// StatementTimeout is Postgres' statement_timeout: the server ends a
	// statement that runs longer, even when the client has vanished.
	StatementTimeout time.Duration
	// TCPUserTimeout is the socket's TCP_USER_TIMEOUT (Linux): a connection
	// whose sent data stays unacknowledged this long is closed by the
	// kernel instead of after ~15 minutes of retransmissions.
	TCPUserTimeout time.Duration
}

// DefaultPoolLimits are the limits of Connect (docs/configuration.md).
func DefaultPoolLimits() PoolLimits {
	return PoolLimits{MaxConns: 16, ConnectTimeout: 5 * time.Second, StatementTimeout: 30 * time.Second, TCPUserTimeout: 15 * time.Second}
}

// Connect opens a connection pool with DefaultPoolLimits and checks that
// Postgres answers.
func Connect(ctx context.Context, databaseURL string) (*pgxpool.Pool, error) {
	return ConnectWith(ctx, databaseURL, DefaultPoolLimits())
}

// ConnectWith opens a connection pool with limits and checks that Postgres
// answers. The limits replace the same parameters of databaseURL.
func ConnectWith(ctx context.Context, databaseURL string, limits PoolLimits) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	applyLimits(cfg, limits)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres pool: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 2*cfg.ConnConfig.ConnectTimeout)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping postgres: %w", err)
	}
	return pool, nil
}

func applyLimits(cfg *pgxpool.Config, limits PoolLimits) {
	def := DefaultPoolLimits()
	if limits.MaxConns <= 0 {
		limits.MaxConns = def.MaxConns
	}
	if limits.ConnectTimeout <= 0 {
		limits.ConnectTimeout = def.ConnectTimeout
	}
	if limits.StatementTimeout <= 0 {
		limits.StatementTimeout = def.StatementTimeout
	}
	if limits.TCPUserTimeout <= 0 {
		limits.TCPUserTimeout = def.TCPUserTimeout
	}
	cfg.MaxConns = limits.MaxConns
	cfg.MinConns = min(cfg.MinConns, cfg.MaxConns)
	cc := cfg.ConnConfig
	cc.ConnectTimeout = limits.ConnectTimeout
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	cc.RuntimeParams["statement_timeout"] = strconv.FormatInt(limits.StatementTimeout.Milliseconds(), 10)
	dialer := &net.Dialer{KeepAlive: 30 * time.Second, Control: tcpUserTimeout(limits.TCPUserTimeout)}
	cc.DialFunc = dialer.DialContext
}

// Migrate applies every pending embedded migration. A Postgres advisory lock
// serialises concurrent runs (two instances starting at once).
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("migration locker: %w", err)
	}
	// Out of order: migration numbers are reserved in blocks per change, so a
	// database may already hold a higher number than one that lands later;
	// each migration stands alone, and goose applies the missing ones.
	provider, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithSessionLocker(locker), goose.WithAllowOutofOrder(true))
	if err != nil {
		return fmt.Errorf("migration provider: %w", err)
	}
	if _, err := provider.Up(ctx); err != nil {
		return fmt.Errorf("migrate up: %w", err)
	}
	return nil
}

// DeleteBatch runs one batch of a retention delete: query is its owner's
// DELETE, with $1 the cut-off time and $2 the batch size, deleting rows
// that no other replica has locked. It answers how many rows went; what
// names them in an error ("delete <what>: …").
func DeleteBatch(ctx context.Context, pool *pgxpool.Pool, what, query string, before time.Time, limit int) (int64, error) {
	tag, err := pool.Exec(ctx, query, before, limit)
	if err != nil {
		return 0, fmt.Errorf("delete %s: %w", what, err)
	}
	return tag.RowsAffected(), nil
}
