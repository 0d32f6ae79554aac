package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
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
	_, err := r.pool.Exec(ctx, `INSERT INTO ops_billing_runs (job, date, started_at, finished_at, report, error)
		VALUES ($1, $2, $3, $4, $5, $6)`, job, date, started.UTC(), time.Now().UTC(), raw, msg)
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
	rows, err := r.pool.Query(ctx, `SELECT job, date, started_at, finished_at, report, coalesce(error, '')
		FROM ops_billing_runs ORDER BY started_at DESC LIMIT $1`, n)
	if err != nil {
		return nil, fmt.Errorf("read billing runs: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Run, error) {
		var x Run
		var raw []byte
		if err := row.Scan(&x.Job, &x.Date, &x.StartedAt, &x.FinishedAt, &raw, &x.Error); err != nil {
			return x, err
		}
		if err := json.Unmarshal(raw, &x.Report); err != nil {
			return x, err
		}
		return x, nil
	})
}

// Checkpoint is the poller's progress on one account.
type Checkpoint struct {
	Account    string
	Checkpoint time.Time
	UpdatedAt  time.Time
	// Age is now minus the checkpoint; Gap the webhooks the poller found
	// missing since this instance started (-1: unknown).
	Age time.Duration
	Gap float64
}

// Checkpoints reads the poller's checkpoints and joins this instance's
// webhook-gap counters (the registry holds them; the table does not).
func Checkpoints(ctx context.Context, pool *pgxpool.Pool, gatherer prometheus.Gatherer, now time.Time) ([]Checkpoint, error) {
	rows, err := pool.Query(ctx, `SELECT stripe_account, checkpoint, updated_at FROM poller_checkpoints ORDER BY checkpoint ASC LIMIT 200`)
	if err != nil {
		return nil, fmt.Errorf("read checkpoints: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Checkpoint, error) {
		var c Checkpoint
		err := row.Scan(&c.Account, &c.Checkpoint, &c.UpdatedAt)
		c.Age, c.Gap = now.Sub(c.Checkpoint), -1
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("read checkpoints: %w", err)
	}
	gaps := gathered(gatherer, "stripe_payments_poller_webhook_gap_total", "stripe_account")
	for i := range list {
		if n, ok := gaps[list[i].Account]; ok {
			list[i].Gap = n
		} else if gatherer != nil && len(gaps) > 0 {
			list[i].Gap = 0
		}
	}
	return list, nil
}

// gathered reads a counter or gauge family from the registry by one label.
func gathered(g prometheus.Gatherer, name, label string) map[string]float64 {
	out := map[string]float64{}
	if g == nil {
		return out
	}
	families, err := g.Gather()
	if err != nil {
		return out
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					key = l.GetValue()
				}
			}
			switch {
			case m.Counter != nil:
				out[key] += m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] += m.Gauge.GetValue()
			}
		}
	}
	return out
}

// OutboxReader is what the console reads of the outbox (outbox.Store).
type OutboxReader interface {
	Stats(ctx context.Context) ([]outbox.TopicStats, error)
	ListDead(ctx context.Context, topic string, after outbox.DeadCursor, limit int) ([]outbox.DeadLetter, *outbox.DeadCursor, error)
	ListPending(ctx context.Context, topic string, after outbox.PendingCursor, limit int) ([]outbox.Undelivered, *outbox.PendingCursor, error)
	// Redrive makes a dead letter due again (apperr.ErrNotFound, or
	// apperr.ErrConflict for one that is not dead, when there is nothing to do).
	Redrive(ctx context.Context, id uuid.UUID) error
}
