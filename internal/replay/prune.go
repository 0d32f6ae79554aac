package replay

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/postgres"
)

// DeleteFinishedBefore deletes up to limit replays that finished (done or
// cancelled) before before, their items with them (ON DELETE CASCADE), and
// answers how many (package retention). A running replay is never deleted,
// however old: its runner is still working through it.
func DeleteFinishedBefore(ctx context.Context, pool *pgxpool.Pool, before time.Time, limit int) (int64, error) {
	return postgres.DeleteBatch(ctx, pool, "finished replays", `DELETE FROM replays WHERE id IN (
		SELECT id FROM replays WHERE finished_at < $1 AND status <> 'running'
		LIMIT $2 FOR UPDATE SKIP LOCKED)`, before, limit)
}
