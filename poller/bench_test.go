package poller_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/handler"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/poller"
)

// benchEvents is the reconciliation size: POLLER_BENCH_EVENTS, default
// 10,000 (make bench); BENCHMARKS.md reports 100,000.
func benchEvents(b *testing.B) int {
	n := 10_000
	if v := os.Getenv("POLLER_BENCH_EVENTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 100 {
			b.Fatalf("POLLER_BENCH_EVENTS=%q: want an integer >= 100", v)
		}
	}
	return n
}

// countingClient counts DynamoDB requests by operation (X-Amz-Target),
// retries included.
type countingClient struct {
	next interface {
		Do(*http.Request) (*http.Response, error)
	}
	mu  sync.Mutex
	ops map[string]int
}

func (c *countingClient) Do(req *http.Request) (*http.Response, error) {
	op := req.Header.Get("X-Amz-Target")
	if i := strings.LastIndex(op, "."); i >= 0 {
		op = op[i+1:]
	}
	c.mu.Lock()
	c.ops[op]++
	c.mu.Unlock()
	return c.next.Do(req)
}

func (c *countingClient) reset() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.ops
	c.ops = map[string]int{}
	return out
}

func counting(client *dynamodb.Client) (*dynamodb.Client, *countingClient) {
	opts := client.Options()
	cc := &countingClient{next: opts.HTTPClient, ops: map[string]int{}}
	opts.HTTPClient = cc
	return dynamodb.New(opts), cc
}

func total(ops map[string]int) int {
	n := 0
	for _, v := range ops {
		n += v
	}
	return n
}

func formatOps(ops map[string]int) string {
	names := make([]string, 0, len(ops))
	for k := range ops {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s=%d", k, ops[k])
	}
	return strings.Join(parts, " ")
}

// seed lists n events of account on the fake API, spread over the last 47
// hours (so the window crosses slice and date boundaries), records all but
// every tenth as processed, and returns the ids left missing.
func seed(b *testing.B, e *env, store *events.Store, account string, n int) []string {
	b.Helper()
	return seedMissing(b, e, store, account, n, 10)
}

// seedMissing is seed leaving every `every`-th event missing.
func seedMissing(b *testing.B, e *env, store *events.Store, account string, n, every int) []string {
	b.Helper()
	now := e.clock()
	payloads := make([][]byte, n)
	ids := make([]string, n)
	for i := range n {
		created := now.Add(-time.Minute - time.Duration(i)*(47*time.Hour/time.Duration(n))) // no int64 overflow
		ids[i], payloads[i] = e.event("customer.created", account, created)
	}
	e.api.Add(account, payloads...)

	var missing []string
	work := make(chan int)
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 16 {
		wg.Go(func() {
			for i := range work {
				ev, err := stripeevent.Parse(payloads[i])
				if err != nil {
					failed.Store(err)
					continue
				}
				rec := events.NewRecord(ev, payloads[i], platform, 720*time.Hour, stripeevent.SourceWebhook, time.Now())
				rec.Status, rec.ProcessedAt = events.StatusProcessed, time.Now()
				if err := store.Put(context.Background(), rec); err != nil {
					failed.Store(err)
				}
			}
		})
	}
	for i := range n {
		if i%every == 0 {
			missing = append(missing, ids[i])
			continue
		}
		work <- i
	}
	close(work)
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatalf("seed: %v", err)
	}
	return missing
}

