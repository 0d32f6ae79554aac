package thin

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Registry is the connected accounts Accounts v2 events tell the service
// about (table connected_accounts): the poller walks the open ones, and a
// closed one for ClosedGrace after it closed, so its last events are in.
type Registry struct {
	pool *pgxpool.Pool
	// ClosedGrace: how long a closed account is still polled (default
	// DefaultClosedGrace).
	ClosedGrace time.Duration
}

// DefaultClosedGrace covers the poller's overlap window and late events.
const DefaultClosedGrace = 24 * time.Hour

// NewRegistry returns the registry on pool.
func NewRegistry(pool *pgxpool.Pool) *Registry {
	return &Registry{pool: pool, ClosedGrace: DefaultClosedGrace}
}

// Open records that account exists (created or updated) as of eventAt.
func (r *Registry) Open(ctx context.Context, account, eventID string, eventAt time.Time) error {
	return r.apply(ctx, account, "open", eventID, eventAt)
}

// Close records that account closed at eventAt.
func (r *Registry) Close(ctx context.Context, account, eventID string, eventAt time.Time) error {
	return r.apply(ctx, account, "closed", eventID, eventAt)
}

// apply writes the account's state unless a newer event already set it;
// at the same instant a close wins (an account is not updated after it
// closed).
func (r *Registry) apply(ctx context.Context, account, status, eventID string, eventAt time.Time) error {
	_, err := r.pool.Exec(ctx, `INSERT INTO connected_accounts (account, status, event_at, last_event, closed_at)
		VALUES ($1, $2, $3, $4, CASE WHEN $2 = 'closed' THEN $3::timestamptz END)
		ON CONFLICT (account) DO UPDATE SET status = EXCLUDED.status, event_at = EXCLUDED.event_at,
			last_event = EXCLUDED.last_event, closed_at = EXCLUDED.closed_at, updated_at = now()
		WHERE connected_accounts.event_at < EXCLUDED.event_at
		   OR (connected_accounts.event_at = EXCLUDED.event_at AND EXCLUDED.status = 'closed')`,
		account, status, eventAt, eventID)
	if err != nil {
		return fmt.Errorf("registry %s %s: %w", status, account, err)
	}
	return nil
}

// Accounts lists the accounts to poll: open ones, and closed ones within
// ClosedGrace of closing (poller.AccountSource).
func (r *Registry) Accounts(ctx context.Context) ([]string, error) {
	rows, err := r.pool.Query(ctx, `SELECT account FROM connected_accounts
		WHERE status = 'open' OR closed_at > now() - $1::interval ORDER BY account`, r.ClosedGrace.String())
	if err != nil {
		return nil, fmt.Errorf("list registry accounts: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// Closed lists the accounts closed longer ago than ClosedGrace: no longer
// polled, whatever else knows them.
func (r *Registry) Closed(ctx context.Context) (map[string]bool, error) {
	rows, err := r.pool.Query(ctx, `SELECT account FROM connected_accounts
		WHERE status = 'closed' AND closed_at <= now() - $1::interval`, r.ClosedGrace.String())
	if err != nil {
		return nil, fmt.Errorf("list closed accounts: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list closed accounts: %w", err)
	}
	closed := make(map[string]bool, len(ids))
	for _, id := range ids {
		closed[id] = true
	}
	return closed, nil
}

// AccountSource is what the poller lists accounts from.
type AccountSource interface {
	Accounts(ctx context.Context) ([]string, error)
}

// Polled is the poller's account source: the registry's accounts and
// Others', less the accounts closed for good.
type Polled struct {
	Registry *Registry
	Others   AccountSource
}

// Accounts implements poller.AccountSource.
func (p Polled) Accounts(ctx context.Context) ([]string, error) {
	mine, err := p.Registry.Accounts(ctx)
	if err != nil {
		return nil, err
	}
	others, err := p.Others.Accounts(ctx)
	if err != nil {
		return nil, err
	}
	closed, err := p.Registry.Closed(ctx)
	if err != nil {
		return nil, err
	}
	out := mine
	for _, id := range others {
		if !closed[id] {
			out = append(out, id)
		}
	}
	return out, nil
}
