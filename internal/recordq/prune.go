package recordq

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/postgres"
)

// DeleteQuarantinedBefore deletes up to limit quarantined records set aside
// before before and answers how many (package retention). Rows another
// replica is deleting are skipped.
func DeleteQuarantinedBefore(ctx context.Context, pool *pgxpool.Pool, before time.Time, limit int) (int64, error) {
	return postgres.DeleteBatch(ctx, pool, "quarantined records", `DELETE FROM event_records_quarantined WHERE event_id IN (
		SELECT event_id FROM event_records_quarantined WHERE quarantined_at < $1
		LIMIT $2 FOR UPDATE SKIP LOCKED)`, before, limit)
}

// DeleteMarksBefore deletes up to limit marks of earlier record versions
// (Mark) made before before and answers how many (package retention). The
// caller keeps them longer than the events table keeps the records they
// mark: dropped too early, a writer would skip the read and lose the
// earlier attempts' bookkeeping.
func DeleteMarksBefore(ctx context.Context, pool *pgxpool.Pool, before time.Time, limit int) (int64, error) {
	return postgres.DeleteBatch(ctx, pool, "record marks", `DELETE FROM event_records_prior WHERE event_id IN (
		SELECT event_id FROM event_records_prior WHERE at < $1
		LIMIT $2 FOR UPDATE SKIP LOCKED)`, before, limit)
}
