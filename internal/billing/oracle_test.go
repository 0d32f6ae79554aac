package billing_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/feedqueue"
	"github.com/stripe-payments/stripe-payments/internal/billing/oracle"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/config"
	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/handler"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/lock"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// The long run: go test ./internal/billing/ -run TestBillingOracle -timeout 6h -billing.sequences=1000 -billing.months=36
// (or BILLING_ORACLE_SEQUENCES / BILLING_ORACLE_MONTHS); -billing.seed picks another seed.
var (
	oracleSequences = flag.Int("billing.sequences", 0, "TestBillingOracle: random sequences (default 24, or BILLING_ORACLE_SEQUENCES)")
	oracleSeed      = flag.Uint64("billing.seed", 0, "TestBillingOracle: seed (default 1, or BILLING_ORACLE_SEED)")
	oracleMonths    = flag.Int("billing.months", 0, "TestBillingOracle: simulated months per sequence (default 12, or BILLING_ORACLE_MONTHS; the long run: 36)")
	oracleUniverses = flag.Int("billing.universes", 0, "TestBillingOracle: universes run at once (default sequences/6, 4 to 16)")
	oracleExclude   = flag.String("billing.exclude", "", "TestBillingOracle: more kinds to leave out while diagnosing (comma-separated)")
)

// oracleExcluded are the operation kinds (and "unknown", the unknown
// outcomes) the generator leaves out, each with the finding of
// /work/coord/billing-findings.md that keeps it out. Empty when every rule
// of docs/design.md §8 holds.
var oracleExcluded = map[string]string{}

// oracleKinds are the operations the generator draws from; refineKind
// names the cases of each that a finding may single out.
var oracleKinds = []string{"pause", "resume", "amount", "rule", "move", "cancel", "waive", "paynow", "payment-method", "plan", "batch"}

// oracleRefined are the refined kinds: pause-yearly (a YEARLY pause),
// amount-while-failing (an amount change while a period is ERROR),
// rule-after-waiver (a rule change whose last ended period was not charged:
// waived, skipped or stale), rule-term (a rule change of the term, MONTHLY
// ↔ YEARLY, with or without a new day; Friday billing to YEARLY on a week,
// which the rules refuse, or on a day), waive-failed and waive-next (an ERROR period,
// the next scheduled one), move-announced (moving a period whose reminder
// went out). Faults: unknown (unknown outcomes at all), unknown-declined
// (an unknown outcome of a charge Stripe declined). customer-pays: the
// customer paying a declined PaymentIntent (customerPays). Plan changes
// (operatePlan): plan-up, plan-down, plan-same (a new name at the same
// amount), plan-while-paused (across a paused period), plan-while-failing
// (an ERROR period retried at the new plan), plan-racing (on a day a
// period is due, retried or marked: the change comes before the day's
// collection), plan-bad (bad input, refused), reactivate-plan.
var oracleRefined = []string{"pause-yearly", "amount-while-failing", "rule-after-waiver", "rule-term", "waive-failed", "waive-next",
	"move-announced", "unknown-declined", "reactivate", "plan-up", "plan-down", "plan-same", "plan-while-paused", "plan-while-failing",
	"plan-racing", "plan-bad", "reactivate-plan"}

