package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Checkpoints persists the poller's per-account checkpoints
// (sql/00010_poller_checkpoints.sql).
type Checkpoints struct {
	pool *pgxpool.Pool
}

// NewCheckpoints returns the checkpoint store over pool.
func NewCheckpoints(pool *pgxpool.Pool) *Checkpoints { return &Checkpoints{pool: pool} }

// Load returns the checkpoint of account; ok is false when there is none yet.
func (c *Checkpoints) Load(ctx context.Context, account string) (at time.Time, ok bool, err error) {
	err = c.pool.QueryRow(ctx, `SELECT checkpoint FROM poller_checkpoints WHERE stripe_account = $1`, account).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("load checkpoint %s: %w", account, err)
	}
	return at.UTC(), true, nil
}

// Save stores the checkpoint of account.
func (c *Checkpoints) Save(ctx context.Context, account string, at time.Time) error {
	_, err := c.pool.Exec(ctx, `INSERT INTO poller_checkpoints (stripe_account, checkpoint) VALUES ($1, $2)
		ON CONFLICT (stripe_account) DO UPDATE SET checkpoint = EXCLUDED.checkpoint, updated_at = now()`,
		account, at.UTC())
	if err != nil {
		return fmt.Errorf("save checkpoint %s: %w", account, err)
	}
	return nil
}

// pollerLockKey is the advisory lock that keeps two checkpointed poller runs
// (two `serve` instances with POLL_EVERY, or `serve` and an operator's
// `poll`) from racing on the same checkpoints: the FNV-1a 64 hash of
// "stripe-payments:poller". Advisory locks are per database.
const pollerLockKey int64 = 9162266557122944312

// TryLock takes the poller's session advisory lock on a dedicated
// connection. ok is false when another session holds it. release frees the
// lock and the connection; if the process dies, Postgres frees both.
func (c *Checkpoints) TryLock(ctx context.Context) (release func(), ok bool, err error) {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("poller lock: %w", err)
	}
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, pollerLockKey).Scan(&ok); err != nil {
		conn.Release()
		return nil, false, fmt.Errorf("poller lock: %w", err)
	}
	if !ok {
		conn.Release()
		return nil, false, nil
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, pollerLockKey); err != nil {
			// Closing the connection ends the session, and with it the lock.
			_ = conn.Conn().Close(ctx)
		}
		conn.Release()
	}, true, nil
}

// Saved is one account's stored checkpoint.
type Saved struct {
	Account    string
	Checkpoint time.Time
	UpdatedAt  time.Time
}

// List reads up to limit checkpoints, the oldest first (the console shows
// the accounts furthest behind).
func (c *Checkpoints) List(ctx context.Context, limit int) ([]Saved, error) {
	rows, err := c.pool.Query(ctx, `SELECT stripe_account, checkpoint, updated_at FROM poller_checkpoints ORDER BY checkpoint ASC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Saved, error) {
		var s Saved
		err := row.Scan(&s.Account, &s.Checkpoint, &s.UpdatedAt)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	return list, nil
}
