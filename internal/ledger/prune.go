package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Prune deletes processed-events rows processed before cutoff, batch
// rows per statement, and returns how many it deleted.
//
// Why a cutoff is safe only past EVENT_TTL + 30 days (config refuses a
// shorter LEDGER_RETENTION): the ledger row is what makes a second delivery
// of an event apply nothing. An event can come back only while Stripe keeps
// it (its Events API, 30 days after creation; webhook retries stop after 3
// days) or while the events table holds its payload for a replay (EVENT_TTL
// after creation). processed_at is never before the event's creation, so a
// row processed longer ago than both can no longer meet its event again.
//
// The accounts of the deleted rows are kept in ledger_pruned_accounts, in
// the same statement, so the poller keeps polling an account whose events
// all aged out.
func Prune(ctx context.Context, pool *pgxpool.Pool, cutoff time.Time, batch int) (int64, error) {
	if batch <= 0 {
		return 0, errors.New("prune ledger: batch must be positive")
	}
	var total int64
	for {
		var n int64
		err := pool.QueryRow(ctx, `WITH doomed AS (
				SELECT event_id FROM processed_events WHERE processed_at < $1
				LIMIT $2 FOR UPDATE SKIP LOCKED),
			gone AS (
				DELETE FROM processed_events p USING doomed d WHERE p.event_id = d.event_id
				RETURNING p.stripe_account),
			kept AS (
				INSERT INTO ledger_pruned_accounts (stripe_account)
				SELECT DISTINCT stripe_account FROM gone
				ON CONFLICT (stripe_account) DO NOTHING)
			SELECT count(*) FROM gone`, cutoff, batch).Scan(&n)
		if err != nil {
			return total, fmt.Errorf("prune ledger: %w", err)
		}
		total += n
		if n < int64(batch) || ctx.Err() != nil {
			return total, ctx.Err()
		}
	}
}
