package thin

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
