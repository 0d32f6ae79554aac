package recordq_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/loadtest"
	"github.com/stripe-payments/stripe-payments/internal/recordq"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// BenchmarkWriteBehindDrain drains the write-behind (load the pending rows,
// read the table when needed, write, delete) of customer.updated records,
// as the bench-peer stream: "read-all" is the queue before fresh rows (every
// record read first, then BatchWriteItem×25; what Enqueue rows still get),
// "fresh-25" and "fresh-100" rows inserted by their claim (EnqueueClaimed),
// none marked, written IfAbsent (one conditional TransactWriteItems per
// batch) by queues taking 25 and 100 records at a time (Config.Batch).
// One iteration is a round of each, the order rotating, so all see the same
// machine. DYNAMODB_PID and POSTGRES_PID name the processes whose CPU is
// counted per record.
//
//	go test ./internal/recordq -run '^$' -bench WriteBehindDrain -benchtime 6x
func BenchmarkWriteBehindDrain(b *testing.B) {
	roots := map[string]int{}
	for name, env := range map[string]string{"dynamodb": "DYNAMODB_PID", "postgres": "POSTGRES_PID"} {
		pid, err := strconv.Atoi(os.Getenv(env))
		if err != nil || pid <= 0 {
			b.Fatalf("%s must name the %s process (got %q)", env, name, os.Getenv(env))
		}
		roots[name] = pid
	}
	roots["go"] = os.Getpid()
	rounds := 2000
	if n, err := strconv.Atoi(os.Getenv("DRAIN_RECORDS")); err == nil && n > 0 {
		rounds = n
	}
	e := newEnv(b)
	queues := map[string]*recordq.Queue{}
	for name, batch := range map[string]int{"read-all": 25, "fresh-25": 25, "fresh-100": 100} {
		q := recordq.New(e.pool, e.table, recordq.Config{MaxBacklog: 1 << 20, MaxBacklogBytes: 1 << 40, Batch: batch})
		queues[name] = q
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = q.Run(ctx) }()
		b.Cleanup(func() { cancel(); <-done })
	}
	modes := []string{"read-all", "fresh-25", "fresh-100"}

	type total struct {
		wall time.Duration
		cpu  map[string]time.Duration
		n    int
	}
	totals := map[string]*total{}
	for _, m := range modes {
		totals[m] = &total{cpu: map[string]time.Duration{}}
	}
	round := func(mode string) {
		q := queues[mode]
		recs := make([]events.Record, rounds)
		now := time.Now()
		for i := range recs {
			payload := loadtest.CustomerUpdated(now)
			ev, err := stripeevent.Parse(payload)
			if err != nil {
				b.Fatal(err)
			}
			r := events.NewRecord(ev, payload, "acct_platform_bench", 720*time.Hour, stripeevent.SourceWebhook, now)
			r.Status, r.ProcessedAt = events.StatusProcessed, now.UTC()
			recs[i] = r
		}
		for start := 0; start < len(recs); start += 25 {
			chunk := recs[start:min(start+25, len(recs))]
			err := pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
				if mode == "read-all" {
					return q.Enqueue(context.Background(), tx, chunk)
				}
				return q.EnqueueClaimed(context.Background(), tx, chunk)
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		before, err := loadtest.ReadBox(roots)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		q.Hand(recs)
		fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer fcancel()
		if err := q.Flush(fctx); err != nil {
			b.Fatal(err)
		}
		wall := time.Since(start)
		after, err := loadtest.ReadBox(roots)
		if err != nil {
			b.Fatal(err)
		}
		d := before.Sub(after)
		tt := totals[mode]
		tt.wall += wall
		tt.n += len(recs)
		for k, v := range d.Procs {
			tt.cpu[k] += v
		}
		tt.cpu["machine"] += d.Busy
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range modes {
			round(modes[(i+j)%len(modes)])
		}
	}
	b.StopTimer()
	per := func(t *total, k string) float64 { return float64(t.cpu[k].Microseconds()) / float64(t.n) }
	rate := func(t *total) float64 { return float64(t.n) / t.wall.Seconds() }
	a := totals["read-all"]
	for _, mode := range modes {
		tt := totals[mode]
		b.ReportMetric(rate(tt), mode+"_rec/s")
		for _, k := range []string{"dynamodb", "postgres", "go", "machine"} {
			b.ReportMetric(per(tt, k), mode+"_"+k+"_µs/rec")
		}
		if mode != "read-all" {
			b.ReportMetric(rate(tt)/rate(a), mode+"_drain_ratio")
			b.ReportMetric(per(tt, "dynamodb")/per(a, "dynamodb"), mode+"_dynamodb_cpu_ratio")
			b.ReportMetric(per(tt, "machine")/per(a, "machine"), mode+"_machine_cpu_ratio")
		}
	}
}