// TestBillingOracle drives the real billing Service (DynamoDB Local tables,
// lease lock, history, fake Stripe at the HTTP level, webhooks through the
// real handler and the billing feed) with random sequences of operations,
// job runs, declines, unknown outcomes, late ACH settlements, refunds and
// crashes, and after every simulated day holds charges, receipts,
// reminders, period statuses and history against the reference model of
// internal/billing/oracle, written from docs/design.md §8 alone.
//
// Each sequence is one account with one subscription; sequences are split
// over universes (own tables, own fake Stripe, own clock) that run in
// parallel. A discrepancy stops that sequence's checks and is reported with
// the seed and the sequence's operations.
func TestBillingOracle(t *testing.T) {
	t.Parallel()
	n := firstPositive(*oracleSequences, envInt("BILLING_ORACLE_SEQUENCES", 24))
	seed := uint64(firstPositive(int(*oracleSeed), envInt("BILLING_ORACLE_SEED", 1)))
	// make test: 12 months (under 2 min with -race on a busy 2-core box; the
	// floor is the service's own reads of every simulated day). The long run
	// sets -billing.months=36.
	months := firstPositive(*oracleMonths, envInt("BILLING_ORACLE_MONTHS", 12))
	universes := min(n, firstPositive(*oracleUniverses, min(16, max(4, n/6))))
	if *oracleExclude != "" {
		for _, k := range strings.Split(*oracleExclude, ",") {
			oracleExcluded[k] = "-billing.exclude"
		}
	}
	for k := range oracleExcluded {
		if !slices.Contains(oracleKinds, k) && !slices.Contains(oracleRefined, k) && k != "unknown" && k != "customer-pays" {
			t.Fatalf("oracleExcluded: unknown kind %q", k)
		}
	}
	t.Logf("billing oracle: %d sequences in %d universes, %d months, seed %d; excluded operations: %v",
		n, universes, months, seed, oracleExcluded)
	var mu sync.Mutex
	stats := map[string]int{}
	var failures []string
	// Universes are built here (t.Fatal is for this goroutine) and run in
	// goroutines of their own, all at once: they mostly wait on DynamoDB
	// Local, and -parallel (GOMAXPROCS) would run only two at a time.
	worlds := make([]*oracleWorld, universes)
	for u := range universes {
		worlds[u] = newOracleWorld(t, seed, u, u*n/universes, (u+1)*n/universes, months)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, w := range worlds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run()
			mu.Lock()
			defer mu.Unlock()
			for k, v := range w.stats {
				stats[k] += v
			}
			for _, q := range w.seqs {
				if q.failed != "" {
					failures = append(failures, q.failed)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("simulated in %s", time.Since(start).Round(time.Millisecond))
	keys := make([]string, 0, len(stats))
	for k := range stats {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, stats[k])
	}
	t.Logf("exercised:%s", b.String())
	for _, f := range failures {
		t.Error(f)
	}
	if len(failures) > 0 {
		t.Logf("reproduce: go test ./internal/billing/ -run TestBillingOracle -count=1 -billing.seed=%d -billing.sequences=%d -billing.months=%d -billing.universes=%d",
			seed, n, months, universes)
	}
	// The run exercised what it claims to.
	for _, k := range []string{"charge:succeeded", "charge:declined", "charge:declined-hard", "charge:processing", "ach:settled",
		"ach:failed", "refund", "status:STALE", "status:PAUSED_SKIPPED", "status:WAIVED", "status:CANCELLED", "crash", "reminder"} {
		if stats[k] == 0 && n >= 24 && months >= 12 {
			t.Errorf("never happened in %d sequences: %s", n, k)
		}
	}
	if _, out := oracleExcluded["unknown"]; !out && stats["charge:unknown"] == 0 && n >= 24 && months >= 12 {
		t.Errorf("never happened in %d sequences: charge:unknown", n)
	}
	for _, k := range append(slices.Clone(oracleKinds), "reactivate", "plan-down", "plan-up", "plan-while-paused", "plan-racing") {
		if _, out := oracleExcluded[k]; !out && stats["op:"+k] == 0 && n >= 24 && months >= 12 {
			t.Errorf("operation never accepted in %d sequences: %s", n, k)
		}
	}
}

func firstPositive(vs ...int) int {
	for _, v := range vs {
		if v > 0 {
			return v
		}
	}
	return 0
}

// unit is a deterministic draw in [0, 1) from the seed and some words: the
// same charge gets the same fate whatever the order the service makes them
// in.
func unit(seed uint64, words ...string) float64 {
	h := fnv.New64a()
	fmt.Fprint(h, seed)
	for _, w := range words {
		h.Write([]byte{0})
		h.Write([]byte(w))
	}
	return float64(h.Sum64()>>11) / (1 << 53)
}

// attemptName is an attempt's idempotency key without the subscription's
// random id: the same in every run of a seed.
func attemptName(key string, meta map[string]string) string {
	if sub := meta[billing.MetaSubscription]; sub != "" {
		return strings.ReplaceAll(key, sub, "")
	}
	return key
}

// The lock's lease is measured on a clock of the harness (w.lease), not
// the machine's: a lease runs out only when the harness moves that clock,
// between two runs of a collection an injected crash cut short. With the
// machine's clock a heartbeat that a loaded box delayed by a few hundred
// milliseconds lost a live holder its lock (a pay now then stopped between
// its claim and its charge), so the same seed passed or failed by load.
// oracleLease also bounds a heartbeat request (half of it), in real time.
const (
	oracleLease     = 30 * time.Second
	oracleHeartbeat = 200 * time.Millisecond
)

// oracleSeq is one sequence: an account, its subscription, its model.
type oracleSeq struct {
	idx        int
	account    string
	rng        *rand.Rand
	created    dates.Date
	in         billing.CreateInput
	subID      string
	model      *oracle.Sub
	log        []string
	failed     string
	declineP   float64
	ach        bool
	history    []billing.HistoryEntry
	touched    bool
	expectPays []oracle.Due // pay-now charges expected from today's operations
	pis        []string     // the PaymentIntents made for this sequence
}

func (q *oracleSeq) logf(day dates.Date, format string, args ...any) {
	q.log = append(q.log, day.String()+" "+fmt.Sprintf(format, args...))
}

type oracleWorld struct {
	t        *testing.T
	seed     uint64
	u        int
	e        *billingtest.Env
	cfg      billing.Config
	seqs     []*oracleSeq
	byAcct   map[string]*oracleSeq // by account id (billing_account)
	byStripe map[string]*oracleSeq // by connected account (Stripe-Account)
	first    dates.Date
	last     dates.Date
	handler  *handler.Handler
	worker   *outbox.Worker
	stats    map[string]int
	pending  map[dates.Date][]string // "settle:<pi>:<ok>", "refund:<pi>", "dup:<pi>", "paid:<pi>"
	seenPIs  int
	seenActs int

	// Stripe outages for the unknown outcomes: account → day it answers 500.
	downMu sync.Mutex
	down   map[string]dates.Date
	// collecting: the outage began during the day's collection.
	collecting bool
	downInJob  map[string]dates.Date
	answerLost map[string]bool // attempts (by name) whose first request went through the outage
	lost       map[string]bool // PaymentIntents whose answer was lost

	counter *billingtest.CountingTransport
	logs    *oracleLog
	lease   *billingtest.Clock
	crashMu sync.Mutex
	crashed map[string]bool // account/day/step crashes that happened
	crashes int
}

func newOracleWorld(t *testing.T, seed uint64, u, lo, hi, months int) *oracleWorld {
	w := &oracleWorld{t: t, seed: seed, u: u, byAcct: map[string]*oracleSeq{}, byStripe: map[string]*oracleSeq{},
		stats: map[string]int{}, pending: map[dates.Date][]string{}, down: map[string]dates.Date{}, crashed: map[string]bool{}, downInJob: map[string]dates.Date{}, lost: map[string]bool{}, answerLost: map[string]bool{}}
	cfg := billingtest.TestConfig()
	// Accounts are collected in parallel (shards × workers): crashes are
	// drawn per account, day and step, so they land at the same points in
	// any order.
	cfg.Shards, cfg.WorkersPerShard = 1, 4
	// A lock left behind is a crashed run's: the harness lets its lease run
	// out (expireLocks) and reruns the collection.
	cfg.LockedRetryWait = 0
	// The harness runs every day's jobs: nothing to catch up.
	cfg.LookbackDays = 0
	cfg.ReceiptTTL = 20 * 365 * 24 * time.Hour // simulated receipts stay listed
	w.cfg = cfg
	// Universes start in different years: leap and common Februaries.
	start := time.Date(2024+int(seed+uint64(u))%4, time.Month(1+int(seed*7+uint64(u))%12), 1, 10, 0, 0, 0, time.UTC)
	// Warnings and errors of the service are kept to explain an incomplete run.
	w.logs = &oracleLog{}
	quiet := slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	w.counter = &billingtest.CountingTransport{}
	w.lease = billingtest.NewClock(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)) // stands still unless advanced
	w.e = billingtest.NewEnv(t, billingtest.Options{Config: cfg, Start: start, DynamoHTTP: &http.Client{Transport: w.counter}, Lease: oracleLease,
		Heartbeat: oracleHeartbeat, LockNow: w.lease.Now, Crash: w.hook, Log: quiet})
	w.e.Stripe.Decide = w.decide
	w.e.Stripe.DeclineAs = w.declineAs
	w.e.Stripe.Wrap(func(inner http.Handler) http.Handler {
		return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { w.outage(rw, r, inner) })
	})
	w.cfg = w.e.Service.Config()

	pool := testenv.Postgres(t)
	evTable := testenv.TableName("events")
	testenv.CreateTables(t, testenv.Dynamo(t), dynamo.EventsTable(evTable))
	const ttl = 20 * 365 * 24 * time.Hour
	opts := []handler.Option{handler.WithClock(w.e.Clock.Now)}
	var feed handler.Routes
	for _, typ := range billing.FeedEventTypes {
		feed = feed.With(typ, feedqueue.Enqueue)
	}
	opts = append(opts, handler.WithRoutes(feed))
	w.handler = handler.New(handler.Config{PlatformAccount: "acct_platform", EventTTL: ttl},
		events.NewStore(w.e.DB, evTable, ttl, nil), ledger.New(pool), quiet, opts...)
	w.worker = &outbox.Worker{Pool: pool, Topic: billing.FeedTopic, Deliver: feedqueue.Deliver(w.e.Service, quiet), Log: quiet,
		Backoff: func(int) time.Duration { return 0 }, Batch: 1000}

	w.first = w.e.Clock.Today()
	w.last = dates.AddMonthsClamped(w.first, months)
	for i := lo; i < hi; i++ {
		q := &oracleSeq{idx: i, account: fmt.Sprintf("acc-%05d", i), rng: rand.New(rand.NewPCG(seed, uint64(i)))}
		q.created = w.first.AddDays(q.rng.IntN(60))
		in := billingtest.Input(fmt.Sprintf("sku-%d", i%3), 0)
		in.Customer = fmt.Sprintf("cus_o%d", i)
		in.StripeAccount = fmt.Sprintf("acct_o%d", i)
		if q.rng.IntN(100) < 10 {
			in.StripeAccount = "" // the platform charges on its own account (docs/design.md §4)
		}
		in.Amount = int64(100 + q.rng.IntN(9900))
		switch r := q.rng.IntN(100); {
		case r < 40:
			in.PaymentDay = 28 + q.rng.IntN(4)
		case r < 55:
			in.BillingWeek = 1 + q.rng.IntN(5)
		default:
			in.PaymentDay = 1 + q.rng.IntN(31)
		}
		if in.BillingWeek == 0 && q.rng.IntN(100) < 15 {
			in.Term = dates.Yearly
		}
		if q.rng.IntN(100) < 20 {
			in.StartDate = q.created.AddDays(q.rng.IntN(90))
		}
		q.in = in
		q.declineP = []float64{0, 0, 0.05, 0.2, 0.5, 1}[q.rng.IntN(6)]
		q.ach = q.rng.IntN(100) < 15
		w.seqs = append(w.seqs, q)
		w.byAcct[q.account] = q
		if in.StripeAccount != "" {
			w.byStripe[in.StripeAccount] = q
		}
	}
	return w
}

