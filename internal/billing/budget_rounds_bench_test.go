package billing_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/stripecharge"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/lock"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/stripeclient"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// BenchmarkCollectBudgetRounds compares the Stripe budget's variants in one
// run, so that the machine's load (a 2-core box shared by many) is the same
// for what is compared: it runs BUDGET_BENCH_ROUNDS (default 2) rounds of
// the variants in BUDGET_BENCH_VARIANTS (default all, below), each round in
// a rotated order, each variant on a fresh stack of BILLING_BENCH_SUBS
// (default 1000) subscriptions due on one day, against a fake Stripe that
// answers 429 above BUDGET_BENCH_LIMIT (default 100) requests per second
// (no limit for "none"; its burst is BUDGET_BENCH_BURST, default a tenth
// of a second's worth: 10 at 100/s, but 1 at 10/s, which refuses any two
// requests less than 100 ms apart, so a lower limit needs it set).
// Variants:
//
//   - none: one replica, no limiter at all and no limit at the fake: what
//     this machine's billing core collects per second (its ceiling).
//   - bucket: one replica, the per-process token bucket of before the
//     shared budget.
//   - shared: one replica on the shared budget.
//   - shared3: three replicas on the shared budget.
//   - shared3+burst: three replicas while a thin-hydration burst (16
//     workers, hydration class) and a poller backfill (8 workers,
//     background class) ask for Stripe the whole time, each on its own
//     replica's budget.
//
// Everything is counted at the fake Stripe. It logs a line per variant and
// round, and the mean of each variant's collections/s over the limit. Not
// run by make test; the command is in BENCHMARKS.md.
func BenchmarkCollectBudgetRounds(b *testing.B) {
	n := envInt("BILLING_BENCH_SUBS", 1000)
	limit := float64(envInt("BUDGET_BENCH_LIMIT", 100))
	rounds := envInt("BUDGET_BENCH_ROUNDS", 2)
	variants := []string{"none", "bucket", "shared", "shared3", "shared3+burst"}
	if v := os.Getenv("BUDGET_BENCH_VARIANTS"); v != "" {
		variants = strings.Split(v, ",")
	}
	// Each variant is a sub-benchmark, so that its stack (tables, fake,
	// pools) is removed before the next one: DynamoDB Local slows down as
	// tables pile up, which would favour the variants that run first.
	sums := map[string]float64{}
	for r := range rounds {
		for i := range variants {
			v := variants[(i+r)%len(variants)]
			b.Run(fmt.Sprintf("round=%d/%s", r+1, v), func(b *testing.B) {
				for range b.N {
					res := collectVariant(b, v, n, limit)
					sums[v] += res.collected / limit
					b.ReportMetric(res.collected/limit, "collect/limit")
					b.ReportMetric((res.hydration+res.backfl)/limit, "others/limit")
					b.ReportMetric(100*float64(res.refused)/float64(max(res.all, 1)), "%refused")
					b.Logf("round %d %-14s %s", r+1, v, res)
				}
			})
		}
	}
	for _, v := range variants {
		b.Logf("mean of %d rounds: %-14s collections %.3f of the limit", rounds, v, sums[v]/float64(rounds))
	}
}

type variantResult struct {
	secs                         float64
	collected, hydration, backfl float64 // requests per second at the fake
	refused, all                 int
	p50, p90                     time.Duration
	late                         int
}

func (r variantResult) String() string {
	return fmt.Sprintf("%6.1f s  collections %6.1f/s  hydration %5.1f/s  backfill %5.1f/s  refused %d of %d (%.2f %%)  charge wait p50 %v p90 %v  late %d",
		r.secs, r.collected, r.hydration, r.backfl, r.refused, r.all, 100*float64(r.refused)/float64(max(r.all, 1)),
		r.p50.Round(time.Millisecond), r.p90.Round(time.Millisecond), r.late)
}

