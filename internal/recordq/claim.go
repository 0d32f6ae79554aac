package recordq

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
)

// ClaimAndEnqueue is the ledger claim of events that have no effects to
// apply (ledger.ClaimBatch, the claim of ledger.Ledger.ApplyBatch, with no
// applier to run) and the insert of their pending records, in one statement
// and so one round trip and one durable commit. It returns the ids newly claimed; the others were
// claimed before (their records are, or were, pending already) and get no
// row. recs must have distinct ids; refs[i] describes recs[i]. The rows are
// fresh, as with EnqueueClaimed: claimed here, in the same statement.
func (q *Queue) ClaimAndEnqueue(ctx context.Context, refs []ledger.EventRef, recs []events.Record) (map[string]bool, error) {
	n := len(recs)
	if len(refs) != n {
		// The arrays are joined by position: a claim without its record
		// would apply an event whose record is never written.
		return nil, fmt.Errorf("claim and enqueue: %d refs for %d records", len(refs), n)
	}
	metas, payloads := make([][]byte, n), make([][]byte, n)
	for i, r := range recs {
		m, err := encode(r)
		if err != nil {
			return nil, err
		}
		metas[i], payloads[i] = m, r.Payload
	}
	// The ledger's own claim (ledger.ClaimBatch: id order, so concurrent
	// batches never deadlock), as a CTE: its $1 holds the ids in recs' order,
	// which $5 and $6 follow.
	claim, args := ledger.ClaimBatch(refs)
	rows, err := q.pool.Query(ctx, `WITH claimed AS (
			`+claim+`
		), pending AS (
			INSERT INTO event_records_pending (event_id, record, payload, fresh)
			SELECT r.event_id, r.record, r.payload, true
			FROM unnest($1::text[], $5::bytea[], $6::bytea[]) AS r(event_id, record, payload)
			JOIN claimed USING (event_id)
			ON CONFLICT (event_id) DO NOTHING
		)
		SELECT event_id FROM claimed`, append(args, metas, payloads)...)
	if err != nil {
		return nil, fmt.Errorf("claim and enqueue %d events: %w", n, err)
	}
	claimed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("claim and enqueue %d events: %w", n, err)
	}
	applied := make(map[string]bool, len(claimed))
	for _, id := range claimed {
		applied[id] = true
	}
	return applied, nil
}
