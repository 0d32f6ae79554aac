package events

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/loadtest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// BenchmarkFreshWrite compares ways of writing the write-behind's fresh
// records: "batch" is BatchWriteItem×25, unconditional (cheapest, but it
// cannot refuse to overwrite an unmarked failure); "tx25" and "tx100"
// are PutProcessed's IfAbsent writes, conditional TransactWriteItems of
// 25 and 100 (putIfAbsent); "put" is a conditional PutItem per record
// (WithItemPuts), 25 in flight per writer. Four writers, as the
// write-behind; one iteration is a round of each mode, the order
// rotating, so all see the same machine. DYNAMODB_PID names DynamoDB
// Local's process (scripts/bench-peer.sh finds it by its port).
//
//	DYNAMODB_PID=$(ss -Hltnp 'sport = :8766' | grep -o 'pid=[0-9]*' | cut -d= -f2) \
//	  go test ./internal/events -run '^$' -bench FreshWrite -benchtime 4x
func BenchmarkFreshWrite(b *testing.B) {
	roots := map[string]int{"dynamodb": dynamoPID(b), "go": os.Getpid()}
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("WRITE_RECORDS")); err == nil && v > 0 {
		n = v
	}
	client := testenv.Dynamo(b)
	table := testenv.TableName("events")
	testenv.CreateTables(b, client, dynamo.EventsTable(table))
	s := NewStore(client, table, 720*time.Hour, nil)
	ctx := context.Background()
	fresh := func(s *Store, perTx int) func([]Record) error {
		return func(recs []Record) error {
			refused, err := s.putIfAbsent(ctx, recs, perTx)
			if err == nil && len(refused) > 0 {
				b.Fatalf("%d fresh records refused", len(refused))
			}
			return err
		}
	}
	type mode struct {
		name  string
		chunk int
		write func([]Record) error
	}
	modes := []mode{
		{"batch", 25, func(recs []Record) error { return s.PutProcessed(ctx, recs) }},
		{"tx25", 25, fresh(s, 25)},
		{"tx100", 100, fresh(s, 100)},
		{"put", 100, fresh(s.WithItemPuts(), 100)},
	}
	type total struct {
		wall     time.Duration
		ddb, cpu time.Duration
		n        int
	}
	totals := map[string]*total{}
	round := func(m mode) {
		now := time.Now()
		recs := make([]Record, n)
		for i := range recs {
			recs[i] = benchRecord(b, now)
		}
		before, err := loadtest.ReadBox(roots)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		writeInChunks(b, recs, m.chunk, m.write)
		wall := time.Since(start)
		after, err := loadtest.ReadBox(roots)
		if err != nil {
			b.Fatal(err)
		}
		d := before.Sub(after)
		t := totals[m.name]
		if t == nil {
			t = &total{}
			totals[m.name] = t
		}
		t.wall += wall
		t.ddb += d.Procs["dynamodb"]
		t.cpu += d.Procs["go"]
		t.n += n
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range modes {
			round(modes[(i+j)%len(modes)])
		}
	}
	b.StopTimer()
	base := totals["batch"]
	per := func(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(n) }
	for _, m := range modes {
		t := totals[m.name]
		b.ReportMetric(float64(t.n)/t.wall.Seconds(), m.name+"_rec/s")
		b.ReportMetric(per(t.ddb, t.n), m.name+"_dynamodb_µs/rec")
		b.ReportMetric(per(t.cpu, t.n), m.name+"_go_µs/rec")
		if m.name != "batch" {
			b.ReportMetric(per(t.ddb, t.n)/per(base.ddb, base.n), m.name+"_dynamodb_ratio")
		}
	}
}