// collectVariant seeds a fresh stack and collects its day with variant v.
func collectVariant(b *testing.B, v string, n int, limit float64) variantResult {
	b.Helper()
	b.StopTimer()
	cfg := billing.DefaultConfig() // 8 shards × 2 workers per replica
	cfg.LockedRetryWait = 0
	day := dates.MustParse("2024-03-15")
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	fakeLimit := limit
	if v == "none" {
		fakeLimit = 0
	}
	e := billingtest.NewEnv(b, billingtest.Options{Config: cfg, StripeLimit: fakeLimit, StripeBurst: envInt("BUDGET_BENCH_BURST", 0), Lease: 60 * time.Second,
		Heartbeat: time.Second, Log: log, Start: day.AddDays(-1).Time().Add(10 * time.Hour)})
	seed(b, e, n, day)
	dbURL := testenv.DatabaseURL(b)
	waits := &chargeWaits{}
	replicas := 1
	if strings.HasPrefix(v, "shared3") {
		replicas = 3
	}
	reps := make([]budgetReplica, replicas)
	for i := range reps {
		switch v {
		case "none":
			reps[i] = newLimitedReplica(b, e, cfg, math.Inf(1), log)
		case "bucket":
			reps[i] = newLimitedReplica(b, e, cfg, limit, log)
		default:
			reps[i] = newBudgetReplica(b, e, dbURL, "stripe", cfg,
				stripebudget.Config{Rate: limit, Replicas: replicas, Observer: waits}, log)
		}
	}
	e.Clock.SetDate(day)
	ctx, stopOthers := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	if strings.HasSuffix(v, "+burst") {
		othersLoad(ctx, &bg, e.Stripe.URL, reps)
	}
	before := len(e.Stripe.Requests())
	b.StartTimer()
	start := time.Now()
	var wg sync.WaitGroup
	succeeded := make([]int, replicas)
	errs := make([]error, replicas)
	for i := range reps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := reps[i].svc.Collect(context.Background(), day)
			if rep != nil {
				succeeded[i] = rep.Succeeded
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	stopOthers()
	bg.Wait()
	for _, err := range errs {
		require.NoError(b, err)
	}
	total := 0
	for _, s := range succeeded {
		total += s
	}
	require.Equal(b, n, total, "collections")
	var res variantResult
	for _, r := range e.Stripe.Requests()[before:] {
		res.all++
		switch {
		case r.Method == http.MethodPost && r.Path == "/v1/payment_intents":
			res.collected++
		case r.Path == "/v1/events":
			res.backfl++
		case strings.HasPrefix(r.Path, "/v1/events/"):
			res.hydration++
		}
	}
	res.secs = elapsed.Seconds()
	res.collected /= res.secs
	res.hydration /= res.secs
	res.backfl /= res.secs
	res.refused = int(e.Stripe.RateLimited())
	res.p50, res.p90 = waits.percentiles()
	res.late = waits.late
	return res
}

// newLimitedReplica is a replica without the shared budget: its charger's
// own token bucket of rate requests per second (+Inf: none), as the
// billing core was wired before the shared budget, on the same HTTP client settings
// as newBudgetReplica so that only the limiter differs.
func newLimitedReplica(tb testing.TB, e *billingtest.Env, cfg billing.Config, rate float64, log *slog.Logger) budgetReplica {
	tb.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	base := &http.Client{Timeout: 30 * time.Second, Transport: tr}
	api := stripeclient.New(stripeclient.Options{APIKey: "sk_test_fake_billing", BaseURL: e.Stripe.URL, Log: log,
		MaxNetworkRetries: 1, HTTPClient: base})
	opts := stripecharge.Options{Rate: rate}
	if !math.IsInf(rate, 1) {
		opts.Burst = max(1, int(rate/10))
	}
	charger := stripecharge.New(api, opts)
	locks := lock.New(e.DB, e.Locks, lock.Options{Lease: 60 * time.Second, Heartbeat: time.Second, Log: log})
	svc, err := billing.New(cfg, billing.Deps{Store: e.Store, Locks: locks, Charger: charger,
		Notifier: e.Notifier, Now: e.Clock.Now, Log: log})
	require.NoError(tb, err)
	return budgetReplica{svc: svc, charger: charger, client: base}
}
