package billing_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// BenchmarkCollectSharedBudget measures the shared Stripe budget (docs/design.md §9): N
// replicas, each a billing service with its own Stripe budget client on
// its own Postgres pool, all on one stack (the same DynamoDB tables, the
// same stripe_budget row), collect BILLING_BENCH_SUBS (default 3000)
// subscriptions due on one day against a fake Stripe that answers 429
// above 100 requests per second, with STRIPE_RATE_LIMIT=100. Sub-benchmarks:
// one replica, three replicas, and three replicas while a hydration burst
// (16 workers on replica 2) and a poller backfill (8 workers on replica 3)
// run the whole time. It reports the collections' rate against the limit,
// the share of requests refused (429), and the other classes' rates. Not
// run by make test; the command is in BENCHMARKS.md.
func BenchmarkCollectSharedBudget(b *testing.B) {
	const limit = 100.0
	n := envInt("BILLING_BENCH_SUBS", 3000)
	for _, tc := range []struct {
		name     string
		replicas int
		others   bool
		separate bool // a budget per replica: the per-process limiter before the shared budget
	}{
		{"replicas=1", 1, false, false},
		{"replicas=3", 3, false, false},
		{"replicas=3+hydration+backfill", 3, true, false},
		{"replicas=3,budget-per-replica", 3, false, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				collectShared(b, n, limit, tc.replicas, tc.others, tc.separate)
			}
		})
	}
}

func collectShared(b *testing.B, n int, limit float64, replicas int, others, separate bool) {
	b.StopTimer()
	cfg := billing.DefaultConfig() // 8 shards × 2 workers per replica
	cfg.LockedRetryWait = 0
	day := dates.MustParse("2024-03-15")
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	e := billingtest.NewEnv(b, billingtest.Options{Config: cfg, StripeLimit: limit, Lease: 60 * time.Second,
		Heartbeat: time.Second, Log: log, Start: day.AddDays(-1).Time().Add(10 * time.Hour)})
	seed(b, e, n, day)
	dbURL := testenv.DatabaseURL(b)
	reps := make([]budgetReplica, replicas)
	waits := &chargeWaits{}
	for i := range reps {
		row, bc := "stripe", stripebudget.Config{Rate: limit, Replicas: replicas, Observer: waits,
			Ahead: time.Duration(envInt("BUDGET_AHEAD_MS", 0)) * time.Millisecond}
		if separate {
			row = fmt.Sprintf("replica-%d", i)
		}
		reps[i] = newBudgetReplica(b, e, dbURL, row, cfg, bc, log)
	}
	e.Clock.SetDate(day)
	ctx, stopOthers := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	if others {
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

	// Everything is measured at the fake Stripe, in the collection's time.
	var charges, hydration, backfill, all int
	for _, r := range e.Stripe.Requests()[before:] {
		all++
		switch {
		case r.Method == http.MethodPost && r.Path == "/v1/payment_intents":
			charges++
		case r.Path == "/v1/events":
			backfill++
		case strings.HasPrefix(r.Path, "/v1/events/"):
			hydration++
		}
	}
	refused := e.Stripe.RateLimited()
	secs := elapsed.Seconds()
	collected := float64(charges) / secs
	b.ReportMetric(collected/limit, "collect-rate/limit")
	b.ReportMetric(float64(all-int(refused))/secs/limit, "all-rate/limit")
	b.ReportMetric(100*float64(refused)/float64(all), "%refused")
	b.ReportMetric(float64(hydration)/secs, "hydration-req/s")
	b.ReportMetric(float64(backfill)/secs, "backfill-req/s")
	b.ReportMetric(secs, "s/run")
	p50, p90 := waits.percentiles()
	b.ReportMetric(p50.Seconds()*1000, "charge-wait-p50-ms")
	b.Logf("%d collections on %d replicas in %s: charges %.1f/s (%.3f of %v), hydration %.1f/s, backfill %.1f/s, %d of %d requests refused (%.3f %%); a charge waited for its slot %v (median), %v (p90); %d late slots dropped",
		n, replicas, elapsed.Round(time.Millisecond), collected, collected/limit, limit,
		float64(hydration)/secs, float64(backfill)/secs, refused, all, 100*float64(refused)/float64(all), p50.Round(time.Millisecond), p90.Round(time.Millisecond), waits.late)
}

// chargeWaits keeps how long each charge waited for its slot: near zero
// means the collection, not the budget, set the pace.
type chargeWaits struct {
	mu    sync.Mutex
	waits []time.Duration
	late  int
}

func (c *chargeWaits) Granted(cl stripebudget.Class, wait time.Duration) {
	if cl != stripebudget.Charges {
		return
	}
	c.mu.Lock()
	c.waits = append(c.waits, wait)
	c.mu.Unlock()
}
func (c *chargeWaits) RateLimited(stripebudget.Class) {}
func (c *chargeWaits) StoreError()                    {}
func (c *chargeWaits) Fallback(bool)                  {}
func (c *chargeWaits) Replayed(stripebudget.Class)    {}
func (c *chargeWaits) Late(stripebudget.Class) {
	c.mu.Lock()
	c.late++
	c.mu.Unlock()
}

func (c *chargeWaits) percentiles() (p50, p90 time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waits) == 0 {
		return 0, 0
	}
	sort.Slice(c.waits, func(i, j int) bool { return c.waits[i] < c.waits[j] })
	return c.waits[len(c.waits)/2], c.waits[len(c.waits)*9/10]
}

