package opsdata

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stripe-payments/stripe-payments/internal/billing"
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
	_, err := r.pool.Exec(ctx, `INSERT INTO ops_billing_runs (job, date, started_at, finished_at, report, error, test_clock)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, job, date, started.UTC(), time.Now().UTC(), raw, msg, testClock)
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
	rows, err := r.pool.Query(ctx, `SELECT job, date, started_at, finished_at, report, coalesce(error, ''), coalesce(test_clock, '')
		FROM ops_billing_runs ORDER BY started_at DESC LIMIT $1`, n)
	if err != nil {
		return nil, fmt.Errorf("read billing runs: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Run, error) {
		var x Run
		var raw []byte
		if err := row.Scan(&x.Job, &x.Date, &x.StartedAt, &x.FinishedAt, &raw, &x.Error, &x.TestClock); err != nil {
			return x, err
		}
		if err := json.Unmarshal(raw, &x.Report); err != nil {
			return x, err
		}
		return x, nil
	})
}
