// Package ledger is the processed-events ledger: the table whose row per
// event id makes a second delivery of an event apply nothing
// (docs/architecture.md). It claims events (alone, in batches, or inside a
// caller's statement through ClaimBatch), answers whether one was processed,
// prunes rows past retention, and lists the Connect accounts and the poller
// checkpoints the poller reads from.
package ledger

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/pgtx"
)

// EventRef identifies the event whose effects a transaction applies.
type EventRef struct {
	ID            string
	Type          string
	StripeAccount string
	Created       time.Time
}

// Ledger claims event ids in the processed-events table.
type Ledger struct {
	pool *pgxpool.Pool
}

// New returns a ledger over pool.
func New(pool *pgxpool.Pool) *Ledger { return &Ledger{pool: pool} }

// Apply runs effects in one transaction that first claims ev in the ledger.
// If the claim conflicts, the effects were committed before (by an earlier or
// a concurrent delivery, which the conflict waits for) and effects is not
// run; applied is then false. A concurrent delivery blocks on the row lock of
// the uncommitted claim, so the same event applies at most once.
func (l *Ledger) Apply(ctx context.Context, ev EventRef, effects func(ctx context.Context, tx pgtx.Tx) error) (applied bool, err error) {
	err = l.beginFunc(ctx, func(tx pgx.Tx) error {
		applied = false
		tag, err := tx.Exec(ctx, `INSERT INTO processed_events (event_id, event_type, stripe_account, event_created)
			VALUES ($1, $2, $3, $4) ON CONFLICT (event_id) DO NOTHING`,
			ev.ID, ev.Type, ev.StripeAccount, ev.Created)
		if err != nil {
			return fmt.Errorf("claim event in ledger: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		if err := effects(ctx, tx); err != nil {
			return err
		}
		applied = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("apply event %s: %w", ev.ID, err)
	}
	return applied, nil
}

// ClaimBatch is the statement that claims refs in the ledger, and its
// arguments: it inserts a row per event id, in id order (ORDER BY 1, so
// concurrent batches lock ledger rows in the same order and never
// deadlock), leaves the rows of ids claimed before untouched (ON CONFLICT DO
// NOTHING: a conflict with an uncommitted claim waits for it), and returns
// the ids newly claimed. ApplyBatchThen runs it alone; recordq runs it as a
// CTE of a larger statement. $1 to $4 are the ids, types, accounts and
// creation times of refs in the order given, so a caller may pass further
// arrays ($5 on) in the same order and join them to $1 by position. refs
// must have distinct ids.
func ClaimBatch(refs []EventRef) (query string, args []any) {
	ids := make([]string, len(refs))
	types := make([]string, len(refs))
	accounts := make([]string, len(refs))
	created := make([]time.Time, len(refs))
	for i, r := range refs {
		ids[i], types[i], accounts[i], created[i] = r.ID, r.Type, r.StripeAccount, r.Created
	}
	return `INSERT INTO processed_events (event_id, event_type, stripe_account, event_created)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[]) ORDER BY 1
			ON CONFLICT (event_id) DO NOTHING
			RETURNING event_id`, []any{ids, types, accounts, created}
}

// deadConnRetries bounds how many dead pooled connections one transaction
// may meet in a row before its error is returned.
const deadConnRetries = 4

// beginFunc is pgx.BeginFunc that starts over on another connection when
// the transaction failed before anything reached the server: after a network
// failure or a failover every idle pooled connection is dead, and the first
// use of each fails that way. Nothing ran, so starting over is safe.
func (l *Ledger) beginFunc(ctx context.Context, fn func(pgx.Tx) error) error {
	err := pgx.BeginFunc(ctx, l.pool, fn)
	for i := 0; i < deadConnRetries && err != nil && pgconn.SafeToRetry(err) && ctx.Err() == nil; i++ {
		err = pgx.BeginFunc(ctx, l.pool, fn)
	}
	return err
}

// Processed reports whether the ledger holds id.
func (l *Ledger) Processed(ctx context.Context, id string) (bool, error) {
	var exists bool
	err := l.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM processed_events WHERE event_id = $1)`, id).Scan(&exists)
	if err != nil {
		return false, fmt.Errorf("look up ledger %s: %w", id, err)
	}
	return exists, nil
}

// ProcessedOf reports which of ids the ledger holds (package replay's dry
// run: an event held is a duplicate when replayed).
func (l *Ledger) ProcessedOf(ctx context.Context, ids []string) (map[string]bool, error) {
	rows, err := l.pool.Query(ctx, `SELECT event_id FROM processed_events WHERE event_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("look up ledger: %w", err)
	}
	held, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("look up ledger: %w", err)
	}
	out := make(map[string]bool, len(held))
	for _, id := range held {
		out[id] = true
	}
	return out, nil
}

// ApplyBatch is Apply for many events in one transaction (group commit):
// one statement claims every id (in id order, so concurrent batches lock
// ledger rows in the same order), then effects runs for each newly claimed
// event in that order. Any error rolls the whole batch back; callers then
// retry the events one by one with Apply, so one bad event fails alone.
// refs must have distinct ids.
func (l *Ledger) ApplyBatch(ctx context.Context, refs []EventRef, effects func(ctx context.Context, tx pgtx.Tx, ev EventRef) error) (applied map[string]bool, err error) {
	return l.ApplyBatchThen(ctx, refs, effects, nil)
}

// ApplyBatchThen is ApplyBatch with a last step in the same transaction:
// then (when not nil) runs after the effects with the ids newly claimed, in
// id order (the handler writes their event records there, so that they are
// durable with the commit).
func (l *Ledger) ApplyBatchThen(ctx context.Context, refs []EventRef, effects func(ctx context.Context, tx pgtx.Tx, ev EventRef) error,
	then func(ctx context.Context, tx pgtx.Tx, claimed []string) error) (applied map[string]bool, err error) {
	sorted := append([]EventRef(nil), refs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ID < sorted[j].ID })
	claim, args := ClaimBatch(sorted)
	err = l.beginFunc(ctx, func(tx pgx.Tx) error {
		applied = make(map[string]bool, len(refs))
		rows, err := tx.Query(ctx, claim, args...)
		if err != nil {
			return fmt.Errorf("claim events in ledger: %w", err)
		}
		claimed, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("claim events in ledger: %w", err)
		}
		for _, id := range claimed {
			applied[id] = true
		}
		for _, ref := range sorted {
			if !applied[ref.ID] {
				continue
			}
			if err := effects(ctx, tx, ref); err != nil {
				return fmt.Errorf("event %s: %w", ref.ID, err)
			}
		}
		if then != nil && len(claimed) > 0 {
			return then(ctx, tx, claimed)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("apply batch of %d events: %w", len(refs), err)
	}
	return applied, nil
}
