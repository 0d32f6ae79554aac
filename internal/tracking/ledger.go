package tracking

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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

// NewLedger returns a ledger over pool.
func NewLedger(pool *pgxpool.Pool) *Ledger { return &Ledger{pool: pool} }

// Apply runs effects in one transaction that first claims ev in the ledger.
// If the claim conflicts, the effects were committed before (by an earlier or
// a concurrent delivery, which the conflict waits for) and effects is not
// run; applied is then false. A concurrent delivery blocks on the row lock of
// the uncommitted claim, so the same event applies at most once.
func (l *Ledger) Apply(ctx context.Context, ev EventRef, effects func(ctx context.Context, tx pgx.Tx) error) (applied bool, err error) {
	err = pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
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

// Processed reports whether the ledger holds id.
func (l *Ledger) Processed(ctx context.Context, id string) (bool, error) {
	var exists bool
	err := l.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM processed_events WHERE event_id = $1)`, id).Scan(&exists)
	if err != nil {
		return false, fmt.Errorf("look up ledger %s: %w", id, err)
	}
	return exists, nil
}
