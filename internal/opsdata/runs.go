package opsdata

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billingqueue"
	"github.com/stripe-payments/stripe-payments/internal/failcause"
)

// Runs records billing job runs for the overview and counts them in
// stripe_payments_billing_runs_total{job,result} (result ok, incomplete: a
// rerun is needed, or failed).
type Runs struct {
	pool  *pgxpool.Pool
	count *prometheus.CounterVec
}

// NewRuns returns the run log on pool, its counter registered on reg (nil:
// not registered).
func NewRuns(pool *pgxpool.Pool, reg prometheus.Registerer) *Runs {
	r := &Runs{pool: pool, count: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stripe_payments_billing_runs_total",
		Help: "Billing job runs (remind, collect) by result: ok, incomplete (a rerun for the same date is needed) or failed.",
	}, []string{"job", "result"})}
	for _, job := range []string{"remind", "collect"} {
		for _, result := range []string{"ok", "incomplete", "failed"} {
			r.count.WithLabelValues(job, result) // present at 0, so increase() sees the first one
		}
	}
	if reg != nil {
		reg.MustRegister(r.count)
	}
	return r
}

// Record writes one run; rep may be nil when the run failed before a report.
func (r *Runs) Record(ctx context.Context, job string, date time.Time, started time.Time, rep *billing.Report, runErr error) error {
	result := "ok"
	switch {
	case runErr != nil || rep == nil:
		result = "failed"
	case !rep.OK():
		result = "incomplete"
	}
	r.count.WithLabelValues(job, result).Inc()
	return r.insert(ctx, "", job, date, started, rep, runErr)
}

// RecordClockRun writes one job of a test clock's day, marked with the
// clock. It is not counted in stripe_payments_billing_runs_total: a test
// clock's failed day is a test's business, never a page.
func (r *Runs) RecordClockRun(ctx context.Context, clock, job string, date time.Time, started time.Time, rep *billing.Report, runErr error) error {
	return r.insert(ctx, clock, job, date, started, rep, runErr)
}

