package opsdata

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/postgres"
)

// The console's tables are kept OPS_RETENTION (package retention calls
// these): each deletes up to limit rows older than before and answers how
// many, skipping rows another replica is deleting.

// DeleteProblemsBefore deletes event problems listed before before.
func DeleteProblemsBefore(ctx context.Context, pool *pgxpool.Pool, before time.Time, limit int) (int64, error) {
	return postgres.DeleteBatch(ctx, pool, "event problems", `DELETE FROM ops_event_problems WHERE event_id IN (
		SELECT event_id FROM ops_event_problems WHERE at < $1
		LIMIT $2 FOR UPDATE SKIP LOCKED)`, before, limit)
}

// DeleteBillingRunsBefore deletes billing runs started before before.
func DeleteBillingRunsBefore(ctx context.Context, pool *pgxpool.Pool, before time.Time, limit int) (int64, error) {
	return postgres.DeleteBatch(ctx, pool, "billing runs", `DELETE FROM ops_billing_runs WHERE id IN (
		SELECT id FROM ops_billing_runs WHERE started_at < $1
		LIMIT $2 FOR UPDATE SKIP LOCKED)`, before, limit)
}

// DeleteEventHoursBefore deletes the hourly event counts of hours before
// before.
func DeleteEventHoursBefore(ctx context.Context, pool *pgxpool.Pool, before time.Time, limit int) (int64, error) {
	return postgres.DeleteBatch(ctx, pool, "event hours", `DELETE FROM ops_event_hours WHERE (hour, outcome) IN (
		SELECT hour, outcome FROM ops_event_hours WHERE hour < $1
		LIMIT $2 FOR UPDATE SKIP LOCKED)`, before, limit)
}

// DeleteQueueRunsBefore deletes billing queue runs started before before,
// their messages' outcomes with them.
func DeleteQueueRunsBefore(ctx context.Context, pool *pgxpool.Pool, before time.Time, limit int) (int64, error) {
	return postgres.DeleteBatch(ctx, pool, "billing queue runs", `DELETE FROM ops_billing_queue_runs WHERE id IN (
		SELECT id FROM ops_billing_queue_runs WHERE started_at < $1
		LIMIT $2 FOR UPDATE SKIP LOCKED)`, before, limit)
}
