package opsdata

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/failcause"
)

// Problems is the dead-letter list the console shows: events whose last
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

// Listed puts an event on the list (outcome "failed" or "rejected") or
// updates its entry. It is best effort (implements handler.ProblemList):
// the event is re-driven by Stripe or the poller either way, so a failed
// write is logged, not returned.
func (p *Problems) Listed(ctx context.Context, r events.Record, outcome, msg string) {
	if len(msg) > 2000 {
		msg = msg[:2000]
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// The incident cause is computed here, once per write, so reading the
	// incidents never classifies the whole list (incidents.Store).
	cause := failcause.OfEvent(outcome, msg)
	_, err := p.pool.Exec(ctx, `INSERT INTO ops_event_problems (event_id, outcome, event_type, stripe_account, error, at, cause, cause_version)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (event_id) DO UPDATE SET outcome = excluded.outcome, error = excluded.error, at = excluded.at,
			cause = excluded.cause, cause_version = excluded.cause_version`,
		r.ID, outcome, r.Type, r.StripeAccount, msg, time.Now().UTC(), cause, failcause.Version)
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

func decodeProblemCursor(c string) (*time.Time, string, error) {
	if c == "" {
		return nil, "", nil
	}
	for i := 0; i < len(c); i++ {
		if c[i] == '|' {
			t, err := time.Parse(time.RFC3339Nano, c[:i])
			if err != nil {
				return nil, "", apperr.Invalid("invalid cursor")
			}
			return &t, c[i+1:], nil
		}
	}
	return nil, "", apperr.Invalid("invalid cursor")
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

// ProblemFilter selects listed events oldest first, the order a bulk
// replay re-drives them in. Empty fields and nil times select all.
type ProblemFilter struct {
	Outcome, EventType, StripeAccount string
	Since, Until                      *time.Time // at in [Since, Until)
	// AfterAt and AfterID are the keyset of the previous page's last row
	// (AfterAt nil: from the first).
	AfterAt *time.Time
	AfterID string
}

// Oldest reads up to limit listed events f selects, oldest first (package
// replay pages through them by f's keyset).
func (p *Problems) Oldest(ctx context.Context, f ProblemFilter, limit int) ([]Problem, error) {
	rows, err := p.pool.Query(ctx, `SELECT event_id, outcome, event_type, stripe_account, error, at FROM ops_event_problems
		WHERE ($1 = '' OR outcome = $1) AND ($2 = '' OR event_type = $2) AND ($3 = '' OR stripe_account = $3)
		  AND ($4::timestamptz IS NULL OR at >= $4) AND ($5::timestamptz IS NULL OR at < $5)
		  AND ($6::timestamptz IS NULL OR (at, event_id) > ($6, $7))
		ORDER BY at, event_id LIMIT $8`, f.Outcome, f.EventType, f.StripeAccount, f.Since, f.Until, f.AfterAt, f.AfterID, limit)
	if err != nil {
		return nil, fmt.Errorf("read problems oldest first: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Problem, error) {
		var x Problem
		err := row.Scan(&x.EventID, &x.Outcome, &x.EventType, &x.StripeAccount, &x.Error, &x.At)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("read problems oldest first: %w", err)
	}
	return list, nil
}

// ClassifyPending computes, for up to limit rows whose cause no classifier
// of this version computed (rows listed before causes were kept, by an
// older classifier, or by hand), their cause with cause, and answers how
// many it read: fewer than limit means none is left. A row rewritten
// meanwhile (another error) keeps what its writer computed.
func (p *Problems) ClassifyPending(ctx context.Context, version int, cause func(outcome, msg string) string, limit int) (int, error) {
	rows, err := p.pool.Query(ctx, `SELECT event_id, outcome, error FROM ops_event_problems
		WHERE cause_version IS NULL OR cause_version < $1 LIMIT $2`, version, limit)
	if err != nil {
		return 0, fmt.Errorf("read unclassified problems: %w", err)
	}
	var ids, outcomes, msgs, causes []string
	for rows.Next() {
		var id, outcome, msg string
		if err := rows.Scan(&id, &outcome, &msg); err != nil {
			rows.Close()
			return 0, fmt.Errorf("read unclassified problems: %w", err)
		}
		ids, outcomes, msgs = append(ids, id), append(outcomes, outcome), append(msgs, msg)
		causes = append(causes, cause(outcome, msg))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("read unclassified problems: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	if _, err := p.pool.Exec(ctx, `UPDATE ops_event_problems p SET cause = u.cause, cause_version = $5
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(event_id, outcome, error, cause)
		WHERE p.event_id = u.event_id AND p.outcome = u.outcome AND p.error = u.error
		  AND (p.cause_version IS NULL OR p.cause_version < $5)`, ids, outcomes, msgs, causes, version); err != nil {
		return 0, fmt.Errorf("classify problems: %w", err)
	}
	return len(ids), nil
}

// Groups are the listed events grouped by cause, type and account (Message
// is the cause), from the counts the triggers of sql/00040 keep per group
// in incident_event_groups: each group's first and last occurrence and its
// samples newest first are a few entries of the group index, never the
// whole list.
func (p *Problems) Groups(ctx context.Context, samples int) ([]failcause.Group, error) {
	rows, err := p.pool.Query(ctx, `SELECT g.event_type, g.stripe_account, g.cause, g.n, o.first, o.last, coalesce(x.samples, '{}')
		FROM incident_event_groups g
		CROSS JOIN LATERAL (SELECT
			(SELECT p.at FROM ops_event_problems p WHERE p.cause = g.cause AND p.event_type = g.event_type AND p.stripe_account = g.stripe_account
			 ORDER BY p.at LIMIT 1) AS first,
			(SELECT p.at FROM ops_event_problems p WHERE p.cause = g.cause AND p.event_type = g.event_type AND p.stripe_account = g.stripe_account
			 ORDER BY p.at DESC LIMIT 1) AS last) o
		CROSS JOIN LATERAL (SELECT array_agg(event_id) AS samples FROM (SELECT p.event_id FROM ops_event_problems p
			WHERE p.cause = g.cause AND p.event_type = g.event_type AND p.stripe_account = g.stripe_account
			ORDER BY p.at DESC, p.event_id LIMIT $1) s) x
		WHERE g.n > 0 AND o.first IS NOT NULL`, samples)
	if err != nil {
		return nil, fmt.Errorf("read problem groups: %w", err)
	}
	return collectGroups(rows, "problem groups")
}

// collectGroups scans rows of (type, account, message, count, first, last,
// samples).
func collectGroups(rows pgx.Rows, what string) ([]failcause.Group, error) {
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (failcause.Group, error) {
		var g failcause.Group
		err := r.Scan(&g.Type, &g.Account, &g.Message, &g.Count, &g.First, &g.Last, &g.Samples)
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	return out, nil
}