func (w *oracleWorld) stat(k string) { w.stats[k]++ }

// must ends the universe on an error of the harness or of a component (not
// a discrepancy, which fail records): t.Errorf is safe from any goroutine,
// t.FailNow is not.
func (w *oracleWorld) must(err error) {
	if err != nil {
		w.t.Errorf("universe %d on %s: %v", w.u, w.e.Clock.Today(), err)
		runtime.Goexit()
	}
}

// fail records the first discrepancy of q and stops checking it.
func (w *oracleWorld) fail(q *oracleSeq, day dates.Date, format string, args ...any) {
	if q.failed != "" {
		return
	}
	var state []string
	if q.subID != "" {
		ctx := context.Background()
		recs, _ := w.e.Store.ListPeriods(ctx, q.account, q.subID)
		for _, r := range recs {
			state = append(state, fmt.Sprintf("period %s %s attempts %d next attempt %s in flight %q", r.BillingDate, r.Status, r.Attempts, r.NextAttemptDate, r.InFlightKey))
		}
		h, _ := w.e.Store.AllHistory(ctx, q.account, q.subID)
		for _, e := range h {
			state = append(state, fmt.Sprintf("history %s v%d %s %s %s %s", e.BillingDate, e.Version, e.Status, e.Process, e.UpdatedEvent, e.TransactionID))
		}
	}
	q.failed = fmt.Sprintf("seed %d sequence %d (%s, sub %s, %s day %d week %d, created %s, start %s) on %s: %s\noperations:\n  %s\nservice state:\n  %s",
		w.seed, q.idx, q.account, q.subID, q.in.Term, q.in.PaymentDay, q.in.BillingWeek, q.created, q.in.StartDate, day,
		fmt.Sprintf(format, args...), strings.Join(q.log, "\n  "), strings.Join(state, "\n  "))
}

// hook crashes a collection between two steps of an account's attempt,
// once per account, day and step, drawn from the seed (a crash abandons the
// lock; the rerun takes over after the lease).
func (w *oracleWorld) hook(step string, p billing.Period) error {
	w.downMu.Lock()
	collecting := w.collecting
	w.downMu.Unlock()
	key := p.AccountID + "/" + w.e.Clock.Today().String() + "/" + step
	w.crashMu.Lock()
	defer w.crashMu.Unlock()
	if !collecting || w.crashed[key] || unit(w.seed, "crash", key) >= 0.02 {
		return nil
	}
	w.crashed[key] = true
	w.crashes++
	return billing.ErrCrash
}

// decide is the fake Stripe's outcome of a new PaymentIntent, drawn from
// the seed and its idempotency key.
func (w *oracleWorld) decide(p stripetest.PI) stripetest.Behavior {
	q := w.byAcct[p.Metadata[billing.MetaAccount]]
	if q == nil {
		return stripetest.Succeed
	}
	switch {
	case unit(w.seed, attemptName(p.IdempotencyKey, p.Metadata), "decline") < q.declineP: // the outage middleware draws the same
		return stripetest.Decline
	case q.ach:
		return stripetest.Process
	}
	return stripetest.Succeed
}

// declineAs is the code of a declined PaymentIntent, drawn from the seed
// and its attempt: a third of declines are ones retrying cannot fix
// (docs/design.md §8, config.DefaultBillingHardDeclineCodes), the rest soft.
func (w *oracleWorld) declineAs(p stripetest.PI) string {
	name := attemptName(p.IdempotencyKey, p.Metadata)
	pick := func(what string, codes []string) string {
		return codes[int(unit(w.seed, name, what)*float64(len(codes)))]
	}
	if unit(w.seed, name, "hard") < 0.33 {
		return pick("hard-code", config.DefaultBillingHardDeclineCodes())
	}
	return pick("soft-code", []string{"insufficient_funds", "generic_decline", "do_not_honor", "processing_error"})
}

// outage makes some charges' outcomes unknown: Stripe acts, but answers 500,
// and answers 500 to everything about that account for the rest of the day.
func (w *oracleWorld) outage(rw http.ResponseWriter, r *http.Request, inner http.Handler) {
	acct := r.Header.Get("Stripe-Account")
	today := w.e.Clock.Today()
	fail := func() {
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(rw, `{"error":{"type":"api_error","message":"simulated outage"}}`)
	}
	w.downMu.Lock()
	isDown := w.down[acct] == today
	w.downMu.Unlock()
	if isDown {
		fail()
		return
	}
	if _, out := oracleExcluded["unknown"]; out || r.Method != http.MethodPost || r.URL.Path != "/v1/payment_intents" || w.byStripe[acct] == nil {
		inner.ServeHTTP(rw, r)
		return
	}
	if err := r.ParseForm(); err != nil {
		fail()
		return
	}
	name := attemptName(r.Header.Get("Idempotency-Key"), map[string]string{billing.MetaSubscription: r.PostForm.Get("metadata[" + billing.MetaSubscription + "]")})
	_, noDeclined := oracleExcluded["unknown-declined"]
	w.downMu.Lock()
	resend := w.answerLost[name] // only an attempt's first request loses its answer
	w.answerLost[name] = true
	w.downMu.Unlock()
	if resend || unit(w.seed, name, "unknown") >= 0.04 || (noDeclined && unit(w.seed, name, "decline") < w.byStripe[acct].declineP) {
		inner.ServeHTTP(rw, r)
		return
	}
	rec := httptest.NewRecorder()
	inner.ServeHTTP(rec, r)
	w.downMu.Lock()
	w.down[acct] = today
	if w.collecting {
		w.downInJob[acct] = today
	}
	w.downMu.Unlock()
	fail()
}

func (w *oracleWorld) run() {
	ctx := context.Background()
	for day := w.first; !day.After(w.last); day = day.AddDays(1) {
		w.e.Clock.SetDate(day)
		od := oracle.MustParse(day.String())
		for _, q := range w.seqs {
			q.touched = false
			switch {
			case q.failed != "":
			case day == q.created:
				w.create(q, day)
			case q.model != nil && day.After(q.created):
				w.operate(q, day)
			}
		}
		w.attribute(day, "operations")
		for _, q := range w.seqs {
			if q.model != nil && q.failed == "" && day.After(q.created) {
				w.customerPays(q, day)
			}
		}
		// The model applies a customer's payment before the day's jobs, so
		// its webhook reaches the service before them too: delivered after
		// the collection, the day's stale mark came first, and a period the
		// customer paid on its stale date went ERROR, STALE, COMPLETED (a
		// late payment) where the rules have it ERROR, COMPLETED (seed 3,
		// 36 months, once hard declines left periods payable to their stale
		// date).
		w.webhooksNow(day, "paid:")
		_, err := w.e.Service.Remind(ctx, day)
		w.must(err)
		w.reminders(day)
		for _, q := range w.seqs {
			if q.model != nil && q.failed == "" {
				before := w.signature(q)
				for _, due := range q.model.Collect(od) {
					q.expectPays = append(q.expectPays, due)
				}
				q.touched = q.touched || before != w.signature(q) || len(q.expectPays) > 0
			}
		}
		w.collect(day)
		w.attribute(day, "collection")
		w.webhooks(day)
		// Touched sequences every day; all of them every 90 days and at the
		// end (a change on an untouched day shows at the next touch anyway).
		full := day.DaysSince(w.first)%90 == 89 || day == w.last
		// Checks read DynamoDB: in parallel, each sequence's its own.
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for _, q := range w.seqs {
			if q.model != nil && q.failed == "" && (q.touched || full) {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					w.check(q, day)
				}()
			}
		}
		wg.Wait()
	}
	w.stats["crash"] = w.crashes
	ops, total := w.counter.Ops()
	w.t.Logf("universe %d: DynamoDB requests %d %v", w.u, total, ops)
	for _, q := range w.seqs {
		if q.model != nil {
			for _, p := range q.model.Periods() {
				w.stat("status:" + string(p.Status))
			}
		}
	}
}

