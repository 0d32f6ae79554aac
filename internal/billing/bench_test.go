package billing_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
)

// BenchmarkCollect charges BILLING_BENCH_SUBS (default 2000; the issue's
// figure is 10000) subscriptions due on one date against a fake Stripe that
// answers 429 above 100 requests per second, with the service's token
// bucket at BILLING_BENCH_RATE (default 100/s). It reports the achieved
// Stripe request rate against the limit, the 429s, and the DynamoDB
// requests per collection. Not run by make test (make bench runs it).
func BenchmarkCollect(b *testing.B) {
	const limit = 100.0
	n := envInt("BILLING_BENCH_SUBS", 2000)
	rate := float64(envInt("BILLING_BENCH_RATE", 100))
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		counter := &billingtest.CountingTransport{}
		cfg := billing.DefaultConfig() // 8 shards × 2 workers
		cfg.LockedRetryWait = 0
		day := dates.MustParse("2024-03-15")
		e := billingtest.NewEnv(b, billingtest.Options{Config: cfg, StripeLimit: limit, ChargerRate: rate,
			Lease: 60 * time.Second, Heartbeat: time.Second,
			Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), DynamoHTTP: &http.Client{Transport: counter}, Start: day.AddDays(-1).Time().Add(10 * time.Hour)})
		seed(b, e, n, day)
		opsBefore, before := counter.Ops()
		e.Clock.SetDate(day)
		b.StartTimer()
		start := time.Now()
		rep, err := e.Service.Collect(context.Background(), day)
		elapsed := time.Since(start)
		b.StopTimer()
		require.NoError(b, err)
		require.Equal(b, n, rep.Succeeded, "%+v", rep)
		ops, after := counter.Ops()
		for k, v := range opsBefore {
			ops[k] -= v
		}
		stats := e.Charger.Stats()
		achieved := float64(e.Stripe.RequestCount()-e.Stripe.RateLimited()) / elapsed.Seconds()
		b.ReportMetric(achieved, "stripe-req/s")
		b.ReportMetric(achieved/limit, "rate/limit")
		b.ReportMetric(float64(e.Stripe.RateLimited()), "429s")
		b.ReportMetric(float64(after-before)/float64(n), "ddb-req/collection")
		b.ReportMetric(elapsed.Seconds(), "s/run")
		b.Logf("%d collections in %s: %.1f Stripe req/s (limit %.0f, bucket %.0f), %d answered 429 (charger saw %d), DynamoDB %d requests %v (seeding took %d)",
			n, elapsed.Round(time.Millisecond), achieved, limit, rate, e.Stripe.RateLimited(), stats.RateLimited, after-before, ops, before)
	}
}

// seed creates n subscriptions due on day, two per account, in parallel.
func seed(b *testing.B, e *billingtest.Env, n int, day dates.Date) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				in := billingtest.Input(fmt.Sprintf("sku-%d", i%2), day.Day())
				if _, err := e.Service.CreateSubscription(context.Background(), fmt.Sprintf("acc-%05d", i/2), in); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}
