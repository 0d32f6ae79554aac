package thin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Queue is the durable hydration queue (Postgres table thin_hydrations):
// one row per thin notification received and not yet processed; its
// events-table record is written behind the answer (recorded), and
// thin_done keeps the ids of hydrated ones for DoneRetention.
type Queue struct {
	pool *pgxpool.Pool
}

// NewQueue returns the queue on pool.
func NewQueue(pool *pgxpool.Pool) *Queue { return &Queue{pool: pool} }

// Job is one queued thin notification.
type Job struct {
	EventID    string
	Type       string
	Context    string
	Source     string
	Payload    []byte
	ReceivedAt time.Time
	Attempts   int  // tries so far, this one included once claimed
	Recorded   bool // its record is in the events table
}

// DoneRetention is how long a hydrated notification's id stays in
// thin_done (a redelivery within it is a duplicate with no work; Stripe
// retries a delivery for 3 days). After it a redelivery is hydrated again,
// which finds its snapshot a duplicate: nothing applies twice.
const DoneRetention = 7 * 24 * time.Hour

// Enqueue queues a job unless its event is queued already, in one
// statement (one durable commit: what the answer waits for), and reports
// whether its event was hydrated already (nothing queued then).
func (q *Queue) Enqueue(ctx context.Context, j Job) (done bool, err error) {
	err = q.pool.QueryRow(ctx, `WITH done AS (SELECT EXISTS (SELECT 1 FROM thin_done WHERE event_id = $1) AS d),
		ins AS (INSERT INTO thin_hydrations (event_id, event_type, context, source, payload)
			SELECT $1, $2, $3, $4, $5 FROM done WHERE NOT d ON CONFLICT (event_id) DO NOTHING)
		SELECT d FROM done`,
		j.EventID, j.Type, j.Context, j.Source, j.Payload).Scan(&done)
	if err != nil {
		return false, fmt.Errorf("enqueue thin event %s: %w", j.EventID, err)
	}
	return done, nil
}

// Unrecorded returns up to n queued jobs whose record is not yet in the
// events table, oldest first; ids limits it to those (nil: any).
func (q *Queue) Unrecorded(ctx context.Context, n int, ids []string) ([]Job, error) {
	rows, err := q.pool.Query(ctx, `SELECT event_id, event_type, context, source, payload, received_at, attempts, recorded
		FROM thin_hydrations WHERE NOT recorded AND ($2::text[] IS NULL OR event_id = ANY($2))
		ORDER BY received_at LIMIT $1`, n, ids)
	if err != nil {
		return nil, fmt.Errorf("read unrecorded thin events: %w", err)
	}
	return collectJobs(rows, "read unrecorded thin events")
}

// MarkRecorded notes that the records of ids are in the events table.
func (q *Queue) MarkRecorded(ctx context.Context, ids []string) error {
	if _, err := q.pool.Exec(ctx, `UPDATE thin_hydrations SET recorded = true WHERE event_id = ANY($1) AND NOT recorded`, ids); err != nil {
		return fmt.Errorf("mark thin events recorded: %w", err)
	}
	return nil
}

// Purge forgets hydrated ids older than DoneRetention.
func (q *Queue) Purge(ctx context.Context) error {
	if _, err := q.pool.Exec(ctx, `DELETE FROM thin_done WHERE done_at < now() - $1::interval`, DoneRetention.String()); err != nil {
		return fmt.Errorf("purge hydrated thin event ids: %w", err)
	}
	return nil
}

func collectJobs(rows pgx.Rows, what string) ([]Job, error) {
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Job, error) {
		var j Job
		err := r.Scan(&j.EventID, &j.Type, &j.Context, &j.Source, &j.Payload, &j.ReceivedAt, &j.Attempts, &j.Recorded)
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return jobs, nil
}

// Claim leases up to n due jobs for lease: another claimer skips them until
// the lease ends (a crashed hydrator's jobs come back then). Each claim
// counts one attempt.
func (q *Queue) Claim(ctx context.Context, n int, lease time.Duration) ([]Job, error) {
	rows, err := q.pool.Query(ctx, `UPDATE thin_hydrations SET leased_until = now() + $2::interval, attempts = attempts + 1
		WHERE event_id IN (
			SELECT event_id FROM thin_hydrations
			WHERE next_attempt_at <= now() AND (leased_until IS NULL OR leased_until < now())
			ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED)
		RETURNING event_id, event_type, context, source, payload, received_at, attempts, recorded`, n, lease.String())
	if err != nil {
		return nil, fmt.Errorf("claim thin events: %w", err)
	}
	return collectJobs(rows, "claim thin events")
}

// Extend renews the leases of jobs still being hydrated (a heartbeat), so a
// short lease brings a crashed hydrator's jobs back soon without taking a
// slow one from a live hydrator.
func (q *Queue) Extend(ctx context.Context, ids []string, lease time.Duration) error {
	_, err := q.pool.Exec(ctx, `UPDATE thin_hydrations SET leased_until = now() + $2::interval
		WHERE event_id = ANY($1) AND leased_until IS NOT NULL`, ids, lease.String())
	if err != nil {
		return fmt.Errorf("extend thin event leases: %w", err)
	}
	return nil
}

// Done removes a job whose thin record is processed and remembers its id
// (thin_done), in one statement.
func (q *Queue) Done(ctx context.Context, id string) error {
	if _, err := q.pool.Exec(ctx, `WITH d AS (DELETE FROM thin_hydrations WHERE event_id = $1 RETURNING event_id)
		INSERT INTO thin_done (event_id) VALUES ($1) ON CONFLICT (event_id) DO NOTHING`, id); err != nil {
		return fmt.Errorf("finish thin event %s: %w", id, err)
	}
	return nil
}

// Drop removes a job without remembering its id: a refused notification
// (it disagreed with Stripe's copy of its event). Stripe's own delivery of
// that event, or the thin sweep, then queues and hydrates it as usual.
func (q *Queue) Drop(ctx context.Context, id string) error {
	if _, err := q.pool.Exec(ctx, `DELETE FROM thin_hydrations WHERE event_id = $1`, id); err != nil {
		return fmt.Errorf("drop thin event %s: %w", id, err)
	}
	return nil
}

// Retry releases a job until next, with the error of its last try.
func (q *Queue) Retry(ctx context.Context, id, lastError string, next time.Time) error {
	_, err := q.pool.Exec(ctx, `UPDATE thin_hydrations SET leased_until = NULL, next_attempt_at = $2, last_error = $3
		WHERE event_id = $1`, id, next, truncate(lastError, 1000))
	if err != nil {
		return fmt.Errorf("reschedule thin event %s: %w", id, err)
	}
	return nil
}

// Backlog is how many thin notifications wait for hydration and since when
// the oldest does (zero when none).
type Backlog struct {
	Count  int
	Oldest time.Time
}

// Backlog reads the queue's size and oldest entry.
func (q *Queue) Backlog(ctx context.Context) (Backlog, error) {
	var b Backlog
	var oldest *time.Time
	err := q.pool.QueryRow(ctx, `SELECT count(*), min(received_at) FROM thin_hydrations`).Scan(&b.Count, &oldest)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return b, fmt.Errorf("thin backlog: %w", err)
	}
	if oldest != nil {
		b.Oldest = *oldest
	}
	return b, nil
}