// BenchmarkReconcile reconciles one account's events, 10 % of them missing
// from the events table, in-process, and reports the DynamoDB requests and
// the wall time. The Stripe API is unthrottled (the rate limiter is off).
func BenchmarkReconcile(b *testing.B) {
	n := benchEvents(b)
	for range b.N {
		b.StopTimer()
		e := newEnv(b)
		client, cc := counting(e.app.Dynamo)
		store := events.NewStore(client, e.app.Config.EventsTable, 720*time.Hour, nil)
		start := time.Now()
		missing := seed(b, e, store, acctA, n)
		b.Logf("seeded %d events (%d missing) in %s", n, len(missing), time.Since(start).Round(time.Millisecond))
		cc.reset()

		quiet := slog.New(slog.NewJSONHandler(io.Discard, nil))
		h := handler.New(handler.Config{PlatformAccount: platform, EventTTL: 720 * time.Hour},
			store, ledger.New(e.app.Pool), quiet)
		newPoller := func(dryRun bool) *poller.Poller {
			p, err := poller.New(poller.Config{PlatformAccount: platform, Accounts: []string{acctA}, Lookback: 48 * time.Hour, DryRun: dryRun}, poller.Deps{
				API:         poller.NewEventsAPI(poller.APIConfig{Key: e.api.Key, BaseURL: e.api.URL, Rate: -1}, quiet),
				Store:       store,
				Checkpoints: ledger.NewCheckpoints(e.app.Pool),
				Accounts:    ledger.NewAccounts(e.app.Pool),
				Replayer:    poller.NewHandlerReplayer(h),
				Log:         quiet,
				Now:         e.clock,
			})
			if err != nil {
				b.Fatal(err)
			}
			return p
		}
		// A dry run first: listing + diff alone, without the replays.
		start = time.Now()
		if _, err := newPoller(true).Run(context.Background(), poller.Window{}); err != nil {
			b.Fatal(err)
		}
		b.Logf("dry run (list + diff only): %s, DynamoDB %s", time.Since(start).Round(time.Millisecond), formatOps(cc.reset()))
		p := newPoller(false)
		pagesBefore := e.api.Stats().Requests
		b.StartTimer()
		start = time.Now()
		rep, err := p.Run(context.Background(), poller.Window{})
		elapsed := time.Since(start)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		c := rep.Accounts[0].Counts
		if c.Listed != n || c.Replayed != len(missing) || c.AlreadyProcessed != n-len(missing) {
			b.Fatalf("counts %+v, want listed %d, replayed %d", c, n, len(missing))
		}
		ops := cc.reset()
		diff := ops["BatchGetItem"]
		b.ReportMetric(float64(diff)*1000/float64(n), "diff-ddb-req/1k-events")
		b.ReportMetric(float64(total(ops)), "ddb-requests")
		b.ReportMetric(elapsed.Seconds(), "wall-s")
		b.Logf("reconciled %d events (%d replayed) in %s: %d API pages, DynamoDB %s (total %d)",
			n, c.Replayed, elapsed.Round(time.Millisecond), e.api.Stats().Requests-pagesBefore, formatOps(ops), total(ops))
	}
}

// BenchmarkDiffStrategies compares the DynamoDB requests needed to learn the
// status of every event of a window: BatchGetItem by the ids the API listed
// (what the poller does), against the date/time index (Store.ByDate: a
// KEYS_ONLY query per page plus a BatchGetItem for the statuses the index
// does not hold), with small and large query pages.
func BenchmarkDiffStrategies(b *testing.B) {
	n := min(benchEvents(b), 10_000)
	for range b.N {
		b.StopTimer()
		e := newEnv(b)
		client, cc := counting(e.app.Dynamo)
		store := events.NewStore(client, e.app.Config.EventsTable, 720*time.Hour, nil)
		seed(b, e, store, acctA, n)
		var ids []string
		for _, c := range []struct{ from, until int64 }{{0, e.clock().Unix()}} {
			after := ""
			api := poller.NewEventsAPI(poller.APIConfig{Key: e.api.Key, BaseURL: e.api.URL, Rate: -1}, slog.New(slog.NewJSONHandler(io.Discard, nil)))
			for {
				page, err := api.ListPage(context.Background(), acctA, true, c.from, c.until, after, 100)
				if err != nil {
					b.Fatal(err)
				}
				for _, ev := range page.Events {
					ids = append(ids, ev.ID)
				}
				if !page.HasMore {
					break
				}
				after = page.Events[len(page.Events)-1].ID
			}
		}
		b.StartTimer()

		cc.reset()
		start := time.Now()
		found := 0
		for i := 0; i < len(ids); i += 100 {
			recs, err := store.BatchGet(context.Background(), ids[i:min(i+100, len(ids))])
			if err != nil {
				b.Fatal(err)
			}
			found += len(recs)
		}
		report(b, "batchget", n, found, cc.reset(), time.Since(start))

		for _, limit := range []int32{100, 1000} {
			start := time.Now()
			found := 0
			now := e.clock()
			for day := now.Add(-48 * time.Hour).UTC().Truncate(24 * time.Hour); !day.After(now); day = day.Add(24 * time.Hour) {
				cursor := ""
				for {
					page, err := store.ByDate(context.Background(), day.Format(events.DateLayout), events.Range{}, limit, cursor)
					if err != nil {
						b.Fatal(err)
					}
					found += len(page.Records)
					if cursor = page.NextCursor; cursor == "" {
						break
					}
				}
			}
			report(b, fmt.Sprintf("gsi-limit-%d", limit), n, found, cc.reset(), time.Since(start))
		}
	}
}

func report(b *testing.B, name string, n, found int, ops map[string]int, elapsed time.Duration) {
	b.Helper()
	b.ReportMetric(float64(total(ops))*1000/float64(n), name+"-req/1k-events")
	b.Logf("%-14s found %d of %d records (status known): %5.1f DynamoDB requests per 1,000 events (%s) in %s",
		name, found, n, float64(total(ops))*1000/float64(n), formatOps(ops), elapsed.Round(time.Millisecond))
}
