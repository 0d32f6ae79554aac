package ops

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// QuarantinedRecords counts the event records the events table refused for
// good (package recordq moved them to event_records_quarantined); the
// overview warns while there are any.
func QuarantinedRecords(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM event_records_quarantined`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count quarantined event records: %w", err)
	}
	return n, nil
}

// quarantineWarning is the overview's line about n quarantined records.
func quarantineWarning(n int64) string {
	return fmt.Sprintf("%d event record(s) quarantined: the events table refused them for good. They stay readable; "+
		"see docs/runbooks/StripePaymentsEventRecordsQuarantined.md (table event_records_quarantined).", n)
}