// othersLoad runs, until ctx ends, a hydration burst on replica 2 (16
// workers reading events) and a poller backfill on replica 3 (8 workers
// listing events); each asks again as soon as it is answered.
func othersLoad(ctx context.Context, bg *sync.WaitGroup, url string, reps []budgetReplica) {
	// Hydration: event reads on replica 2; the backfill: event listings
	// on replica 3. Each waits for its slot and asks again at once.
	for _, o := range []struct {
		rep     int
		class   stripebudget.Class
		path    string
		workers int
	}{{1, stripebudget.Hydration, "/v1/events/evt_hydrate", 16}, {2, stripebudget.Background, "/v1/events?limit=100", 8}} {
		for range o.workers {
			bg.Add(1)
			go func() {
				defer bg.Done()
				for ctx.Err() == nil {
					req, err := http.NewRequestWithContext(stripebudget.WithClass(ctx, o.class), http.MethodGet, url+o.path, nil)
					if err != nil {
						return
					}
					req.Header.Set("Authorization", "Bearer sk_test_fake_billing")
					if resp, err := reps[o.rep].client.Do(req); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
					}
				}
			}()
		}
	}
}

// BenchmarkChargeRateSharedBudget isolates the budget from the billing
// core's DynamoDB work: N replicas' chargers (16 workers each, the billing
// core's default) create BILLING_BENCH_CHARGES (default 3000) PaymentIntents
// through the shared budget against the fake Stripe that answers 429 above
// 100 requests per second, optionally with the hydration burst and the
// poller backfill of BenchmarkCollectSharedBudget. Measured at the fake.
func BenchmarkChargeRateSharedBudget(b *testing.B) {
	const limit = 100.0
	n := envInt("BILLING_BENCH_CHARGES", 3000)
	for _, tc := range []struct {
		name     string
		replicas int
		others   bool
	}{
		{"replicas=1", 1, false},
		{"replicas=3", 3, false},
		{"replicas=3+hydration+backfill", 3, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				r := chargeShared(b, n, limit, chargeVariant{replicas: tc.replicas, others: tc.others})
				b.ReportMetric(r.charged/limit, "charge-rate/limit")
				b.ReportMetric(100*float64(r.refused)/float64(r.all), "%refused")
				b.ReportMetric(r.hydration, "hydration-req/s")
				b.ReportMetric(r.backfill, "backfill-req/s")
				b.Logf("%d charges on %d replicas: %s", n, tc.replicas, r)
			}
		})
	}
}

