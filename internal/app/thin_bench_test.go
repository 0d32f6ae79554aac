package app_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// BenchmarkThinVsSnapshotIntake measures notifications accepted per second
// (answered 200) by the real server, thin against snapshot, at concurrency
// 1 and 32, in the same run (BENCHMARKS.md). A snapshot event is
// answered once recorded and processed; a thin one once recorded and
// queued, its hydration (two Stripe calls to the fake, then the same
// processing) running behind the answer on the same machine.
//
//	go test -run '^$' -bench ThinVsSnapshot -benchtime 2000x ./internal/app/
func BenchmarkThinVsSnapshotIntake(b *testing.B) {
	fake := stripetest.New(b, stripetest.Options{})
	if os.Getenv("BENCH_NO_HYDRATION") != "" {
		fake.DelayV2(time.Hour)
	}
	a := startApp(b, nil, map[string]string{"STRIPE_API_BASE": fake.URL})
	url := a.Server.URL() + "/webhooks/stripe"
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for _, c := range []int{1, 32} {
		for _, kind := range []string{"snapshot", "thin"} {
			b.Run(fmt.Sprintf("%s/c=%d", kind, c), func(b *testing.B) {
				payloads := make(chan []byte, b.N)
				for range b.N {
					snap := stripetest.Event{Fixture: "payment_intent.succeeded", Account: stripetest.Ptr(merchant)}
					snapID := stripetest.NewID()
					snap.ID = snapID
					raw := snap.Build(b)
					if kind == "snapshot" {
						payloads <- raw
						continue
					}
					fake.Add(merchant, raw)
					thin := stripetest.Thin{Fixture: "v1.payment_intent.succeeded", Context: stripetest.Ptr(merchant)}.Build(b)
					fake.AddV2(thin, snapID)
					payloads <- thin
				}
				close(payloads)
				b.SetParallelism(max(1, c/runtime.GOMAXPROCS(0)))
				start := time.Now()
				b.ResetTimer()
				send := func(p []byte) {
					req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(p))
					req.Header.Set("Stripe-Signature", stripetest.Sign(p, secret, time.Now()))
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Errorf("status %d", resp.StatusCode)
					}
				}
				if c == 1 {
					for p := range payloads {
						send(p)
					}
				} else {
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							send(<-payloads)
						}
					})
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "accepted/s")
			})
		}
	}
}

// BenchmarkThinHydrationAgainstBudget measures hydration throughput
// against the Stripe API budget (docs/design.md §9): N thin notifications
// (BENCH_HYDRATIONS, default 600; v1 types, two Stripe calls each) are
// queued at once on a running server whose STRIPE_RATE_LIMIT is 100/s
// (BENCH_STRIPE_LIMIT), in front of a fake Stripe that itself refuses (429)
// what exceeds it;
// reported: hydrations/s, Stripe requests/s and their ratio to the limit,
// and the 429s the fake answered.
//
//	go test -run '^$' -bench ThinHydrationAgainstBudget -benchtime 1x ./internal/app/
func BenchmarkThinHydrationAgainstBudget(b *testing.B) {
	n := 600
	if v := os.Getenv("BENCH_HYDRATIONS"); v != "" {
		if _, err := fmt.Sscan(v, &n); err != nil || n < 1 {
			b.Fatalf("BENCH_HYDRATIONS=%q", v)
		}
	}
	limit := 100
	if v := os.Getenv("BENCH_STRIPE_LIMIT"); v != "" {
		if _, err := fmt.Sscan(v, &limit); err != nil || limit < 1 {
			b.Fatalf("BENCH_STRIPE_LIMIT=%q", v)
		}
	}
	for range b.N {
		b.StopTimer()
		fake := stripetest.New(b, stripetest.Options{RateLimit: float64(limit)})
		// Built, not started: the notifications are queued before any
		// hydrator runs.
		a := apptest.New(b, apptest.Options{Stripe: fake, Env: map[string]string{
			"STRIPE_WEBHOOK_SECRET": secret, "STRIPE_API_KEY": "sk_test_fake_e2e", "INTERNAL_API_TOKEN": token,
			"STRIPE_RATE_LIMIT": fmt.Sprint(limit),
		}})
		bodies := make([][]byte, n)
		for i := range bodies {
			snapID := stripetest.NewID()
			fake.Add(merchant, stripetest.Event{Fixture: "payment_intent.succeeded", ID: snapID, Account: stripetest.Ptr(merchant)}.Build(b))
			thin := stripetest.Thin{Fixture: "v1.payment_intent.succeeded", Context: stripetest.Ptr(merchant)}.Build(b)
			fake.AddV2(thin, snapID)
			bodies[i] = thin
		}
		for _, body := range bodies {
			if _, err := a.Ingest.Ingest(b.Context(), body, "webhook"); err != nil {
				b.Fatal(err)
			}
		}
		req0, limited0 := fake.RequestCount(), fake.RateLimited()
		b.StartTimer()
		start := time.Now()
		a.Listen(b)
		seen := map[string]int{} // hydration errors seen while it ran
		for {
			var left int
			if err := a.Pool.QueryRow(b.Context(), `SELECT count(*) FROM thin_hydrations`).Scan(&left); err != nil {
				b.Fatal(err)
			}
			rows, err := a.Pool.Query(b.Context(), `SELECT regexp_replace(last_error, 'evt_test[0-9a-f]+', 'evt_…', 'g') FROM thin_hydrations WHERE last_error IS NOT NULL`)
			if err != nil {
				b.Fatal(err)
			}
			for rows.Next() {
				var e string
				if err := rows.Scan(&e); err != nil {
					b.Fatal(err)
				}
				seen[e]++
			}
			rows.Close()
			if left == 0 {
				break
			}
			if time.Since(start) > 10*time.Minute {
				b.Fatalf("%d of %d still queued after 10 min", left, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
		elapsed := time.Since(start)
		b.StopTimer()
		reqs := float64(fake.RequestCount() - req0)
		rps := reqs / elapsed.Seconds()
		limit := float64(limit)
		b.ReportMetric(float64(n)/elapsed.Seconds(), "hydrations/s")
		b.ReportMetric(rps, "stripe-req/s")
		b.ReportMetric(rps/limit, "of-limit")
		b.ReportMetric(float64(fake.RateLimited()-limited0), "429s")
		b.Logf("%d hydrations in %s: %.1f/s, %.0f Stripe requests (%.1f/s, %.2f of the %.0f/s limit), %d answered 429",
			n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), reqs, rps, rps/limit, limit, fake.RateLimited()-limited0)
		for e, k := range seen {
			b.Logf("seen %d× (polls): %s", k, e)
		}
	}
}
