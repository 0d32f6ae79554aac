package incidents

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/postgres"
)

// DeleteResolvedAuditBefore deletes up to limit audit rows written before
// before, of resolved incidents only, and answers how many (package
// retention). An incident not resolved keeps its whole trail (who
// acknowledged it, when); the incidents rows themselves stay, since
// without its row a group still failing would read as open again.
func DeleteResolvedAuditBefore(ctx context.Context, pool *pgxpool.Pool, before time.Time, limit int) (int64, error) {
	return postgres.DeleteBatch(ctx, pool, "incident audit", `DELETE FROM incident_audit WHERE id IN (
		SELECT id FROM incident_audit
		WHERE at < $1 AND incident_id IN (SELECT id FROM incidents WHERE state = 'resolved')
		LIMIT $2 FOR UPDATE SKIP LOCKED)`, before, limit)
}