// BenchmarkChargeRateRounds is BenchmarkChargeRateSharedBudget in
// BUDGET_BENCH_ROUNDS (default 3) interleaved rounds, each in a rotated
// order: ratios of one run, on a machine whose load moves between runs.
// BUDGET_BENCH_VARIANTS (comma-separated, default the five below: one and
// three replicas with the late tolerance before (one request's worth) and
// now (the default), and three under the lower classes' load) picks
// the variants; a variant's name is its replicas ("replicas=3"), then
// optionally "+hydration+backfill" (the lower classes' load of
// BenchmarkCollectSharedBudget), "/fixed-lease" (the lease as first
// built: stripebudget.Config.FixedLease) and "/late=K" (the late
// tolerance, stripebudget.Config.Late, K requests' worth). Each line also
// goes to stderr, where the benchmark's log limit does not cut it. Not run
// by make test; the command is in BENCHMARKS.md.
func BenchmarkChargeRateRounds(b *testing.B) {
	const limit = 100.0
	n := envInt("BILLING_BENCH_CHARGES", 2000)
	rounds := envInt("BUDGET_BENCH_ROUNDS", 3)
	names := []string{"replicas=1/late=1", "replicas=1", "replicas=3/late=1", "replicas=3", "replicas=3+hydration+backfill"}
	if v := os.Getenv("BUDGET_BENCH_VARIANTS"); v != "" {
		names = strings.Split(v, ",")
	}
	variants := make([]chargeVariant, len(names))
	for i, name := range names {
		v, err := parseChargeVariant(name)
		require.NoError(b, err)
		variants[i] = v
	}
	sums := map[string]float64{}
	for range b.N {
		for r := range rounds {
			for i := range variants {
				v := variants[(i+r)%len(variants)]
				res := chargeShared(b, n, limit, v)
				sums[v.name] += res.charged / limit
				line := fmt.Sprintf("round %d %-34s %s", r+1, v.name, res)
				fmt.Fprintln(os.Stderr, line)
				b.Log(line)
			}
		}
	}
	for _, v := range variants {
		mean := sums[v.name] / float64(rounds*b.N)
		fmt.Fprintf(os.Stderr, "mean of %d rounds: %-34s charges %.3f of the limit\n", rounds, v.name, mean)
		b.ReportMetric(mean, strings.NewReplacer("=", "", "+", "-", "/", "-").Replace(v.name)+"-charge/limit")
	}
}

// chargeVariant is one setup of BenchmarkChargeRateRounds.
type chargeVariant struct {
	name     string
	replicas int
	others   bool // the hydration burst and the poller backfill run too
	fixed    bool // stripebudget.Config.FixedLease
	late     int  // stripebudget.Config.Late in requests' worth (0: its default)
}

// parseChargeVariant reads a variant's name (BenchmarkChargeRateRounds).
func parseChargeVariant(name string) (chargeVariant, error) {
	v := chargeVariant{name: name}
	parts := strings.Split(name, "/")
	head := parts[0]
	if rest, ok := strings.CutSuffix(head, "+hydration+backfill"); ok {
		v.others, head = true, rest
	}
	if _, err := fmt.Sscanf(head, "replicas=%d", &v.replicas); err != nil || v.replicas < 1 {
		return v, fmt.Errorf("variant %q: want replicas=N first", name)
	}
	for _, p := range parts[1:] {
		switch {
		case p == "fixed-lease":
			v.fixed = true
		case strings.HasPrefix(p, "late="):
			if _, err := fmt.Sscanf(p, "late=%d", &v.late); err != nil || v.late < 1 {
				return v, fmt.Errorf("variant %q: late=K wants K of 1 or more", name)
			}
		default:
			return v, fmt.Errorf("variant %q: unknown part %q", name, p)
		}
	}
	return v, nil
}

type chargeResult struct {
	secs                         float64
	charged, hydration, backfill float64 // per second, at the fake
	refused, all, maxPerSecond   int
	burst                        float64 // the token-bucket burst the arrivals needed (burstNeeded)
	p50, p90                     time.Duration
	late                         int
	slots                        stripebudget.Stats // summed over the replicas
	limit                        float64
}

