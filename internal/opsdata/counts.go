// Package opsdata stores what operators look at beside the events table:
// handled events counted per hour (ops_event_hours), the failed and
// rejected list (ops_event_problems), billing job runs (ops_billing_runs)
// and the console's sessions (ops_sessions). The ingest path feeds it
// through the handler's Observer and ProblemList interfaces; the console
// (internal/ops) only reads it and asks (docs/architecture.md).
package opsdata

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// Outcomes the overview charts, in drawing order. stripeevent.Completed (effects
// committed by an earlier attempt, recorded now) is counted as applied.
var Outcomes = []string{"applied", "duplicate", "ignored", "rejected", "failed"}

// Counter counts handled events per hour and outcome in memory and adds the
// counts to ops_event_hours every FlushEvery: the hot path takes one mutex,
// never a database round trip. A crash loses at most FlushEvery of counts,
// which is acceptable for a chart (the Prometheus counters are the record).
type Counter struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	now  func() time.Time

	mu      sync.Mutex
	pending map[hourKey]int64
}

type hourKey struct {
	hour    time.Time
	outcome string
}

// NewCounter returns a counter writing to pool; now may be nil.
func NewCounter(pool *pgxpool.Pool, log *slog.Logger, now func() time.Time) *Counter {
	if now == nil {
		now = time.Now
	}
	return &Counter{pool: pool, log: log, now: now, pending: map[hourKey]int64{}}
}

// Handled implements handler.Observer.
func (c *Counter) Handled(_ string, outcome stripeevent.Outcome, _ time.Duration) {
	o := string(outcome)
	if outcome == stripeevent.Completed {
		o = string(stripeevent.Applied)
	}
	k := hourKey{hour: c.now().UTC().Truncate(time.Hour), outcome: o}
	c.mu.Lock()
	c.pending[k]++
	c.mu.Unlock()
}

// Flush adds the pending counts to Postgres. On failure they are put back
// and tried again at the next flush.
func (c *Counter) Flush(ctx context.Context) error {
	c.mu.Lock()
	batch := c.pending
	c.pending = map[hourKey]int64{}
	c.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for k, n := range batch {
		b.Queue(`INSERT INTO ops_event_hours (hour, outcome, n) VALUES ($1, $2, $3)
			ON CONFLICT (hour, outcome) DO UPDATE SET n = ops_event_hours.n + excluded.n`, k.hour, k.outcome, n)
	}
	if err := c.pool.SendBatch(ctx, b).Close(); err != nil {
		c.mu.Lock()
		for k, n := range batch {
			c.pending[k] += n
		}
		c.mu.Unlock()
		return fmt.Errorf("flush event counts: %w", err)
	}
	return nil
}

// Run flushes every interval until ctx ends, then once more.
func (c *Counter) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := c.Flush(fctx); err != nil {
				c.log.Warn("event counts lost at shutdown", "error", err)
			}
			cancel()
			return
		case <-t.C:
			if err := c.Flush(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("could not flush event counts; kept for the next flush", "error", err)
			}
		}
	}
}

// Hour is one hour's counts by outcome.
type Hour struct {
	Start  time.Time
	Counts map[string]int64
}

// Total of the hour.
func (h Hour) Total() int64 {
	var t int64
	for _, n := range h.Counts {
		t += n
	}
	return t
}

// Hours reads the n hours ending with the current one, oldest first (one
// indexed range read of at most n×5 rows).
func (c *Counter) Hours(ctx context.Context, n int) ([]Hour, error) {
	end := c.now().UTC().Truncate(time.Hour)
	start := end.Add(-time.Duration(n-1) * time.Hour)
	out := make([]Hour, n)
	for i := range out {
		out[i] = Hour{Start: start.Add(time.Duration(i) * time.Hour), Counts: map[string]int64{}}
	}
	rows, err := c.pool.Query(ctx, `SELECT hour, outcome, n FROM ops_event_hours WHERE hour >= $1 AND hour <= $2`, start, end)
	if err != nil {
		return nil, fmt.Errorf("read event counts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			h       time.Time
			outcome string
			count   int64
		)
		if err := rows.Scan(&h, &outcome, &count); err != nil {
			return nil, fmt.Errorf("read event counts: %w", err)
		}
		i := int(h.UTC().Sub(start) / time.Hour)
		if i >= 0 && i < n {
			out[i].Counts[outcome] += count
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read event counts: %w", err)
	}
	return out, nil
}
