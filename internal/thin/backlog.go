package thin

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stripe-payments/stripe-payments/internal/failcause"
)

// Hydrations is the thin events waiting for hydration: how
// many, how many of them failed a try, the oldest's age, and the oldest
// failing ones, read from the hydration queue (thin_hydrations).
type Hydrations struct {
	Waiting, Retrying int
	Oldest            time.Duration
	Stuck             []Stuck
}

// Stuck is one thin event whose hydration failed at least once.
type Stuck struct {
	EventID, Type, Account, LastError string
	Attempts                          int
	Age                               time.Duration
}

// Hydrations reads the hydration queue for the console: the oldest maxStuck
// failing notifications, their ages at now.
func (q *Queue) Hydrations(ctx context.Context, now time.Time, maxStuck int) (Hydrations, error) {
	var b Hydrations
	var oldest *time.Time
	if err := q.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE last_error IS NOT NULL), min(received_at)
		FROM thin_hydrations`).Scan(&b.Waiting, &b.Retrying, &oldest); err != nil {
		return b, fmt.Errorf("thin backlog: %w", err)
	}
	if oldest != nil {
		b.Oldest = now.Sub(*oldest)
	}
	rows, err := q.pool.Query(ctx, `SELECT event_id, event_type, context, coalesce(last_error, ''), attempts, received_at
		FROM thin_hydrations WHERE last_error IS NOT NULL ORDER BY received_at LIMIT $1`, maxStuck)
	if err != nil {
		return b, fmt.Errorf("thin backlog: %w", err)
	}
	b.Stuck, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Stuck, error) {
		var s Stuck
		var at time.Time
		err := r.Scan(&s.EventID, &s.Type, &s.Account, &s.LastError, &s.Attempts, &at)
		s.Age = now.Sub(at)
		return s, err
	})
	if err != nil {
		return b, fmt.Errorf("thin backlog: %w", err)
	}
	return b, nil
}

// FailingGroups are the thin events that failed a hydration, or have waited
// since before pendingBefore for their first, grouped by type, context
// (Account: "" for the platform) and last error (Message: "" while none
// failed yet): the incidents' view of the hydration queue.
func (q *Queue) FailingGroups(ctx context.Context, pendingBefore time.Time, samples int) ([]failcause.Group, error) {
	rows, err := q.pool.Query(ctx, `SELECT event_type, context, coalesce(last_error, ''), count(*), min(received_at), max(received_at),
			(array_agg(event_id ORDER BY received_at DESC, event_id))[1:$2]
		FROM thin_hydrations WHERE last_error IS NOT NULL OR received_at < $1 GROUP BY 1, 2, 3`, pendingBefore, samples)
	if err != nil {
		return nil, fmt.Errorf("read failing hydrations: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (failcause.Group, error) {
		var g failcause.Group
		err := r.Scan(&g.Type, &g.Account, &g.Message, &g.Count, &g.First, &g.Last, &g.Samples)
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("read failing hydrations: %w", err)
	}
	return out, nil
}
