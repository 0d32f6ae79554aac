package events

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/loadtest"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// benchRecord is a processed customer.updated record, the bench-peer stream.
func benchRecord(tb testing.TB, now time.Time) Record {
	payload := loadtest.CustomerUpdated(now)
	ev, err := stripeevent.Parse(payload)
	if err != nil {
		tb.Fatal(err)
	}
	r := NewRecord(ev, payload, "acct_platform_bench", 720*time.Hour, stripeevent.SourceWebhook, now)
	r.Status, r.ProcessedAt = StatusProcessed, now.UTC()
	return r
}

// dynamoPID is DYNAMODB_PID, the DynamoDB Local process whose CPU the
// benchmarks read (scripts/bench-peer.sh finds it by its port).
func dynamoPID(b *testing.B) int {
	pid, err := strconv.Atoi(os.Getenv("DYNAMODB_PID"))
	if err != nil || pid <= 0 {
		b.Fatalf("DYNAMODB_PID must name DynamoDB Local's process (got %q)", os.Getenv("DYNAMODB_PID"))
	}
	return pid
}

// writeInChunks hands items, chunk at a time, to four writers, as the
// write-behind's writers; a failed write fails the benchmark.
func writeInChunks[T any](b *testing.B, items []T, chunk int, write func([]T) error) {
	work := make(chan []T)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				if err := write(c); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	for i := 0; i < len(items); i += chunk {
		work <- items[i:min(i+chunk, len(items))]
	}
	close(work)
	wg.Wait()
}

func gzipLevel(tb testing.TB, level int, payload []byte) []byte {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, level)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := zw.Write(payload); err != nil {
		tb.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// BenchmarkCompressLevel is this process's CPU to gzip one bench-peer
// payload at each level, and the stored item's size (BENCHMARKS.md).
//
//	go test ./internal/events -run '^$' -bench CompressLevel
func BenchmarkCompressLevel(b *testing.B) {
	r := benchRecord(b, time.Now())
	for _, level := range []int{gzip.HuffmanOnly, gzip.BestSpeed, 3, gzip.DefaultCompression, gzip.BestCompression} {
		b.Run(fmt.Sprintf("level-%d", level), func(b *testing.B) {
			// One writer reset per payload, as Compress's pool does.
			zw, err := gzip.NewWriterLevel(nil, level)
			if err != nil {
				b.Fatal(err)
			}
			var buf bytes.Buffer
			for i := 0; i < b.N; i++ {
				buf.Reset()
				zw.Reset(&buf)
				if _, err := zw.Write(r.Payload); err != nil {
					b.Fatal(err)
				}
				if err := zw.Close(); err != nil {
					b.Fatal(err)
				}
			}
			out := buf.Bytes()
			av, err := attributes(r)
			if err != nil {
				b.Fatal(err)
			}
			av["payload"] = &types.AttributeValueMemberB{Value: out}
			b.ReportMetric(float64(len(r.Payload)), "raw_B")
			b.ReportMetric(float64(len(out)), "payload_B")
			b.ReportMetric(float64(itemSize(av)), "item_B")
		})
	}
}

// BenchmarkItemBytes is DynamoDB Local's CPU per record for the same
// records stored with their payload gzipped at level 1 (what is stored)
// and 9 (the smallest), without a payload (a diagnostic floor: the
// per-item work whatever the bytes), and into a table without the three
// indexes (a diagnostic: what the index writes cost), written as the write-behind writes
// fresh records (conditional TransactWriteItems of 100, four writers). One
// iteration is a round of each, the order rotating.
//
//	DYNAMODB_PID=<pid> go test ./internal/events -run '^$' -bench ItemBytes -benchtime 4x
func BenchmarkItemBytes(b *testing.B) {
	roots := map[string]int{"dynamodb": dynamoPID(b)}
	n := 2000
	client := testenv.Dynamo(b)
	table := testenv.TableName("events")
	testenv.CreateTables(b, client, dynamo.EventsTable(table))
	// A diagnostic table without the three indexes (the contract keeps
	// them): what the index writes cost DynamoDB Local.
	bare := dynamo.EventsTable(testenv.TableName("events-bare"))
	bare.Indexes = nil
	testenv.CreateTables(b, client, bare)
	s := NewStore(client, table, 720*time.Hour, nil)
	ctx := context.Background()
	expr, err := s.freshCondition()
	if err != nil {
		b.Fatal(err)
	}
	modes := []string{"gzip-1", "gzip-9", "no-payload", "no-index"}
	cpu := map[string]time.Duration{}
	size := map[string]int{}
	count := map[string]int{}
	round := func(mode string) {
		now := time.Now()
		items := make([]types.TransactWriteItem, n)
		for i := range items {
			r := benchRecord(b, now)
			av, err := attributes(r)
			if err != nil {
				b.Fatal(err)
			}
			switch mode {
			case "gzip-9":
				av["payload"] = &types.AttributeValueMemberB{Value: gzipLevel(b, gzip.BestCompression, r.Payload)}
			case "no-payload":
				delete(av, "payload")
			}
			size[mode] += itemSize(av)
			name := table
			if mode == "no-index" {
				name = bare.Name
			}
			items[i] = types.TransactWriteItem{Put: &types.Put{TableName: aws.String(name), Item: av,
				ConditionExpression: expr.Condition(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values()}}
		}
		before, err := loadtest.ReadBox(roots)
		if err != nil {
			b.Fatal(err)
		}
		writeInChunks(b, items, 100, func(chunk []types.TransactWriteItem) error {
			_, err := s.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: chunk})
			return err
		})
		after, err := loadtest.ReadBox(roots)
		if err != nil {
			b.Fatal(err)
		}
		cpu[mode] += before.Sub(after).Procs["dynamodb"]
		count[mode] += n
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range modes {
			round(modes[(i+j)%len(modes)])
		}
	}
	b.StopTimer()
	per := func(m string) float64 { return float64(cpu[m].Microseconds()) / float64(count[m]) }
	for _, m := range modes {
		b.ReportMetric(per(m), m+"_dynamodb_µs/rec")
		b.ReportMetric(float64(size[m])/float64(count[m]), m+"_item_B")
		if m != "gzip-1" {
			b.ReportMetric(per(m)/per("gzip-1"), m+"_dynamodb_ratio")
		}
	}
}