// signature is what a day may change in the model.
func (w *oracleWorld) signature(q *oracleSeq) string {
	var b strings.Builder
	for _, p := range q.model.Periods() {
		fmt.Fprintf(&b, "%d%s%d;", p.Scheduled, p.Status, len(p.Attempts))
	}
	return b.String()
}

func (w *oracleWorld) create(q *oracleSeq, day dates.Date) {
	rule := oracle.Rule{Day: q.in.PaymentDay, Week: q.in.BillingWeek}
	if q.in.Term == dates.Yearly {
		rule.Term = oracle.Yearly
	}
	start := oracle.NoDate
	if !q.in.StartDate.IsZero() {
		start = oracle.MustParse(q.in.StartDate.String())
	}
	m, err := oracle.NewPlan(oracle.Config{ReminderDays: w.cfg.ReminderDays, RetryDays: w.cfg.Retry.Days, StaleDays: w.cfg.Retry.StaleDays},
		rule, q.in.SKU, q.in.Amount, start, oracle.MustParse(day.String()))
	w.must(err)
	sub, err := w.e.Service.CreateSubscription(context.Background(), q.account, q.in)
	q.logf(day, "create %s day %d week %d amount %d start %s", q.in.Term, q.in.PaymentDay, q.in.BillingWeek, q.in.Amount, q.in.StartDate)
	q.model, q.touched = m, true
	if err != nil {
		w.fail(q, day, "create refused: %v", err)
		return
	}
	q.subID = sub.SubscriptionID
}

// operate maybe applies one random operation to q, to the model and to
// the service alike.
func (w *oracleWorld) operate(q *oracleSeq, day dates.Date) {
	m, od := q.model, oracle.MustParse(day.String())
	if m.Cancelled() {
		// reactivate: a cancelled customer comes back (§8 "Reactivation").
		if _, out := oracleExcluded["reactivate"]; !out && q.rng.IntN(100) < 4 && !m.Busy(od) {
			w.reactivate(q, day)
		}
		return
	}
	if q.rng.IntN(100) >= 5 {
		return
	}
	if m.Busy(od) {
		// A plan change on a day a period is due, retried or marked: it
		// comes before the day's collection (operatePlan).
		if _, out := oracleExcluded["plan"]; !out && q.rng.IntN(4) == 0 {
			w.operatePlan(q, day, true)
		}
		return
	}
	base := oracleKinds[q.rng.IntN(len(oracleKinds))]
	if base == "cancel" && q.rng.IntN(12) != 0 {
		base = "amount" // cancels end a sequence's interesting part: rarer
	}
	var (
		paused, failing, scheduled []*oracle.Period
		nextIdx                    = -1
	)
	periods := m.Periods()
	for i, p := range periods {
		switch {
		case p.Status == oracle.Paused:
			paused = append(paused, p)
		case p.Status == oracle.Error:
			failing = append(failing, p)
		case p.Status == oracle.Scheduled && len(p.Attempts) == 0 && p.Charge > od:
			scheduled = append(scheduled, p)
			if nextIdx < 0 {
				nextIdx = i
			}
		}
	}
	calm := len(paused) == 0 && len(failing) == 0
	if len(failing) > 0 && q.rng.IntN(4) == 0 {
		// An ERROR period is rare and short-lived (until its retries end):
		// while there is one, the operations that collect it (§8 pay now,
		// batch collection) get a larger share, so a run of 24 sequences
		// exercises them.
		base = []string{"paynow", "batch"}[q.rng.IntN(2)]
	}
	kind := base
	switch {
	case base == "pause" && m.Rule().Term == oracle.Yearly: // the term may have changed since the create
		kind = "pause-yearly"
	case base == "amount" && len(failing) > 0:
		kind = "amount-while-failing"
	case base == "waive" && len(failing) > 0:
		kind = "waive-failed"
	case base == "waive":
		kind = "waive-next"
	case base == "move" && nextIdx >= 0 && slices.ContainsFunc(m.Reminders(), func(r oracle.Reminder) bool {
		return r.Period == periods[nextIdx].Scheduled && r.Sent != oracle.NoDate
	}):
		kind = "move-announced"
	case base == "rule":
		for _, p := range periods {
			if len(p.Attempts) > 0 || (p.Status != oracle.Scheduled && p.Status != oracle.Paused) {
				kind = map[bool]string{true: "rule", false: "rule-after-waiver"}[p.Charged()]
			}
		}
	}
	termChange := base == "rule" && q.rng.IntN(3) == 0
	if termChange {
		kind = "rule-term"
	}
	if _, out := oracleExcluded[kind]; out {
		return
	}
	if _, out := oracleExcluded[base]; out {
		return
	}
	var ch billing.Change
	var apply func() error
	desc := kind
	switch base {
	case "pause":
		// A moved next period: whether its scheduled or its charge date
		// "passes" is beyond §8: not generated.
		if !calm || len(scheduled) == 0 || scheduled[0].Charge != scheduled[0].Scheduled {
			return
		}
		n := 1 + q.rng.IntN(3)
		if m.Rule().Term == oracle.Yearly {
			// Within 12 months or not is the period's (charge) date; a
			// moved one straddles the two readings: not generated.
			n = 12
		}
		ch.Action, ch.Months, desc = "pause", n, fmt.Sprintf("pause %d", n)
		apply = func() error { return m.Pause(od, n) }
	case "resume":
		if !slices.ContainsFunc(paused, func(p *oracle.Period) bool { return p.Charge > od }) {
			return
		}
		ch.Action = "resume"
		apply = func() error { return m.Resume(od) }
	case "amount":
		amount := int64(100 + q.rng.IntN(9900))
		ch.Amount, desc = &amount, fmt.Sprintf("amount %d", amount)
		apply = func() error { return m.ChangeAmount(od, amount) }
	case "rule":
		if !calm {
			return
		}
		r := m.Rule()
		day, week, term := 0, 0, r.Term
		if termChange {
			term = map[oracle.Term]oracle.Term{oracle.Monthly: oracle.Yearly, oracle.Yearly: oracle.Monthly}[r.Term]
			t := map[oracle.Term]dates.Term{oracle.Monthly: dates.Monthly, oracle.Yearly: dates.Yearly}[term]
			ch.Term = &t
		}
		// Friday billing to YEARLY: on a week (refused: Friday billing is
		// monthly) or, half the time, on a day.
		if r.Week != 0 && !(termChange && q.rng.IntN(2) == 0) {
			week = 1 + q.rng.IntN(5)
			ch.BillingWeek, desc = &week, fmt.Sprintf("billing_week %d", week)
		} else {
			day = 1 + q.rng.IntN(31)
			if q.rng.IntN(2) == 0 {
				day = 28 + q.rng.IntN(4)
			}
			ch.PaymentDay, desc = &day, fmt.Sprintf("payment_day %d", day)
		}
		if ch.Term != nil {
			desc = fmt.Sprintf("term %s %s", *ch.Term, desc)
		}
		if day == r.Day && week == r.Week && !termChange {
			return
		}
		apply = func() error { return m.ChangeRuleTo(od, term, day, week) }
	case "move":
		if !calm || nextIdx < 0 {
			return
		}
		p := periods[nextIdx]
		lo, hi := od, p.Scheduled+60
		if nextIdx > 0 {
			lo = max(lo, periods[nextIdx-1].Scheduled)
		}
		if nextIdx+1 < len(periods) {
			hi = periods[nextIdx+1].Scheduled
		}
		if hi-lo < 3 {
			return
		}
		to := lo + 1 + oracle.Date(q.rng.IntN(int(hi-lo-1)))
		if to == p.Charge || slices.Contains(m.Dropped, to) || slices.ContainsFunc(periods, func(x *oracle.Period) bool { return x.Charge == to || x.Scheduled == to }) {
			return
		}
		ch.NextPaymentDate = dates.MustParse(to.String())
		desc = fmt.Sprintf("move %s to %s", p.Scheduled, to)
		apply = func() error { return m.Move(od, p.Scheduled, to) }
	case "cancel":
		ch.Action = "cancel"
		apply = func() error { return m.Cancel(od) }
	case "waive":
		var p *oracle.Period
		switch {
		case len(failing) > 0:
			p = failing[0]
		case len(scheduled) > 0 && len(paused) == 0 && !slices.ContainsFunc(periods, func(x *oracle.Period) bool {
			return x.Status == oracle.Waived && x.Charge > od
		}):
			// The next period; one waived ahead at a time (a rule change
			// after several far-off waivers is beyond what §8 says).
			p = scheduled[0]
		default:
			return
		}
		ch.Action, ch.BillingDate = "waive", dates.MustParse(p.Scheduled.String())
		desc = fmt.Sprintf("waive %s", p.Scheduled)
		apply = func() error { return m.Waive(od, p.Scheduled) }
	case "paynow":
		if len(failing) == 0 {
			return
		}
		w.payNow(q, day)
		return
	case "plan":
		w.operatePlan(q, day, false)
		return
	case "batch":
		oldest := oracle.NoDate
		if len(failing) > 0 {
			oldest = failing[0].Charge
		}
		w.batch(q, day, oldest)
		return
	case "payment-method":
		// §8: every period not yet charged uses it, and the ERROR ones
		// (hard-declined included) are due at the next collection run.
		pm := fmt.Sprintf("pm_oracle%04d", q.rng.IntN(10000))
		ch.PaymentMethod, desc = &pm, "payment_method "+pm
		if len(failing) > 0 {
			desc += fmt.Sprintf(" (%d ERROR)", len(failing))
		}
		apply = func() error { return m.ChangePaymentMethod(od) }
	}
	refused := apply()
	q.logf(day, "%s%s", desc, map[bool]string{true: " (refused by the rules)"}[refused != nil])
	q.touched = true
	// No lock is held now (the day before ended with a clean collection),
	// so ErrLocked is a discrepancy too.
	_, err := w.e.Service.UpdateSubscription(context.Background(), q.account, q.subID, ch)
	if refused != nil {
		// Bad input: a clear error, and nothing changes (the checks of the
		// day hold the state against the unchanged model).
		if !errors.Is(err, apperr.ErrInvalid) {
			w.fail(q, day, "%s: the rules refuse it (%v), the service answered %v", desc, refused, err)
		}
		w.stat("op:" + kind + ":refused")
		return
	}
	if err != nil {
		w.fail(q, day, "%s refused, though docs/design.md §8 allows it: %v", desc, err)
		return
	}
	w.stat("op:" + base)
	if kind != base {
		w.stat("op:" + kind)
	}
}

