package ops

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/handler"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// Observers tells several observers of the handler.
type Observers []handler.Observer

// Handled implements handler.Observer.
func (o Observers) Handled(eventType string, outcome stripeevent.Outcome, elapsed time.Duration) {
	for _, x := range o {
		x.Handled(eventType, outcome, elapsed)
	}
}

// Delivered implements handler.DeliveryObserver for the observers that do.
func (o Observers) Delivered(account string, source stripeevent.Source, apiVersion string, expected bool) {
	for _, x := range o {
		if d, ok := x.(handler.DeliveryObserver); ok {
			d.Delivered(account, source, apiVersion, expected)
		}
	}
}

// Problems is the dead-letter list of the console: events whose last
// handling failed or was rejected, in ops_event_problems. The events table
// has no index on status, so listing them from it would read whole days;
// this small table is written only when something goes wrong.
type Problems struct {
	pool *pgxpool.Pool
	log  *slog.Logger
}

// NewProblems returns the dead-letter list on pool.
func NewProblems(pool *pgxpool.Pool, log *slog.Logger) *Problems {
	return &Problems{pool: pool, log: log}
}

// Track wraps the handler's event store so that failures and rejections
// are listed and a later successful record takes them off the list.
func (p *Problems) Track(store handler.EventStore) handler.EventStore {
	return trackedStore{EventStore: store, problems: p}
}

type trackedStore struct {
	handler.EventStore
	problems *Problems
}

// RecordFailure records the failed record, then lists it. Listing is best
// effort: the event is re-driven by Stripe or the poller either way.
func (s trackedStore) RecordFailure(ctx context.Context, r events.Record, cause error) error {
	err := s.EventStore.RecordFailure(ctx, r, cause)
	msg := "unknown error"
	if cause != nil {
		msg = cause.Error()
	}
	s.problems.upsert(ctx, r, "failed", msg)
	return err
}

// PutProcessed writes processed records, then lists the rejected ones and
// takes the re-deliveries (attempts > 1: a record existed, maybe failed)
// off the list. A first delivery that succeeds costs nothing extra.
func (s trackedStore) PutProcessed(ctx context.Context, recs []events.Record) error {
	if err := s.EventStore.PutProcessed(ctx, recs); err != nil {
		return err
	}
	var resolved []string
	for _, r := range recs {
		switch {
		case r.LastError != "":
			s.problems.upsert(ctx, r, "rejected", r.LastError)
		case r.Attempts > 1:
			resolved = append(resolved, r.ID)
		}
	}
	if len(resolved) > 0 {
		if err := s.problems.Resolve(ctx, resolved...); err != nil {
			s.problems.log.Warn("could not take processed events off the dead-letter list", "error", err)
		}
	}
	return nil
}

func (p *Problems) upsert(ctx context.Context, r events.Record, outcome, msg string) {
	if len(msg) > 2000 {
		msg = msg[:2000]
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := p.pool.Exec(ctx, `INSERT INTO ops_event_problems (event_id, outcome, event_type, stripe_account, error, at)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (event_id) DO UPDATE SET outcome = excluded.outcome, error = excluded.error, at = excluded.at`,
		r.ID, outcome, r.Type, r.StripeAccount, msg, time.Now().UTC())
	if err != nil {
		p.log.Warn("could not list event on the dead-letter list", "event_id", r.ID, "error", err)
	}
}

// Resolve takes events off the list.
func (p *Problems) Resolve(ctx context.Context, ids ...string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := p.pool.Exec(ctx, `DELETE FROM ops_event_problems WHERE event_id = ANY($1)`, ids); err != nil {
		return fmt.Errorf("resolve problems: %w", err)
	}
	return nil
}

// Problem is one listed event.
type Problem struct {
	EventID       string
	Outcome       string
	EventType     string
	StripeAccount string
	Error         string
	At            time.Time
}

// ProblemPage is one page of the list, newest first.
type ProblemPage struct {
	Problems []Problem
	// Next is the cursor of the next page ("" on the last).
	Next string
}

// List reads a page of the list, newest first, filtered by outcome when
// outcome is not empty. cursor is a Next of an earlier page.
func (p *Problems) List(ctx context.Context, outcome string, limit int, cursor string) (ProblemPage, error) {
	after, afterID, err := decodeProblemCursor(cursor)
	if err != nil {
		return ProblemPage{}, err
	}
	rows, err := p.pool.Query(ctx, `SELECT event_id, outcome, event_type, stripe_account, error, at FROM ops_event_problems
		WHERE ($1 = '' OR outcome = $1) AND ($2::timestamptz IS NULL OR (at, event_id) < ($2, $3))
		ORDER BY at DESC, event_id DESC LIMIT $4`, outcome, after, afterID, limit+1)
	if err != nil {
		return ProblemPage{}, fmt.Errorf("list problems: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Problem, error) {
		var x Problem
		err := row.Scan(&x.EventID, &x.Outcome, &x.EventType, &x.StripeAccount, &x.Error, &x.At)
		return x, err
	})
	if err != nil {
		return ProblemPage{}, fmt.Errorf("list problems: %w", err)
	}
	var page ProblemPage
	if len(list) > limit {
		list = list[:limit]
		last := list[limit-1]
		page.Next = last.At.UTC().Format(time.RFC3339Nano) + "|" + last.EventID
	}
	page.Problems = list
	return page, nil
}

// badCursor is a cursor the list did not hand out (apperr.ErrInvalid).
func badCursor() error { return apperr.New(apperr.CodeInvalidParameter, "invalid cursor") }

func decodeProblemCursor(c string) (*time.Time, string, error) {
	if c == "" {
		return nil, "", nil
	}
	for i := 0; i < len(c); i++ {
		if c[i] == '|' {
			t, err := time.Parse(time.RFC3339Nano, c[:i])
			if err != nil {
				return nil, "", badCursor()
			}
			return &t, c[i+1:], nil
		}
	}
	return nil, "", badCursor()
}

// Counts are the list's sizes by outcome.
func (p *Problems) Counts(ctx context.Context) (map[string]int64, error) {
	rows, err := p.pool.Query(ctx, `SELECT outcome, count(*) FROM ops_event_problems GROUP BY outcome`)
	if err != nil {
		return nil, fmt.Errorf("count problems: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var o string
		var n int64
		if err := rows.Scan(&o, &n); err != nil {
			return nil, fmt.Errorf("count problems: %w", err)
		}
		out[o] = n
	}
	return out, rows.Err()
}
