// Package retention deletes the rows kept for operators once they are past
// their retention, so that personal data and operator history are not
// kept for ever: outbox dead letters (a reminder
// email's carries its recipient), the console's ops_* tables, finished bulk
// replays and incident audit rows, event records quarantined by the
// write-behind, and its marks of earlier record versions. Delivered outbox rows and the
// ledger have their own pruners (outbox.PruneDelivered,
// ledger.Prune). docs/retention.md lists the defaults.
package retention

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Rule is one kind of row and how long it is kept. Table, Column and
// Filter are the code's constants, never input.
type Rule struct {
	// Name labels stripe_payments_pruned_rows_total{table}.
	Name   string
	Table  string
	Column string // the row's age counts from this timestamptz
	Filter string // an extra condition ("" for none)
	Keep   time.Duration
}

// Rules are the rows pruned: dead letters and quarantined records after
// deadLetters, the console's tables after ops, the write-behind's marks of
// earlier record versions after twice eventTTL.
func Rules(deadLetters, ops, eventTTL time.Duration) []Rule {
	return []Rule{
		{Name: "outbox_dead", Table: "outbox", Column: "dead_at", Filter: "delivered_at IS NULL", Keep: deadLetters},
		{Name: "event_records_quarantined", Table: "event_records_quarantined", Column: "quarantined_at", Keep: deadLetters},
		{Name: "ops_event_problems", Table: "ops_event_problems", Column: "at", Keep: ops},
		{Name: "ops_billing_runs", Table: "ops_billing_runs", Column: "started_at", Keep: ops},
		{Name: "ops_event_hours", Table: "ops_event_hours", Column: "hour", Keep: ops},
		// Bulk replays once finished (done or cancelled), their items with
		// them (ON DELETE CASCADE); a running one is never pruned.
		{Name: "replays", Table: "replays", Column: "finished_at", Filter: "status <> 'running'", Keep: ops},
		// Incident state changes, of resolved incidents only: one not
		// resolved keeps its whole trail (who acknowledged it, when). The
		// incidents rows themselves stay (one per group): without its row
		// a group still failing would read as open again.
		{Name: "incident_audit", Table: "incident_audit", Column: "at",
			Filter: "incident_id IN (SELECT id FROM incidents WHERE state = 'resolved')", Keep: ops},
		// An event's mark that a failed or rejected version of its record
		// may be in the events table (docs/architecture.md): it
		// must outlive that record, which the table expires EVENT_TTL after
		// it is written, so it is kept twice that. Dropped too early, the
		// write-behind would skip the read and lose the earlier attempts'
		// bookkeeping (never an effect or a status).
		{Name: "event_records_prior", Table: "event_records_prior", Column: "at", Keep: 2 * eventTTL},
	}
}

// Prune deletes, for each rule, the rows older than now - Keep, batch rows
// per statement (rows another replica is deleting are skipped), and tells
// pruned how many it deleted per rule.
func Prune(ctx context.Context, pool *pgxpool.Pool, now time.Time, rules []Rule, batch int, pruned func(name string, n int64)) error {
	if batch <= 0 {
		return errors.New("prune: batch must be positive")
	}
	var errs []error
	for _, r := range rules {
		if r.Keep <= 0 {
			errs = append(errs, fmt.Errorf("prune %s: retention must be positive", r.Name))
			continue
		}
		n, err := prune(ctx, pool, r, now.Add(-r.Keep), batch)
		if pruned != nil {
			pruned(r.Name, n)
		}
		if err != nil {
			errs = append(errs, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return errors.Join(errs...)
}

func prune(ctx context.Context, pool *pgxpool.Pool, r Rule, cutoff time.Time, batch int) (int64, error) {
	where := r.Column + " < $1"
	if r.Filter != "" {
		where += " AND " + r.Filter
	}
	q := fmt.Sprintf(`DELETE FROM %[1]s WHERE ctid IN (SELECT ctid FROM %[1]s WHERE %[2]s LIMIT $2 FOR UPDATE SKIP LOCKED)`, r.Table, where)
	var total int64
	for {
		tag, err := pool.Exec(ctx, q, cutoff, batch)
		if err != nil {
			return total, fmt.Errorf("prune %s: %w", r.Name, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) || ctx.Err() != nil {
			return total, ctx.Err()
		}
	}
}