// reactivate starts a cancelled subscription again, with a new amount half
// the time; the operation on an active one is refused (409), changing
// nothing.
func (w *oracleWorld) reactivate(q *oracleSeq, day dates.Date) {
	od := oracle.MustParse(day.String())
	var r billing.Reactivation
	var amount int64
	if q.rng.IntN(2) == 0 {
		amount = int64(100 + q.rng.IntN(9900))
		r.Amount = &amount
	}
	var sku string
	if _, out := oracleExcluded["reactivate-plan"]; !out && amount > 0 && q.rng.IntN(2) == 0 {
		// A plan change made with the reactivation: the reactivation, then
		// the plan change, at once (§4 reactivate's sku with its amount).
		sku = oraclePlans[q.rng.IntN(len(oraclePlans))]
		r.SKU, r.Amount = &sku, &amount
		if err := q.model.Reactivate(od, 0); err != nil {
			w.fail(q, day, "reactivate: the model refused a cancelled subscription: %v", err)
			return
		}
		w.must(q.model.ChangePlan(od, sku, amount))
	} else if err := q.model.Reactivate(od, amount); err != nil {
		w.fail(q, day, "reactivate: the model refused a cancelled subscription: %v", err)
		return
	}
	q.logf(day, "reactivate (amount %d, sku %q)", amount, sku)
	q.touched = true
	if _, err := w.e.Service.Reactivate(context.Background(), q.account, q.subID, r); err != nil {
		w.fail(q, day, "reactivate refused, though docs/design.md §8 allows it: %v", err)
		return
	}
	if _, err := w.e.Service.Reactivate(context.Background(), q.account, q.subID, r); !errors.Is(err, billing.ErrNotCancelled) {
		w.fail(q, day, "a second reactivate: want ErrNotCancelled, got %v", err)
		return
	}
	w.stat("op:reactivate")
	if sku != "" {
		w.stat("op:reactivate-plan")
	}
}

// payNow charges the oldest ERROR period at once (docs/design.md §4 "pay now").
func (w *oracleWorld) payNow(q *oracleSeq, day dates.Date) {
	due, err := q.model.PayNow(oracle.MustParse(day.String()))
	if err != nil {
		return
	}
	payer, ok := any(w.e.Service).(interface {
		PayNow(ctx context.Context, account, subID string) (billing.Subscription, error)
	})
	if !ok {
		w.fail(q, day, "pay now: the Service has no PayNow(ctx, account, subscription) (docs/design.md §4 POST …/pay)")
		return
	}
	q.logf(day, "pay now (%s)", due.Period)
	q.touched = true
	q.expectPays = append(q.expectPays, due)
	_, err = payer.PayNow(context.Background(), q.account, q.subID)
	if err != nil {
		w.downMu.Lock()
		lost := q.in.StripeAccount != "" && w.down[q.in.StripeAccount] == day
		w.downMu.Unlock()
		if !lost {
			w.fail(q, day, "pay now refused with an ERROR period %s: %v", due.Period, err)
			return
		}
	}
	w.stat("op:paynow")
}