func (r *Runs) insert(ctx context.Context, clock, job string, date time.Time, started time.Time, rep *billing.Report, runErr error) error {
	raw := []byte("{}")
	if rep != nil {
		var err error
		if raw, err = json.Marshal(rep); err != nil {
			return fmt.Errorf("record billing run: %w", err)
		}
	}
	var msg *string
	if runErr != nil {
		s := runErr.Error()
		msg = &s
	}
	var testClock *string
	if clock != "" {
		testClock = &clock
	}
	var queueRun *string
	if rep != nil && rep.Queue != nil && rep.Queue.Run != "" {
		queueRun = &rep.Queue.Run
	}
	_, err := r.pool.Exec(ctx, `INSERT INTO ops_billing_runs (job, date, started_at, finished_at, report, error, test_clock, queue_run)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, job, date, started.UTC(), time.Now().UTC(), raw, msg, testClock, queueRun)
	if err != nil {
		return fmt.Errorf("record billing run: %w", err)
	}
	return nil
}

// Run is one recorded billing job run.
type Run struct {
	Job        string
	Date       time.Time
	StartedAt  time.Time
	FinishedAt time.Time
	Report     RunReport
	Error      string
	// TestClock is the clock whose day this run was ("": a real run).
	TestClock string
	// QueueRun is the billing queue run it enqueued ("": collected in
	// process); Queue its progress, when the reader attached it.
	QueueRun string
	Queue    *billingqueue.Progress
}

// RunReport is what a run's billing.Report said (decoded from its JSON).
type RunReport struct {
	Entries, Reminded, Succeeded, Processing, Declined, Stale, Resumed, Skipped int
	PausedSkipped                                                               int `json:"paused_skipped"`
	Locked, Unknown, Resolved, Unresolved, Errors                               int
	// Causes: why the run was not OK ("Stripe unreachable: …").
	Causes []string
}

// Unresolved counts what the run left for an operator or a rerun. Every
// unknown outcome of a run is also an unresolved period of it (reports of
// older versions had only the unknown count).
func (r Run) Unresolved() int {
	return max(r.Report.Unknown, r.Report.Unresolved) + r.Report.Errors + r.Report.Locked
}

// Failed reports a run that ended in an error.
func (r Run) Failed() bool { return r.Error != "" }

// Last reads the n most recent runs.
func (r *Runs) Last(ctx context.Context, n int) ([]Run, error) {
	rows, err := r.pool.Query(ctx, `SELECT job, date, started_at, finished_at, report, coalesce(error, ''), coalesce(test_clock, ''),
			coalesce(queue_run::text, '')
		FROM ops_billing_runs ORDER BY started_at DESC LIMIT $1`, n)
	if err != nil {
		return nil, fmt.Errorf("read billing runs: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Run, error) {
		var x Run
		var raw []byte
		if err := row.Scan(&x.Job, &x.Date, &x.StartedAt, &x.FinishedAt, &raw, &x.Error, &x.TestClock, &x.QueueRun); err != nil {
			return x, err
		}
		if err := json.Unmarshal(raw, &x.Report); err != nil {
			return x, err
		}
		return x, nil
	})
}

// FailedGroups are the failed runs, per job and error (Message), that no
// later successful run of the same job settled: one of the same date or a
// later one (an older date's run never read theirs).
func (r *Runs) FailedGroups(ctx context.Context, samples int) ([]failcause.Group, error) {
	rows, err := r.pool.Query(ctx, `SELECT r.job, '', r.error, count(*), min(r.started_at), max(r.started_at),
			(array_agg(r.id::text ORDER BY r.started_at DESC, r.id))[1:$1]
		FROM ops_billing_runs r
		WHERE coalesce(r.error, '') <> ''
		  AND NOT EXISTS (SELECT 1 FROM ops_billing_runs ok
		                  WHERE ok.job = r.job AND coalesce(ok.error, '') = '' AND ok.started_at > r.started_at AND ok.date >= r.date)
		GROUP BY r.job, r.error`, samples)
	if err != nil {
		return nil, fmt.Errorf("read failed runs: %w", err)
	}
	return collectGroups(rows, "failed runs")
}

// LeftGroups are, per job, the runs that ended without an error yet left
// some of the report's fields (counters) non-zero, and that no later run
// of the job settled (see runReportQuery). named is the report's list
// naming what was left, whose newest entries are the samples ("": the
// runs' ids are). fields and named are the caller's constants, never
// input: they are written into the statement.
func (r *Runs) LeftGroups(ctx context.Context, fields []string, named string, samples int) ([]failcause.Group, error) {
	rows, err := r.pool.Query(ctx, runReportQuery(fields, named, strconv.Itoa(samples)))
	if err != nil {
		return nil, fmt.Errorf("read runs that left work: %w", err)
	}
	return collectGroups(rows, "runs that left work")
}

// runReportQuery groups, per job, the runs that left some of fields and
// that no later run of the job ended without an error, leaving none, for
// the same date or a later one: count is what the newest
// of them left (the greatest of fields); the samples are what the newest
// run's report list named names, else those runs' ids (the console's runs
// page shows their reports). Field and list names are the code's constants,
// never input.
func runReportQuery(fields []string, named, samples string) string {
	left := func(alias string) string {
		parts := make([]string, len(fields))
		for i, f := range fields {
			parts[i] = "coalesce((" + alias + ".report->>'" + f + "')::int, 0)"
		}
		if len(parts) == 1 {
			return parts[0]
		}
		return "greatest(" + strings.Join(parts, ", ") + ")"
	}
	namedSQL := "NULL::text[]"
	if named != "" {
		// The newest run's names, when it has any.
		namedSQL = `(SELECT nullif(array_agg(e), '{}') FROM ops_billing_runs x,
				LATERAL (SELECT jsonb_array_elements_text(CASE WHEN jsonb_typeof(x.report->'` + named + `') = 'array'
					THEN x.report->'` + named + `' ELSE '[]' END) AS e LIMIT ` + samples + `) n
			WHERE x.id = g.newest)`
	}
	// The runs that left some and no later clean run of their job covered:
	// a clean run settles a run only if its date is on or after that run's
	// (collect --date D never reads a later date's charges in flight).
	// covered: the latest date of the job's clean runs started after this one.
	return `WITH x AS (SELECT x.id, x.job, x.date, x.started_at, coalesce(x.error, '') = '' AND ` + left("x") + ` = 0 AS clean,
		           ` + left("x") + ` AS left_open
		           FROM ops_billing_runs x),
		r AS (SELECT x.*, max(x.date) FILTER (WHERE x.clean) OVER (PARTITION BY x.job ORDER BY x.started_at DESC, x.id DESC
		                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS covered
		      FROM x),
		g AS (SELECT r.job, (array_agg(r.left_open ORDER BY r.started_at DESC, r.id DESC))[1] AS left_open,
		             min(r.started_at) AS first, max(r.started_at) AS last,
		             (array_agg(r.id ORDER BY r.started_at DESC, r.id DESC))[1] AS newest,
		             (array_agg(r.id::text ORDER BY r.started_at DESC, r.id DESC))[1:` + samples + `] AS runs
		      FROM r
		      WHERE r.left_open > 0 AND (r.covered IS NULL OR r.covered < r.date)
		      GROUP BY r.job)
		SELECT g.job, '', '', g.left_open::bigint, g.first, g.last, coalesce(` + namedSQL + `, g.runs) FROM g`
}