func (r chargeResult) String() string {
	s := r.slots
	return fmt.Sprintf("%5.1f s  charges %5.1f/s (%.3f of the limit)  hydration %4.1f/s  backfill %4.1f/s  refused %d of %d (%.2f %%)  at most %d in one second  burst needed %.1f  charge wait p50 %v p90 %v  late slots %d\n"+
		"    slots: never leased %.0f  leased %d in %d leases  used %d  late %d (handed late %d)  paused %d  spare expired %d  unwanted %d  woke after slot (requests' worth <1,1-2,2-3,3-5,5-10,10+) %v",
		r.secs, r.charged, r.charged/100, r.hydration, r.backfill, r.refused, r.all, 100*float64(r.refused)/float64(max(r.all, 1)),
		r.maxPerSecond, r.burst, r.p50.Round(time.Millisecond), r.p90.Round(time.Millisecond), r.late,
		r.limit*r.secs-float64(s.Leased), s.Leased, s.Leases, s.Used, s.Late, s.HandedLate, s.Paused, s.SpareExpired, s.Unwanted, s.Woke)
}

func chargeShared(b *testing.B, n int, limit float64, v chargeVariant) chargeResult {
	b.StopTimer()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e := billingtest.NewEnv(b, billingtest.Options{StripeLimit: limit, Log: log})
	dbURL := testenv.DatabaseURL(b)
	reps := make([]budgetReplica, v.replicas)
	waits := &chargeWaits{}
	for i := range reps {
		reps[i] = newBudgetReplica(b, e, dbURL, "stripe", billing.DefaultConfig(),
			stripebudget.Config{Rate: limit, Replicas: v.replicas, Observer: waits, FixedLease: v.fixed,
				Late: time.Duration(v.late) * time.Duration(float64(time.Second)/limit)}, log)
	}
	ctx, stopOthers := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	if v.others {
		othersLoad(ctx, &bg, e.Stripe.URL, reps)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	b.StartTimer()
	start := time.Now()
	for _, r := range reps {
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1); i <= int64(n); i = next.Add(1) {
					_, err := r.charger.Charge(context.Background(), billing.ChargeRequest{StripeAccount: "acct_test",
						Customer: "cus_test", PaymentMethod: "pm_ok", Amount: 1999, Currency: "usd",
						IdempotencyKey: fmt.Sprintf("bench-%d", i)})
					if err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	stopOthers()
	bg.Wait()
	var res chargeResult
	var at []time.Time
	for _, r := range e.Stripe.Requests() {
		res.all++
		at = append(at, r.At)
		switch {
		case r.Path == "/v1/events":
			res.backfill++
		case strings.HasPrefix(r.Path, "/v1/events/"):
			res.hydration++
		}
	}
	res.secs = elapsed.Seconds()
	res.refused = int(e.Stripe.RateLimited())
	created := float64(e.Stripe.Created("payment_intent"))
	if created == 0 {
		created = float64(len(e.Stripe.PIs()))
	}
	res.charged = created / res.secs
	res.hydration /= res.secs
	res.backfill /= res.secs
	res.maxPerSecond = mostInOneSecond(at)
	res.burst = burstNeeded(at, limit)
	res.p50, res.p90 = waits.percentiles()
	res.late = waits.late
	res.limit = limit
	for _, r := range reps {
		res.slots = res.slots.Add(r.budget.Stats())
	}
	return res
}

// burstNeeded is the smallest burst a token bucket of rate per second
// (Stripe's limiter, the fake's) must allow to refuse none of the
// arrivals ts: a GCRA's largest lead of its theoretical arrival time over
// an arrival, in requests' worth. Arrivals exactly 1/rate apart need 1.
func burstNeeded(ts []time.Time, rate float64) float64 {
	ts = append([]time.Time(nil), ts...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	interval := time.Duration(float64(time.Second) / rate)
	var tat time.Time
	most := 0.0
	for _, t := range ts {
		if tat.Before(t) {
			tat = t
		}
		tat = tat.Add(interval)
		most = max(most, float64(tat.Sub(t))/float64(interval))
	}
	return most
}

// mostInOneSecond is the most arrivals in any window [t, t+1s).
func mostInOneSecond(ts []time.Time) int {
	ts = append([]time.Time(nil), ts...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	most, j := 0, 0
	for i := range ts {
		for j < len(ts) && ts[j].Sub(ts[i]) < time.Second {
			j++
		}
		most = max(most, j-i)
	}
	return most
}