// collect runs the day's collection, crashed at a random point now and
// then, and reruns it until it leaves nothing behind (but an outage).
func (w *oracleWorld) collect(day dates.Date) {
	ctx := context.Background()
	var rep *billing.Report
	var err error
	w.downMu.Lock()
	w.collecting = true
	// An outage met by a pay now (the operations, before the jobs) ends
	// before the day's collection: the model resolves that unknown outcome
	// in it (§8: before anything else happens to the period), so Stripe must
	// answer then.
	for acct, d := range w.down {
		if d == day && w.downInJob[acct] != day {
			delete(w.down, acct)
		}
	}
	w.downMu.Unlock()
	defer func() {
		w.downMu.Lock()
		w.collecting = false
		w.downMu.Unlock()
	}()
	// Rerun until the day is done: each rerun follows a crash, whose lock
	// is let run out first (expireLocks); a day's crashes are finite (one
	// per account, day and step), so only a run that can never finish
	// reaches the bound. An outage of the day leaves unknown outcomes for
	// good: then four runs are enough.
	deadline := time.Now().Add(2 * time.Minute)
	for run := 0; ; run++ {
		if run > 0 {
			w.expireLocks(ctx) // the crashed run's lease runs out
		}
		rep, err = w.e.Service.Collect(ctx, day)
		if err == nil && rep.OK() {
			break
		}
		w.downMu.Lock()
		outage := false
		for _, d := range w.downInJob {
			outage = outage || d == day
		}
		w.downMu.Unlock()
		if (outage && run >= 3) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || !rep.OK() {
		w.expireLocks(ctx) // a crash in the last run: its lease runs out before the feed and the next day
	}
	w.downMu.Lock()
	var down []string
	for acct, d := range w.downInJob {
		if d == day {
			down = append(down, acct)
		}
	}
	w.downMu.Unlock()
	for _, acct := range down {
		q := w.byStripe[acct]
		q.touched = true
		if err == nil && rep.OK() {
			w.fail(q, day, "an attempt's outcome is unknown (Stripe answered 500) but the collection reports OK: %s (§8 Failures: the run that found it exits non-zero)", reportLine(rep))
		}
	}
	if len(down) == 0 && (err != nil || !rep.OK()) {
		for _, q := range w.seqs {
			if q.model != nil && q.failed == "" {
				q.touched = true
			}
		}
		w.t.Logf("universe %d: collect %s still incomplete after reruns without an outage: %v %s; service log:\n%s", w.u, day, err, reportLine(rep), w.logs.tail(2000))
	}
}

// expireLocks lets the lease of every lock left in the table run out: the
// lock client watches each one's record version, then the lease clock moves
// one lease on, so the next run takes them over as it would a dead holder's
// after a lease (internal/lock). Nothing holds a lock between two runs of
// the day's collection, so every lock left is a crashed run's.
func (w *oracleWorld) expireLocks(ctx context.Context) {
	out, err := w.e.DB.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(w.e.Locks), ConsistentRead: aws.Bool(true)})
	w.must(err)
	if len(out.Items) == 0 {
		return
	}
	for _, item := range out.Items {
		var rec struct {
			Key string `dynamodbav:"PartitionKey"`
		}
		w.must(attributevalue.UnmarshalMap(item, &rec))
		l, err := w.e.Lock.Acquire(ctx, rec.Key, true)
		switch {
		case err == nil: // released meanwhile, or already watched for a lease
			w.must(l.Release(ctx))
		case !errors.Is(err, lock.ErrAlreadyLocked):
			w.must(err)
		}
	}
	w.lease.Advance(oracleLease + time.Millisecond)
}

// oracleLog is a log sink safe for concurrent writers.
type oracleLog struct {
	mu sync.Mutex
	b  []byte
}

func (b *oracleLog) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b = append(b.b, p...)
	if len(b.b) > 1<<20 {
		b.b = append([]byte(nil), b.b[len(b.b)-1<<19:]...)
	}
	return len(p), nil
}

// tail is the last n bytes written.
func (b *oracleLog) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.b[max(0, len(b.b)-n):])
}

func reportLine(r *billing.Report) string {
	if r == nil {
		return "no report"
	}
	return fmt.Sprintf("entries %d succeeded %d declined %d processing %d locked %d unknown %d resolved %d unresolved %d errors %d",
		r.Entries, r.Succeeded, r.Declined, r.Processing, r.Locked, r.Unknown, r.Resolved, r.Unresolved, r.Errors)
}

// attribute matches the PaymentIntents made since the last call with the
// charges the model expects, and tells the model their outcomes.
func (w *oracleWorld) attribute(day dates.Date, phase string) {
	pis := w.e.Stripe.PIs()
	fresh := pis[w.seenPIs:]
	w.seenPIs = len(pis)
	byQ := map[*oracleSeq][]stripetest.PI{}
	for _, pi := range fresh {
		q := w.byAcct[pi.Metadata[billing.MetaAccount]]
		if q == nil {
			continue
		}
		byQ[q] = append(byQ[q], pi)
	}
	for _, q := range w.seqs {
		want := q.expectPays
		q.expectPays = nil
		if q.failed == "" && q.model != nil {
			w.attributeSeq(q, day, phase, want, byQ[q])
		}
	}
}

func (w *oracleWorld) attributeSeq(q *oracleSeq, day dates.Date, phase string, want []oracle.Due, got []stripetest.PI) {
	od := oracle.MustParse(day.String())
	{
		var gotDesc, wantDesc []string
		for _, due := range want {
			wantDesc = append(wantDesc, fmt.Sprintf("%s:%d:%s", due.Period, due.Amount, due.Plan))
		}
		for _, pi := range got {
			per, err := oracle.Parse(pi.Metadata[billing.MetaDate])
			p := q.model.Period(per)
			if err != nil || p == nil {
				w.fail(q, day, "%s: PaymentIntent %s for %q, not a period of the model (%v)", phase, pi.ID, pi.Metadata[billing.MetaDate], err)
				return
			}
			gotDesc = append(gotDesc, fmt.Sprintf("%s:%d:%s", p.Scheduled, pi.Amount, pi.Metadata[billing.MetaSKU]))
		}
		sort.Strings(gotDesc)
		sort.Strings(wantDesc)
		if !slices.Equal(gotDesc, wantDesc) {
			w.fail(q, day, "%s charged %v (period:amount:plan), the rules want %v", phase, gotDesc, wantDesc)
			return
		}
		for _, pi := range got {
			q.touched = true
			q.pis = append(q.pis, pi.ID)
			per, _ := oracle.Parse(pi.Metadata[billing.MetaDate])
			o := oracle.Succeeded
			switch pi.Status {
			case "requires_payment_method":
				o = oracle.Declined
				code := pi.DeclineCode // Stripe's decline_code, else its error code (expired_card, …)
				if code == "" {
					code = pi.ErrorCode
				}
				if slices.Contains(config.DefaultBillingHardDeclineCodes(), code) {
					o = oracle.HardDeclined
				}
			case "processing":
				o = oracle.Processing
			}
			w.downMu.Lock()
			unknown := pi.Account != "" && w.down[pi.Account] == day && !w.lost[pi.ID]
			if unknown {
				w.lost[pi.ID] = true
			}
			w.downMu.Unlock()
			w.must(q.model.Attempted(od, per, pi.Amount, pi.ID, o, unknown))
			if unknown {
				w.stat("charge:unknown")
			} else {
				w.stat("charge:" + map[oracle.Outcome]string{oracle.Succeeded: "succeeded", oracle.Declined: "declined", oracle.Processing: "processing",
					oracle.HardDeclined: "declined-hard"}[o])
			}
			q.logf(day, "%s: charged %s %d → %s%s", phase, per, pi.Amount, pi.Status, map[bool]string{true: " (answer lost: 500)"}[unknown])
			// What Stripe does later with this PaymentIntent is drawn from
			// the attempt's name, not from a shared generator: PaymentIntents
			// of one day are made by concurrent workers in any order, and a
			// seed must replay the same run.
			pick := func(what string, n int) int {
				return int(unit(w.seed, attemptName(pi.IdempotencyKey, pi.Metadata), what) * float64(n))
			}
			switch {
			case o == oracle.Processing:
				w.later(day.AddDays(2+pick("settle-day", 3)), fmt.Sprintf("settle:%s:%v", pi.ID, pick("settle-ok", 100) < 80))
			case o == oracle.Succeeded && pick("refund", 100) < 4:
				w.later(day.AddDays(1+pick("refund-day", 10)), "refund:"+pi.ID)
			case o == oracle.Succeeded && !unknown && pick("dup", 100) < 5:
				w.later(day, "dup:"+pi.ID)
			}
		}
	}
}

func (w *oracleWorld) later(d dates.Date, what string) { w.pending[d] = append(w.pending[d], what) }

