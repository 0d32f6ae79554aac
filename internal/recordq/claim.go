package recordq

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/tracking"
)

// ClaimAndEnqueue is the ledger claim of events that have no effects to
// apply (tracking.Ledger.ApplyBatch's claim, with no applier to run) and the
// insert of their pending records, in one statement and so one round trip
// and one durable commit. It returns the ids newly claimed; the others were
// claimed before (their records are, or were, pending already) and get no
// row. recs must have distinct ids; refs[i] describes recs[i]. The rows are
// fresh, as with EnqueueClaimed: claimed here, in the same statement.
func (q *Queue) ClaimAndEnqueue(ctx context.Context, refs []tracking.EventRef, recs []events.Record) (map[string]bool, error) {
	n := len(recs)
	ids, types, accounts := make([]string, n), make([]string, n), make([]string, n)
	created := make([]time.Time, n)
	metas, payloads := make([][]byte, n), make([][]byte, n)
	for i, r := range recs {
		m, err := encode(r)
		if err != nil {
			return nil, err
		}
		ref := refs[i]
		ids[i], types[i], accounts[i], created[i], metas[i], payloads[i] = ref.ID, ref.Type, ref.StripeAccount, ref.Created, m, r.Payload
	}
	// ORDER BY 1: ledger rows are locked in id order, as ApplyBatch does, so
	// concurrent batches never deadlock.
	rows, err := q.pool.Query(ctx, `WITH claimed AS (
			INSERT INTO processed_events (event_id, event_type, stripe_account, event_created)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[]) ORDER BY 1
			ON CONFLICT (event_id) DO NOTHING
			RETURNING event_id
		), pending AS (
			INSERT INTO event_records_pending (event_id, record, payload, fresh)
			SELECT r.event_id, r.record, r.payload, true
			FROM unnest($1::text[], $5::bytea[], $6::bytea[]) AS r(event_id, record, payload)
			JOIN claimed USING (event_id)
			ON CONFLICT (event_id) DO NOTHING
		)
		SELECT event_id FROM claimed`, ids, types, accounts, created, metas, payloads)
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
