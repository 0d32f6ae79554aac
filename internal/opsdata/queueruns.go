package opsdata

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billingqueue"
	"github.com/stripe-payments/stripe-payments/internal/failcause"
)

// QueueRuns keeps the billing queue's runs and the outcome of each of
// their messages (billingqueue.RunStore), shared by every replica.
type QueueRuns struct {
	pool *pgxpool.Pool
}

// NewQueueRuns returns the queue's run store on pool.
func NewQueueRuns(pool *pgxpool.Pool) *QueueRuns { return &QueueRuns{pool: pool} }

var _ billingqueue.RunStore = (*QueueRuns)(nil)

// Begin opens a run, or joins the open one of the same job, clock and
// date while it is alive: enqueuing with a recent heartbeat, or enqueued
// and before its deadline. The transaction holds an advisory lock on the
// key, so two replicas starting the same run at once open one.
func (q *QueueRuns) Begin(ctx context.Context, start billingqueue.RunStart) (billingqueue.Run, bool, error) {
	var (
		run    billingqueue.Run
		joined bool
	)
	err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('billing-queue-run|' || $1 || '|' || $2 || '|' || $3::text, 0))`,
			start.Job, start.Clock, start.Date.Time()); err != nil {
			return err
		}
		var (
			id       uuid.UUID
			started  time.Time
			joinable bool
		)
		err := tx.QueryRow(ctx, `SELECT id, started_at,
				enqueue_error IS NULL AND clock_timestamp() < deadline
				AND (enqueue_done_at IS NOT NULL OR heartbeat_at > clock_timestamp() - make_interval(secs => $4))
			FROM ops_billing_queue_runs
			WHERE job = $1 AND test_clock = $2 AND date = $3 AND drained_at IS NULL AND superseded_at IS NULL`,
			start.Job, start.Clock, start.Date.Time(), start.StaleAfter.Seconds()).Scan(&id, &started, &joinable)
		switch {
		case err == nil && joinable:
			run, joined = billingqueue.Run{ID: id.String(), Job: start.Job, Clock: start.Clock, Date: start.Date, Started: started}, true
			return nil
		case err == nil:
			if _, err := tx.Exec(ctx, `UPDATE ops_billing_queue_runs SET superseded_at = clock_timestamp() WHERE id = $1`, id); err != nil {
				return err
			}
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		id = uuid.New()
		if err := tx.QueryRow(ctx, `INSERT INTO ops_billing_queue_runs (id, job, date, test_clock, started_at, heartbeat_at, deadline)
			VALUES ($1, $2, $3, $4, clock_timestamp(), clock_timestamp(), clock_timestamp() + make_interval(secs => $5))
			RETURNING started_at`, id, start.Job, start.Date.Time(), start.Clock, start.Deadline.Seconds()).Scan(&started); err != nil {
			return err
		}
		run = billingqueue.Run{ID: id.String(), Job: start.Job, Clock: start.Clock, Date: start.Date, Started: started}
		return nil
	})
	if err != nil {
		return run, false, fmt.Errorf("open billing queue run: %w", err)
	}
	return run, joined, nil
}

// Enqueuing records the enqueuer alive.
func (q *QueueRuns) Enqueuing(ctx context.Context, run string, enqueued int) error {
	if _, err := q.pool.Exec(ctx, `UPDATE ops_billing_queue_runs SET heartbeat_at = clock_timestamp(), enqueued = greatest(enqueued, $2)
		WHERE id = $1 AND enqueue_done_at IS NULL`, run, enqueued); err != nil {
		return fmt.Errorf("billing queue run heartbeat: %w", err)
	}
	return nil
}

// Enqueued ends the enqueue.
func (q *QueueRuns) Enqueued(ctx context.Context, run string, enqueued int, runErr error) error {
	var msg *string
	if runErr != nil {
		s := runErr.Error()
		msg = &s
	}
	if _, err := q.pool.Exec(ctx, `UPDATE ops_billing_queue_runs
		SET heartbeat_at = clock_timestamp(), enqueue_done_at = clock_timestamp(), enqueued = $2, enqueue_error = $3
		WHERE id = $1`, run, enqueued, msg); err != nil {
		return fmt.Errorf("billing queue run enqueued: %w", err)
	}
	return nil
}

// Record keeps one message's latest outcome. A final outcome is never
// replaced by "locked", nor a collection by the "nothing_due" of a second
// delivery of the same message.
func (q *QueueRuns) Record(ctx context.Context, r billingqueue.Result) error {
	c := r.Counts
	_, err := q.pool.Exec(ctx, `INSERT INTO ops_billing_queue_messages AS m (run_id, account, part, outcome, receives, cause, replica, at,
			entries, reminded, succeeded, processing, declined, stale, paused_skipped, resumed, skipped, paid_by_customer, unknown, resolved, unresolved, errors)
		VALUES ($1, $2, $3, $4, $5, $6, $7, clock_timestamp(), $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)
		ON CONFLICT (run_id, account, part) DO UPDATE SET outcome = EXCLUDED.outcome, receives = greatest(m.receives, EXCLUDED.receives),
			cause = EXCLUDED.cause, replica = EXCLUDED.replica, at = EXCLUDED.at, entries = EXCLUDED.entries, reminded = EXCLUDED.reminded,
			succeeded = EXCLUDED.succeeded, processing = EXCLUDED.processing, declined = EXCLUDED.declined, stale = EXCLUDED.stale,
			paused_skipped = EXCLUDED.paused_skipped, resumed = EXCLUDED.resumed, skipped = EXCLUDED.skipped,
			paid_by_customer = EXCLUDED.paid_by_customer, unknown = EXCLUDED.unknown, resolved = EXCLUDED.resolved,
			unresolved = EXCLUDED.unresolved, errors = EXCLUDED.errors
		WHERE NOT ((EXCLUDED.outcome = 'locked' AND m.outcome <> 'locked')
		        OR (EXCLUDED.outcome = 'nothing_due' AND m.outcome IN ('collected', 'incomplete')))`,
		r.Run, r.Account, r.Part, string(r.Outcome), r.Receives, r.Cause, r.Replica,
		c.Entries, c.Reminded, c.Succeeded, c.Processing, c.Declined, c.Stale, c.PausedSkipped, c.Resumed, c.Skipped,
		c.PaidByCustomer, c.Unknown, c.Resolved, c.Unresolved, c.Errors)
	if err != nil {
		return fmt.Errorf("record billing queue outcome of %s: %w", r.Account, err)
	}
	return nil
}

// progressQuery reads runs with their messages' outcomes and counts.
const progressQuery = `SELECT r.id::text, r.job, r.date, r.test_clock, r.started_at, r.enqueued, r.enqueue_done_at IS NOT NULL,
		coalesce(r.enqueue_error, ''), r.drained_at IS NOT NULL, r.superseded_at IS NOT NULL, r.deadline,
		count(m.run_id) FILTER (WHERE m.outcome = 'collected'), count(m.run_id) FILTER (WHERE m.outcome = 'nothing_due'),
		count(m.run_id) FILTER (WHERE m.outcome = 'incomplete'), count(m.run_id) FILTER (WHERE m.outcome = 'locked'),
		count(m.run_id) FILTER (WHERE m.outcome = 'dead'), count(DISTINCT m.replica),
		coalesce(sum(m.entries), 0), coalesce(sum(m.reminded), 0), coalesce(sum(m.succeeded), 0), coalesce(sum(m.processing), 0),
		coalesce(sum(m.declined), 0), coalesce(sum(m.stale), 0), coalesce(sum(m.paused_skipped), 0), coalesce(sum(m.resumed), 0),
		coalesce(sum(m.skipped), 0), coalesce(sum(m.paid_by_customer), 0), coalesce(sum(m.unknown), 0), coalesce(sum(m.resolved), 0),
		coalesce(sum(m.unresolved), 0), coalesce(sum(m.errors), 0)
	FROM ops_billing_queue_runs r LEFT JOIN ops_billing_queue_messages m ON m.run_id = r.id
	WHERE r.id = ANY($1::uuid[])
	GROUP BY r.id`

func (q *QueueRuns) progress(ctx context.Context, ids []string) (map[string]billingqueue.Progress, error) {
	rows, err := q.pool.Query(ctx, progressQuery, ids)
	if err != nil {
		return nil, fmt.Errorf("read billing queue runs: %w", err)
	}
	out := map[string]billingqueue.Progress{}
	_, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (struct{}, error) {
		var (
			p billingqueue.Progress
			d time.Time
			c = &p.Counts
		)
		err := row.Scan(&p.ID, &p.Job, &d, &p.Clock, &p.Started, &p.Enqueued, &p.EnqueueDone, &p.EnqueueError, &p.Drained, &p.Superseded,
			&p.Deadline, &p.Collected, &p.NothingDue, &p.Incomplete, &p.Locked, &p.Dead, &p.Replicas,
			&c.Entries, &c.Reminded, &c.Succeeded, &c.Processing, &c.Declined, &c.Stale, &c.PausedSkipped, &c.Resumed, &c.Skipped,
			&c.PaidByCustomer, &c.Unknown, &c.Resolved, &c.Unresolved, &c.Errors)
		p.Date = dates.Of(d)
		out[p.ID] = p
		return struct{}{}, err
	})
	if err != nil {
		return nil, fmt.Errorf("read billing queue runs: %w", err)
	}
	return out, nil
}

// ErrNoQueueRun: no queued run has that id.
var ErrNoQueueRun = apperr.New(apperr.CodeNotFound, "no such billing queue run")

// Progress reads one run's state.
func (q *QueueRuns) Progress(ctx context.Context, run string) (billingqueue.Progress, error) {
	if _, err := uuid.Parse(run); err != nil {
		return billingqueue.Progress{}, fmt.Errorf("billing queue run %q: %w", run, ErrNoQueueRun)
	}
	ps, err := q.progress(ctx, []string{run})
	if err != nil {
		return billingqueue.Progress{}, err
	}
	p, ok := ps[run]
	if !ok {
		return p, fmt.Errorf("billing queue run %s: %w", run, ErrNoQueueRun)
	}
	return p, nil
}

// ProgressOf reads the state of several runs (the console's runs page).
func (q *QueueRuns) ProgressOf(ctx context.Context, runs []string) (map[string]billingqueue.Progress, error) {
	if len(runs) == 0 {
		return map[string]billingqueue.Progress{}, nil
	}
	return q.progress(ctx, runs)
}

// CloseDrained marks drained the open runs whose enqueue is done and all
// of whose messages ended; each is returned to one caller only.
func (q *QueueRuns) CloseDrained(ctx context.Context) ([]billingqueue.Progress, error) {
	rows, err := q.pool.Query(ctx, `UPDATE ops_billing_queue_runs r SET drained_at = clock_timestamp()
		WHERE r.id IN (SELECT x.id FROM ops_billing_queue_runs x
		               WHERE x.drained_at IS NULL AND x.superseded_at IS NULL AND x.enqueue_done_at IS NOT NULL
		                 AND (SELECT count(*) FROM ops_billing_queue_messages m WHERE m.run_id = x.id AND m.outcome <> 'locked') >= x.enqueued
		               FOR UPDATE SKIP LOCKED)
		  AND r.drained_at IS NULL
		RETURNING r.id::text`)
	if err != nil {
		return nil, fmt.Errorf("close drained billing queue runs: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) == 0 {
		if err != nil {
			err = fmt.Errorf("close drained billing queue runs: %w", err)
		}
		return nil, err
	}
	ps, err := q.progress(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]billingqueue.Progress, 0, len(ps))
	for _, id := range ids {
		out = append(out, ps[id])
	}
	return out, nil
}

// Overdue counts the open real-time runs past their deadline (a test
// clock's run is a test's business, never a page).
func (q *QueueRuns) Overdue(ctx context.Context) (int, error) {
	var n int
	if err := q.pool.QueryRow(ctx, `SELECT count(*) FROM ops_billing_queue_runs
		WHERE drained_at IS NULL AND superseded_at IS NULL AND test_clock = '' AND deadline < clock_timestamp()`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count overdue billing queue runs: %w", err)
	}
	return n, nil
}

// DeadGroups are, per account, the messages that went to the billing
// queue's dead-letter queue and that no later collection of the account
// settled (the incidents' source); the samples are the runs' ids.
func (q *QueueRuns) DeadGroups(ctx context.Context, samples int) ([]failcause.Group, error) {
	rows, err := q.pool.Query(ctx, `SELECT 'collect', d.account, '', count(*), min(d.at), max(d.at),
			(array_agg(d.run_id::text ORDER BY d.at DESC))[1:$1]
		FROM ops_billing_queue_messages d
		WHERE d.outcome = 'dead'
		  AND NOT EXISTS (SELECT 1 FROM ops_billing_queue_messages ok
		                  WHERE ok.account = d.account AND ok.outcome IN ('collected', 'nothing_due') AND ok.at > d.at)
		GROUP BY d.account`, samples)
	if err != nil {
		return nil, fmt.Errorf("read billing queue dead letters: %w", err)
	}
	return collectGroups(rows, "billing queue dead letters")
}