// reminders holds the reminders sent today against the model.
func (w *oracleWorld) reminders(day dates.Date) {
	acts := w.e.Notifier.Actions()
	fresh := acts[w.seenActs:]
	w.seenActs = len(acts)
	od := oracle.MustParse(day.String())
	for _, a := range fresh {
		if a.Type != billing.ActionReminderDue {
			continue
		}
		q := w.byAcct[a.Account]
		if q == nil || q.failed != "" {
			continue
		}
		w.stat("reminder")
		sent, err := time.Parse(time.RFC3339, a.Created)
		w.must(err)
		pay, err := oracle.Parse(a.BillingDate)
		w.must(err)
		q.logf(day, "reminder for %s", pay)
		if err := q.model.Sent(oracle.Of(sent), pay); err != nil {
			w.fail(q, day, "reminder for %s sent on %s: %v (§8 Reminders; the model wants %v)", pay, oracle.Of(sent), err, pending(q.model))
			return
		}
	}
	for _, q := range w.seqs {
		if q.model == nil || q.failed != "" {
			continue
		}
		if miss := q.model.Missing(od); len(miss) > 0 {
			w.fail(q, day, "reminders not sent: %v (§8 Reminders)", miss)
		}
	}
}

func pending(m *oracle.Sub) []string {
	var out []string
	for _, r := range m.Reminders() {
		if r.Sent == oracle.NoDate {
			out = append(out, fmt.Sprintf("%s in [%s,%s]", r.PayDate, r.From, r.To))
		}
	}
	return out
}

// webhooks delivers what Stripe sends today (settlements, refunds,
// duplicates) through the real handler and drains the billing feed.
// webhooksNow delivers at once the day's pending webhooks whose item
// starts with prefix; the others stay for webhooks.
func (w *oracleWorld) webhooksNow(day dates.Date, prefix string) {
	var now, rest []string
	for _, it := range w.pending[day] {
		if strings.HasPrefix(it, prefix) {
			now = append(now, it)
		} else {
			rest = append(rest, it)
		}
	}
	if len(now) == 0 {
		return
	}
	w.pending[day] = now
	w.webhooks(day)
	w.pending[day] = append(rest, w.pending[day]...)
}

func (w *oracleWorld) webhooks(day dates.Date) {
	items := w.pending[day]
	delete(w.pending, day)
	if len(items) == 0 {
		return
	}
	od := oracle.MustParse(day.String())
	for _, it := range items {
		parts := strings.Split(it, ":")
		pi, ok := w.e.Stripe.Get(parts[1])
		if !ok {
			w.must(fmt.Errorf("no PaymentIntent %s", parts[1]))
		}
		q := w.byAcct[pi.Metadata[billing.MetaAccount]]
		var payload []byte
		switch parts[0] {
		case "settle":
			good := parts[2] == "true"
			pi, err := w.e.Stripe.Settle(pi.ID, good)
			w.must(err)
			typ := "payment_intent.payment_failed"
			if good {
				typ = "payment_intent.succeeded"
				w.stat("ach:settled")
				if name := attemptName(pi.IdempotencyKey, pi.Metadata); unit(w.seed, name, "ach-refund") < 0.05 {
					w.later(day.AddDays(1+int(unit(w.seed, name, "ach-refund-day")*5)), "refund:"+pi.ID)
				}
			} else {
				w.stat("ach:failed")
			}
			payload = w.e.Stripe.Event(pi, typ, w.e.Clock.Now())
			if q.failed == "" {
				q.logf(day, "webhook %s %s", typ, pi.ID)
				w.must(q.model.Settled(od, pi.ID, good))
			}
		case "refund":
			pi, err := w.e.Stripe.Refund(pi.ID)
			w.must(err)
			w.stat("refund")
			payload = w.e.Stripe.Event(pi, "charge.refunded", w.e.Clock.Now())
			if q.failed == "" {
				q.logf(day, "webhook charge.refunded %s", pi.ID)
				if err := q.model.Refunded(od, pi.ID); err != nil {
					w.fail(q, day, "harness: %v", err)
				}
			}
		case "dup":
			payload = w.e.Stripe.Event(pi, "payment_intent.succeeded", w.e.Clock.Now())
			if q.failed == "" {
				q.logf(day, "webhook payment_intent.succeeded %s (again)", pi.ID)
			}
		case "paid":
			payload = w.e.Stripe.Event(pi, "payment_intent.succeeded", w.e.Clock.Now())
			if q.failed == "" {
				q.logf(day, "webhook payment_intent.succeeded %s (paid by the customer)", pi.ID)
			}
		}
		q.touched = true
		ev, err := stripeevent.Parse(payload)
		w.must(err)
		_, err = w.handler.Handle(context.Background(), ev, payload, stripeevent.SourceWebhook)
		w.must(err)
	}
	// Drain the feed before the day goes on: Stripe's webhooks come before
	// the next day's jobs. A delivery can wait (a refund before its
	// success, retried), so this waits for the condition, not for a time:
	// on a loaded machine any fixed wait was too short, the checks then saw
	// a day without its webhooks, and the test failed at random.
	ctx := context.Background()
	deadline := time.Now().Add(feedDrainLimit)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		_, err := w.worker.DeliverDue(ctx)
		w.must(err)
		n, err := outbox.Pending(ctx, w.worker.Pool, billing.FeedTopic)
		w.must(err)
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			w.must(fmt.Errorf("universe %d: the billing feed still has %d message(s) on %s after %s: a delivery fails for good", w.u, n, day, feedDrainLimit))
		}
		time.Sleep(wait)
	}
}

// feedDrainLimit bounds the wait for the feed. No lock is held while it
// drains, so a delivery waits only for a refund's success or a slow box;
// only a delivery that can never succeed reaches it.
const feedDrainLimit = 2 * time.Minute

