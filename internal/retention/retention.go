// Package retention deletes the rows kept for operators once they are past
// their retention, so that personal data and operator history are not
// kept for ever: outbox dead letters (a reminder email's carries its
// recipient), the console's ops_* tables, finished bulk replays and
// incident audit rows, event records quarantined by the write-behind, and
// its marks of earlier record versions. It owns the schedule and the
// batching; each table's owner package does the delete. Delivered outbox
// rows and the ledger have their own pruners (outbox.PruneDelivered,
// ledger.Prune). docs/retention.md lists the defaults.
package retention

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/incidents"
	"github.com/stripe-payments/stripe-payments/internal/opsdata"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/recordq"
	"github.com/stripe-payments/stripe-payments/internal/replay"
)

// Rule is one kind of row and how long it is kept. The table's owner
// package deletes it (Delete): the SQL of a table lives with its owner.
type Rule struct {
	// Name labels stripe_payments_pruned_rows_total{table}.
	Name  string
	Table string // the table whose rows go (docs/architecture.md names each)
	Keep  time.Duration
	// Delete deletes up to limit rows older than before and answers how
	// many; fewer than limit means none is left.
	Delete func(ctx context.Context, pool *pgxpool.Pool, before time.Time, limit int) (int64, error)
}

// Rules are the rows pruned: dead letters and quarantined records after
// deadLetters, the console's tables after ops, the write-behind's marks of
// earlier record versions after twice eventTTL.
func Rules(deadLetters, ops, eventTTL time.Duration) []Rule {
	return []Rule{
		{Name: "outbox_dead", Table: "outbox", Keep: deadLetters, Delete: outbox.DeleteDeadBefore},
		{Name: "event_records_quarantined", Table: "event_records_quarantined", Keep: deadLetters, Delete: recordq.DeleteQuarantinedBefore},
		{Name: "ops_event_problems", Table: "ops_event_problems", Keep: ops, Delete: opsdata.DeleteProblemsBefore},
		{Name: "ops_billing_runs", Table: "ops_billing_runs", Keep: ops, Delete: opsdata.DeleteBillingRunsBefore},
		// Queued collection runs, each message's outcome with its run.
		{Name: "ops_billing_queue_runs", Table: "ops_billing_queue_runs", Keep: ops, Delete: opsdata.DeleteQueueRunsBefore},
		{Name: "ops_event_hours", Table: "ops_event_hours", Keep: ops, Delete: opsdata.DeleteEventHoursBefore},
		// Bulk replays once finished, their items with them; a running
		// one is never pruned.
		{Name: "replays", Table: "replays", Keep: ops, Delete: replay.DeleteFinishedBefore},
		// Incident state changes, of resolved incidents only.
		{Name: "incident_audit", Table: "incident_audit", Keep: ops, Delete: incidents.DeleteResolvedAuditBefore},
		// An event's mark that a failed or rejected version of its record
		// may be in the events table (docs/architecture.md): it
		// must outlive that record, which the table expires EVENT_TTL after
		// it is written, so it is kept twice that. Dropped too early, the
		// write-behind would skip the read and lose the earlier attempts'
		// bookkeeping (never an effect or a status).
		{Name: "event_records_prior", Table: "event_records_prior", Keep: 2 * eventTTL, Delete: recordq.DeleteMarksBefore},
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
		if r.Delete == nil {
			errs = append(errs, fmt.Errorf("prune %s: no owner deletes it", r.Name))
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

// prune calls r.Delete until a call deletes fewer than batch rows, so no
// statement holds many locks or runs long.
func prune(ctx context.Context, pool *pgxpool.Pool, r Rule, cutoff time.Time, batch int) (int64, error) {
	var total int64
	for {
		n, err := r.Delete(ctx, pool, cutoff, batch)
		if err != nil {
			return total, fmt.Errorf("prune %s: %w", r.Name, err)
		}
		total += n
		if n < int64(batch) || ctx.Err() != nil {
			return total, ctx.Err()
		}
	}
}