// check holds q's stored state against the model: no period charged
// twice, receipts, period statuses, and an append-only history that
// records each period's way.
func (w *oracleWorld) check(q *oracleSeq, day dates.Date) {
	ctx := context.Background()
	od := oracle.MustParse(day.String())
	m := q.model
	// Successful charges, per period, at Stripe.
	paid := map[string][]string{}
	dupRefunded := map[string]bool{} // refunded by the service (docs/design.md §8), not by the harness
	var gotDup []string
	for _, r := range w.e.Stripe.Refunds() {
		dupRefunded[r.PaymentIntent] = true
		if slices.Contains(q.pis, r.PaymentIntent) {
			gotDup = append(gotDup, r.PaymentIntent)
		}
	}
	if wantDup := m.DuplicateRefunds(); !slices.Equal(gotDup, wantDup) {
		w.fail(q, day, "the service refunded %v as duplicates, the rules want %v (§8 One successful charge per period)", gotDup, wantDup)
		return
	}
	for _, id := range q.pis {
		if pi, _ := w.e.Stripe.Get(id); pi.Status == "succeeded" && !dupRefunded[id] {
			per := pi.Metadata[billing.MetaDate]
			if d, err := oracle.Parse(per); err == nil && m.Period(d) != nil {
				per = m.Period(d).Scheduled.String() // a moved period's charges, whatever date they carry
			}
			paid[per] = append(paid[per], pi.ID)
		}
	}
	for per, ids := range paid {
		if len(ids) > 1 {
			w.fail(q, day, "period %s has %d successful charges %v (§8 Periods)", per, len(ids), ids)
			return
		}
	}
	unresolved := map[oracle.Date]bool{}
	for _, p := range m.Periods() {
		for _, a := range p.Attempts {
			if a.Unresolved {
				unresolved[p.Scheduled] = true
			}
		}
	}

	// Receipts.
	var gotR, wantR []string
	for cursor := ""; ; {
		page, err := w.e.Store.ListReceipts(ctx, q.account, w.e.Clock.Now(), w.cfg.ReceiptTTL, 1000, cursor)
		w.must(err)
		for _, r := range page.Items {
			per := r.BillingDate.String()
			if p := m.Period(oracle.MustParse(per)); p != nil {
				per = p.Scheduled.String()
			}
			gotR = append(gotR, fmt.Sprintf("%s %s %d %s processed %s", per, r.PaymentIntent, r.Amount, r.SKU, r.ProcessedDate))
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	for _, r := range m.Receipts() {
		wantR = append(wantR, fmt.Sprintf("%s %s %d %s processed %s", r.Period, r.PI, r.Amount, r.Plan, r.Processed))
	}
	sort.Strings(gotR)
	sort.Strings(wantR)
	if !slices.Equal(gotR, wantR) {
		w.fail(q, day, "receipts %v, the rules want %v", gotR, wantR)
		return
	}

	// The plan and pending_downgrade (§4, §8 "Plan change").
	sub, err := w.e.Service.GetSubscription(ctx, q.account, q.subID)
	w.must(err)
	if pending := sub.PendingDowngrade && sub.Status != billing.SubCancelled; sub.SKU != m.Plan() || pending != m.PendingDowngrade() {
		w.fail(q, day, "subscription sells %q (pending_downgrade %v), the rules want %q (%v)", sub.SKU, pending, m.Plan(), m.PendingDowngrade())
		return
	}

	// Period statuses.
	recs, err := w.e.Store.ListPeriods(ctx, q.account, q.subID)
	w.must(err)
	status := map[oracle.Date]billing.Status{}
	for _, r := range recs {
		bd := oracle.MustParse(r.BillingDate.String())
		p := m.Period(bd)
		if p == nil {
			if !slices.Contains(m.Dropped, bd) {
				w.fail(q, day, "period record %s (%s) is no period of the rules", bd, r.Status)
				return
			}
			if r.Status != billing.Cancelled {
				w.fail(q, day, "period %s replaced by a rule change is %s, want CANCELLED or gone", bd, r.Status)
				return
			}
			continue
		}
		if unresolved[p.Scheduled] {
			continue
		}
		status[p.Scheduled] = r.Status
		if r.Status == billing.Cancelled && r.Attempts == 0 && p.Status == oracle.Scheduled && len(p.Attempts) == 0 &&
			p.Charge > od && slices.Contains(m.Dropped, p.Scheduled) {
			// A period a change (a reactivation, a rule change) ended
			// ahead of its date and the new schedule has again: the
			// service schedules its record again when its cursor reaches
			// it (advance), before its charge date.
			continue
		}
		if string(r.Status) != string(p.Status) {
			w.fail(q, day, "period %s (charge date %s) is %s, the rules want %s", p.Scheduled, p.Charge, r.Status, p.Status)
			return
		}
	}
	for _, p := range m.Periods() {
		if p.Charge <= od && (p.Status != oracle.Cancelled || len(p.Attempts) > 0) && !unresolved[p.Scheduled] {
			if _, ok := status[p.Scheduled]; !ok {
				w.fail(q, day, "period %s (charge date %s, %s by the rules) has no record", p.Scheduled, p.Charge, p.Status)
				return
			}
		}
	}

	// History: append-only, and each period's way as the rules have it.
	h, err := w.e.Store.AllHistory(ctx, q.account, q.subID)
	w.must(err)
	key := func(e billing.HistoryEntry) string {
		return fmt.Sprintf("%s#%d %s %s %s", e.BillingDate, e.Version, e.Status, e.TransactionID, e.UpdatedEvent)
	}
	now := map[string]bool{}
	for _, e := range h {
		now[key(e)] = true
	}
	for _, e := range q.history {
		if !now[key(e)] {
			w.fail(q, day, "history entry %q was replaced or deleted (§8 History is append-only)", key(e))
			return
		}
	}
	q.history = h
	trail := map[oracle.Date][]string{}
	for _, e := range h {
		bd := oracle.MustParse(e.BillingDate.String())
		if p := m.Period(bd); p != nil {
			bd = p.Scheduled
		}
		trail[bd] = appendCollapsed(trail[bd], string(e.Status))
	}
	for _, p := range m.Periods() {
		got, ok := status[p.Scheduled]
		if !ok || slices.Contains(m.Dropped, p.Scheduled) {
			continue
		}
		tr := trail[p.Scheduled]
		if len(tr) == 0 || tr[len(tr)-1] != string(got) {
			w.fail(q, day, "period %s is %s but its history ends %v", p.Scheduled, got, tr)
			return
		}
		var want []string
		for _, s := range p.Trail {
			want = appendCollapsed(want, string(s))
		}
		if !slices.Equal(outcomes(tr), outcomes(want)) {
			w.fail(q, day, "period %s went %v by its history, the rules want %v", p.Scheduled, tr, want)
			return
		}
	}
}

func appendCollapsed(s []string, v string) []string {
	if len(s) > 0 && s[len(s)-1] == v {
		return s
	}
	return append(s, v)
}

// outcomes keeps the statuses that say what happened to a period (not
// SCHEDULED/PAUSED, which a service may record more or less often).
func outcomes(trail []string) []string {
	var out []string
	for _, s := range trail {
		if s != string(oracle.Scheduled) && s != string(oracle.Paused) {
			out = appendCollapsed(out, s)
		}
	}
	return out
}

// customerPays: now and then the customer pays one of the sequence's
// declined PaymentIntents on-session, at the fake Stripe, as docs/design.md §8 lets
// a customer do at any time ("One successful charge per period, also when
// the customer pays an old PaymentIntent"). Stripe must accept exactly the
// payments the rules leave payable (the service cancelled the others), and
// the webhook of an accepted one follows the same day. Drawn from the seed
// by account and day, so the other draws of a sequence stay as they were.
func (w *oracleWorld) customerPays(q *oracleSeq, day dates.Date) {
	if _, out := oracleExcluded["customer-pays"]; out || unit(w.seed, q.account, day.String(), "customer-pays") >= 0.04 {
		return
	}
	unresolved := map[string]bool{}
	for _, p := range q.model.Periods() {
		for _, a := range p.Attempts {
			if a.Unresolved {
				unresolved[a.PI] = true
			}
		}
	}
	var declined []stripetest.PI
	for _, id := range q.pis {
		if pi, _ := w.e.Stripe.Get(id); (pi.Status == "requires_payment_method" || pi.Status == "canceled") && !unresolved[id] {
			declined = append(declined, pi)
		}
	}
	w.downMu.Lock()
	down := w.down[q.in.StripeAccount] == day
	w.downMu.Unlock()
	if len(declined) == 0 || down {
		return
	}
	pi := declined[int(unit(w.seed, q.account, day.String(), "customer-pick")*float64(len(declined)))]
	status, body, err := w.e.Stripe.ConfirmAsCustomer(pi.Account, pi.ID)
	w.must(err)
	res, refused := q.model.CustomerPays(oracle.MustParse(day.String()), pi.ID)
	q.touched = true
	q.logf(day, "the customer pays %s (%s): Stripe answers %d", pi.ID, pi.Metadata[billing.MetaDate], status)
	switch {
	case (status == http.StatusOK) != (refused == nil):
		w.fail(q, day, "the customer's payment of %s: Stripe answered %d %s, the rules say %v (§8 One successful charge per period)",
			pi.ID, status, body, refused)
	case status == http.StatusOK:
		w.stat("customer:paid")
		if res == oracle.PayRefunded {
			w.stat("customer:refunded")
		}
		w.later(day, "paid:"+pi.ID)
	default:
		w.stat("customer:refused")
	}
}
