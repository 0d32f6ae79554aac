package billing_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/actions"
	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/feedqueue"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/handler"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// sim drives the billing core through simulated days.
type sim struct {
	t       *testing.T
	e       *billingtest.Env
	rng     *rand.Rand
	rngMu   sync.Mutex
	handler *handler.Handler
	worker  *outbox.Worker

	subs []billing.Subscription
	// webhooks due by simulated date.
	pending map[dates.Date][][]byte
	// violations seen at charge time.
	mu         sync.Mutex
	violations []string
	warnings   logTail
	crash      struct {
		sync.Mutex
		step      string
		countdown int
	}
	statsMu sync.Mutex
	stats   map[string]int
	// racing: a batch collection and a pay now run beside the collection
	// (sim_batch_test.go).
	racing atomic.Bool
}

func (s *sim) stat(k string, n int) {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	s.stats[k] += n
}

func (s *sim) intn(n int) int {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.IntN(n)
}

func (s *sim) chance(p float64) bool {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.Float64() < p
}

func (s *sim) violate(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

// hook is the injected crash between the steps of a collection.
func (s *sim) hook(step string, _ billing.Period) error {
	s.crash.Lock()
	defer s.crash.Unlock()
	if s.crash.step != step {
		return nil
	}
	if s.crash.countdown > 0 {
		s.crash.countdown--
		return nil
	}
	s.crash.step = ""
	s.stat("crash:"+step, 1)
	return billing.ErrCrash
}

// decide is the fake Stripe's outcome for a new PaymentIntent, by the
// customer's class; it also checks, at the moment of the charge, that the
// charge is allowed: the subscription ACTIVE (or PAUSED for a retry), the
// period open and not stale.
func (s *sim) decide(p stripetest.PI) stripetest.Behavior {
	ctx := context.Background()
	acc, subID, date := p.Metadata[billing.MetaAccount], p.Metadata[billing.MetaSubscription], p.Metadata[billing.MetaDate]
	sub, per, found, err := s.e.Store.GetSubscriptionWithPeriod(ctx, billing.IndexEntry{PK: "ACC#" + acc,
		SK: "SUB#" + subID + "#SKU#" + p.Metadata[billing.MetaSKU], Date: dates.MustParse(date)})
	// A pause is about periods not yet charged: the retries of a failed one
	// go on while the subscription is PAUSED (docs/design.md §8).
	if err != nil || !(sub.Status == billing.SubActive || (sub.Status == billing.SubPaused && per.Status == billing.Error)) {
		s.violate("charge %s for %s/%s while the subscription is %s (%v)", p.ID, subID, date, sub.Status, err)
	}
	if !found || (per.Status != billing.Scheduled && per.Status != billing.Error) || per.InFlightKey != p.IdempotencyKey {
		s.violate("charge %s for period %s/%s in status %s (in flight %q, key %q, %v)", p.ID, subID, date, per.Status, per.InFlightKey, p.IdempotencyKey, err)
	}
	// On the stale date itself a pay now or a batch made before the day's
	// job marks the period may still collect it (the rules run the
	// operations of a day before its jobs); the job itself never does.
	if days := s.e.Clock.Today().DaysSince(dates.MustParse(date)); days >= 30 && !(days == 30 && s.racing.Load()) {
		s.violate("charge %s for stale period %s/%s on %s", p.ID, subID, date, s.e.Clock.Today())
	}
	class := strings.Split(p.Customer, "_")[1]
	switch class {
	case "flaky":
		if s.chance(0.35) {
			return stripetest.Decline
		}
	case "dead":
		return stripetest.Decline
	case "ach":
		return stripetest.Process
	case "lost":
		if s.chance(0.15) {
			return stripetest.Lost
		}
	}
	return stripetest.Succeed
}

func (s *sim) later(d dates.Date, payload []byte) {
	s.pending[d] = append(s.pending[d], payload)
}

// deliver sends an event through the one handler (sometimes twice, as
// Stripe does) and drains the billing feed.
func (s *sim) deliver(payload []byte) {
	ev, err := stripeevent.Parse(payload)
	require.NoError(s.t, err)
	times := 1
	if s.chance(0.2) {
		times = 2
	}
	for range times {
		_, err := s.handler.Handle(context.Background(), ev, payload, stripeevent.SourceWebhook)
		require.NoError(s.t, err)
	}
	s.stat("webhooks", 1)
}

func (s *sim) drain() {
	ctx := context.Background()
	for range 50 {
		if _, err := s.worker.DeliverDue(ctx); err != nil {
			s.t.Fatalf("deliver billing feed: %v", err)
		}
		n, err := outbox.Pending(ctx, s.worker.Pool, billing.FeedTopic)
		require.NoError(s.t, err)
		if n == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond) // a dead lock's lease, an out-of-order refund
	}
}

func (s *sim) apiOp(day dates.Date) {
	ctx := context.Background()
	sub := s.subs[s.intn(len(s.subs))]
	cur, err := s.e.Store.GetSubscription(ctx, sub.AccountID, sub.SubscriptionID)
	require.NoError(s.t, err)
	var ch billing.Change
	switch r := s.intn(100); {
	case r < 5:
		ch.Action = "cancel"
	case r < 35:
		ch.Action, ch.Months = "pause", 1+s.intn(3)
		if cur.Term == dates.Yearly {
			ch.Months = 12
		}
	case r < 55:
		ch.Action = "resume"
	case r < 62:
		amount := int64(500 + s.intn(5000))
		ch.Amount = &amount
	case r < 70:
		// A plan change (docs/design.md §8): the item moves to its SKU's key.
		amount, sku := int64(500+s.intn(5000)), fmt.Sprintf("plan-%d", s.intn(4))
		ch.Amount, ch.SKU = &amount, &sku
	case r < 85:
		day := 1 + s.intn(31)
		if cur.BillingWeek != 0 {
			week := 1 + s.intn(5)
			ch.BillingWeek = &week
		} else {
			ch.PaymentDay = &day
		}
	default:
		periods, err := s.e.Store.ListPeriods(ctx, cur.AccountID, cur.SubscriptionID)
		require.NoError(s.t, err)
		for _, p := range periods {
			if p.Status == billing.Error {
				ch.Action, ch.BillingDate = "waive", p.BillingDate
			}
		}
		if ch.Action == "" {
			return
		}
	}
	_, err = s.e.Service.UpdateSubscription(ctx, cur.AccountID, cur.SubscriptionID, ch)
	key := "api:" + ch.Action
	switch {
	case ch.SKU != nil:
		key = "api:plan"
	case ch.Action == "":
		key = "api:change"
	}
	switch {
	case err == nil:
		s.stat(key, 1)
	case errors.Is(err, apperr.ErrInvalid), errors.Is(err, billing.ErrLocked), errors.Is(err, billing.ErrConflict):
		s.stat(key+":refused", 1)
	default:
		s.t.Fatalf("%s on %s: %v", key, day, err)
	}
}

// collect runs the day's collection, killed at a random point now and
// then, and reruns it until it leaves nothing behind.
func (s *sim) collect(day dates.Date) {
	ctx := context.Background()
	switch r := s.intn(100); {
	case r < 4:
		s.crash.Lock()
		s.crash.step = []string{"claimed", "charged", "committed"}[s.intn(3)]
		s.crash.countdown = s.intn(8)
		s.crash.Unlock()
	case r < 8:
		cctx, cancel := context.WithTimeout(ctx, time.Duration(1+s.intn(30))*time.Millisecond)
		defer cancel()
		if _, err := s.e.Service.Collect(cctx, day); err != nil {
			s.stat("killed:context", 1)
		}
	case r < 10:
		var n atomic.Int32
		s.e.Notifier.Fail = func(actions.Action) error {
			if n.Add(1) == 1 {
				s.stat("killed:notifier", 1)
				return errors.New("postgres unavailable")
			}
			return nil
		}
		defer func() { s.e.Notifier.Fail = nil }()
	case r < 16:
		s.race(ctx, day)
	}
	for run := 0; ; run++ {
		rep, err := s.e.Service.Collect(ctx, day)
		if err == nil && rep.OK() {
			s.stat("succeeded", rep.Succeeded)
			s.stat("declined", rep.Declined)
			s.stat("processing", rep.Processing)
			return
		}
		if run > 4 {
			s.t.Fatalf("collect %s still incomplete after %d reruns: %v %+v\nlast warnings and errors:\n%s", day, run, err, rep, s.warnings.tail(30))
		}
		s.stat("reruns", 1)
		s.crash.Lock()
		s.crash.step = ""
		s.crash.Unlock()
	}
}

// TestSimulation runs the billing core through simulated months against a
// fake Stripe that declines some charges, settles bank debits days later by
// webhook, refunds some, and loses some answers; the collection job is
// killed at random points (injected crashes between its steps, cancelled
// contexts, a failing notifier) and rerun; API changes (pause, resume,
// cancel, amount and day changes, waivers) happen in between. The
// subscriptions are split over independent universes (own tables, own
// fake Stripe, own Postgres) that run in parallel: DynamoDB Local answers
// one request at a time per connection, so this is what keeps the run short.
func TestSimulation(t *testing.T) {
	t.Parallel()
	nSubs, months := envInt("BILLING_SIM_SUBS", 200), envInt("BILLING_SIM_MONTHS", 24)
	universes := envInt("BILLING_SIM_UNIVERSES", 4)
	seed := uint64(envInt("BILLING_SIM_SEED", 6))
	t.Logf("simulation: %d subscriptions in %d universes, %d months, seed %d", nSubs, universes, months, seed)
	var mu sync.Mutex
	total := map[billing.Status]int{}
	stats := map[string]int{}
	t.Run("universes", func(t *testing.T) {
		for u := range universes {
			t.Run(fmt.Sprintf("%d", u), func(t *testing.T) {
				t.Parallel()
				count, st := simulate(t, nSubs/universes, months, seed+uint64(u))
				mu.Lock()
				defer mu.Unlock()
				for k, v := range count {
					total[k] += v
				}
				for k, v := range st {
					stats[k] += v
				}
			})
		}
	})
	t.Logf("periods by status: %v", total)
	t.Logf("events: %v", stats)
	// The run exercised what it claims to.
	for _, st := range []billing.Status{billing.Completed, billing.Error, billing.Stale, billing.Refunded, billing.PausedSkipped,
		billing.Cancelled, billing.Waived} {
		assert.NotZero(t, total[st], "no period was %s", st)
	}
	for _, k := range []string{"reruns", "crash:claimed", "crash:charged", "crash:committed", "killed:context", "ach:settled", "ach:failed", "refunds",
		"race", "race:batch:charged", "race:paynow:charged"} {
		assert.NotZero(t, stats[k], "never happened: %s", k)
	}
}

func simulate(t *testing.T, nSubs, months int, seed uint64) (map[billing.Status]int, map[string]int) {
	start := time.Now()
	s := &sim{t: t, rng: rand.New(rand.NewPCG(seed, seed)), pending: map[dates.Date][][]byte{}, stats: map[string]int{}}
	cfg := billingtest.TestConfig()
	cfg.Shards = 2
	// A short lease lets a crashed run's lock be taken over quickly, but a
	// heartbeat must fit in it: at 150 ms a loaded 2-core machine (a
	// DynamoDB Local UpdateItem of 100 ms and more) lost locks on most days
	// and the run failed safe, charging nothing, until the reruns ran out.
	// A locked account waits just over one lease.
	const lease = 500 * time.Millisecond
	cfg.LockedRetryWait = lease + 10*time.Millisecond
	cfg.LookbackDays = 0
	// Warnings and errors are kept, so that a failed run says why.
	quiet := slog.New(slog.NewTextHandler(&s.warnings, &slog.HandlerOptions{Level: slog.LevelWarn}))
	counter := &billingtest.CountingTransport{}
	s.e = billingtest.NewEnv(t, billingtest.Options{Config: cfg, DynamoHTTP: &http.Client{Transport: counter}, Lease: lease, Heartbeat: lease / 4,
		Crash: s.hook, Log: quiet})
	e := s.e
	e.Stripe.Decide = s.decide

	// The one handler, its Postgres ledger and the billing feed worker.
	pool := testenv.Postgres(t)
	evTable := testenv.TableName("events")
	testenv.CreateTables(t, testenv.Dynamo(t), dynamo.EventsTable(evTable))
	const ttl = 20 * 365 * 24 * time.Hour // simulated events are years old; keep them unexpired
	opts := []handler.Option{handler.WithClock(e.Clock.Now)}
	var feed handler.Routes
	for _, typ := range billing.FeedEventTypes {
		feed = feed.With(typ, feedqueue.Enqueue)
	}
	opts = append(opts, handler.WithRoutes(feed))
	s.handler = handler.New(handler.Config{PlatformAccount: "acct_platform", EventTTL: ttl},
		events.NewStore(e.DB, evTable, ttl, nil), ledger.New(pool), quiet, opts...)
	s.worker = &outbox.Worker{Pool: pool, Topic: billing.FeedTopic, Deliver: feedqueue.Deliver(e.Service, quiet), Log: quiet,
		Backoff: func(int) time.Duration { return 0 }, Batch: 1000}

	classes := []string{"good", "good", "good", "good", "good", "good", "flaky", "flaky", "ach", "ach", "lost", "dead"}
	for i := range nSubs {
		in := billingtest.Input(fmt.Sprintf("sku-%d", i%7), 0)
		in.Customer = fmt.Sprintf("cus_%s_%d", classes[s.intn(len(classes))], i)
		in.StripeAccount = fmt.Sprintf("acct_m%d", i%5)
		in.Amount = int64(100 + s.intn(10000))
		switch r := s.intn(100); {
		case r < 35:
			in.PaymentDay = 28 + s.intn(4)
		case r < 40:
			in.BillingWeek = 1 + s.intn(5)
		default:
			in.PaymentDay = 1 + s.intn(31)
		}
		// Friday billing is monthly (docs/design.md §8); the draw is made either way
		// so the seed's other draws stay the same.
		if s.chance(0.1) && in.BillingWeek == 0 {
			in.Term = dates.Yearly
		}
		sub, err := e.Service.CreateSubscription(context.Background(), fmt.Sprintf("acc-%03d", i*2/5), in)
		require.NoError(t, err)
		s.subs = append(s.subs, sub)
	}

	first := e.Clock.Today()
	last := dates.AddMonthsClamped(first, months).AddDays(-1)
	phase := map[string]time.Duration{}
	mark := time.Now()
	lap := func(name string) {
		phase[name] += time.Since(mark)
		mark = time.Now()
	}
	for day := first; !day.After(last); day = day.AddDays(1) {
		e.Clock.SetDate(day)
		for range s.intn(2) {
			s.apiOp(day)
		}
		lap("api")
		_, err := e.Service.Remind(context.Background(), day)
		require.NoError(t, err)
		lap("remind")
		before := len(e.Stripe.PIs())
		s.collect(day)
		lap("collect")
		// What Stripe does after the job: bank debits settle later, some
		// lost answers and some ordinary outcomes arrive by webhook too.
		for _, pi := range e.Stripe.PIs()[before:] {
			switch {
			case pi.Status == "processing":
				settle := day.AddDays(2 + s.intn(3))
				s.later(settle, []byte("settle:"+pi.ID))
			case strings.HasPrefix(pi.Customer, "cus_lost") && pi.Status == "succeeded" && s.chance(0.5),
				// Only an outcome the PaymentIntent has: one a racing pay
				// now or batch cancelled has no succeeded event to send.
				(pi.Status == "succeeded" || pi.Status == "requires_payment_method") && s.chance(0.03):
				typ := "payment_intent.succeeded"
				if pi.Status == "requires_payment_method" {
					typ = "payment_intent.payment_failed"
				}
				s.later(day.AddDays(s.intn(2)), e.Stripe.Event(pi, typ, e.Clock.Now()))
			}
			if pi.Status == "succeeded" && s.chance(0.03) {
				s.later(day.AddDays(1+s.intn(10)), []byte("refund:"+pi.ID))
			}
		}
		s.webhooks(day)
		lap("webhooks")
		s.drain()
		lap("drain")
	}
	t.Logf("phases: %v", phase)
	// Let Stripe finish: settle and refund what is pending, deliver it all.
	for day := last.AddDays(1); len(s.pending) > 0; day = day.AddDays(1) {
		e.Clock.SetDate(day)
		s.webhooks(day)
		s.drain()
	}
	ops, total := counter.Ops()
	t.Logf("simulated in %s: %v; DynamoDB requests %d %v", time.Since(start).Round(time.Millisecond), s.stats, total, ops)
	return s.check(), s.stats
}

// webhooks sends what is due by day.
func (s *sim) webhooks(day dates.Date) {
	var dueDays []dates.Date
	for d := range s.pending {
		if !d.After(day) {
			dueDays = append(dueDays, d)
		}
	}
	sort.Slice(dueDays, func(i, j int) bool { return dueDays[i].Before(dueDays[j]) })
	for _, d := range dueDays {
		for _, p := range s.pending[d] {
			switch {
			case strings.HasPrefix(string(p), "settle:"):
				ok := s.chance(0.85)
				pi, err := s.e.Stripe.Settle(strings.TrimPrefix(string(p), "settle:"), ok)
				require.NoError(s.t, err)
				typ := "payment_intent.succeeded"
				if !ok {
					typ = "payment_intent.payment_failed"
					s.stat("ach:failed", 1)
				} else {
					s.stat("ach:settled", 1)
					if s.chance(0.05) {
						s.later(day.AddDays(1+s.intn(5)), []byte("refund:"+pi.ID))
					}
				}
				s.deliver(s.e.Stripe.Event(pi, typ, s.e.Clock.Now()))
			case strings.HasPrefix(string(p), "refund:"):
				pi, err := s.e.Stripe.Refund(strings.TrimPrefix(string(p), "refund:"))
				require.NoError(s.t, err)
				s.stat("refunds", 1)
				s.deliver(s.e.Stripe.Event(pi, "charge.refunded", s.e.Clock.Now()))
			default:
				s.deliver(p)
			}
		}
		delete(s.pending, d)
	}
}

// check asserts the invariants over everything Stripe and the tables hold.
func (s *sim) check() map[billing.Status]int {
	t, e := s.t, s.e
	ctx := context.Background()
	assert.Empty(t, s.violations, "charges that must not have happened")

	var periods []billing.Period
	receipts := map[string][]string{} // period → payment intents
	receiptSKU := map[string]string{} // payment intent → the plan its receipt names
	subItems := map[string]int{}      // account/subscription → its items (one key, whatever plan changes moved it)
	p := dynamodb.NewScanPaginator(e.DB, &dynamodb.ScanInput{TableName: aws.String(e.Billing), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		require.NoError(t, err)
		for _, raw := range out.Items {
			var it struct {
				Type, AccountId, SubscriptionId, BillingDate, PaymentIntent, SKU string
			}
			require.NoError(t, attributevalue.UnmarshalMap(raw, &it))
			switch it.Type {
			case "SUB":
				subItems[it.AccountId+"/"+it.SubscriptionId]++
			case "PER":
				per, err := e.Store.GetPeriod(ctx, it.AccountId, it.SubscriptionId, dates.MustParse(it.BillingDate))
				require.NoError(t, err)
				periods = append(periods, per)
			case "REC":
				k := stripetest.PeriodKey(it.AccountId, it.SubscriptionId, it.BillingDate)
				receipts[k] = append(receipts[k], it.PaymentIntent)
				receiptSKU[it.PaymentIntent] = it.SKU
			}
		}
	}
	successful := e.Stripe.Successful()
	attempts := map[string][]stripetest.PI{}
	for _, pi := range e.Stripe.PIs() {
		k := stripetest.PeriodKey(pi.Metadata[billing.MetaAccount], pi.Metadata[billing.MetaSubscription], pi.Metadata[billing.MetaDate])
		attempts[k] = append(attempts[k], pi)
		if sku, ok := receiptSKU[pi.ID]; ok {
			assert.Equal(t, pi.Metadata[billing.MetaSKU], sku, "%s: the receipt names the plan the charge was for", k)
		}
	}
	for _, sub := range s.subs {
		assert.Equal(t, 1, subItems[sub.AccountID+"/"+sub.SubscriptionID], "%s: one subscription item (plan changes move it)", sub.SubscriptionID)
	}
	histories := map[string][]billing.HistoryEntry{}
	for _, sub := range s.subs {
		h, err := e.Store.AllHistory(ctx, sub.AccountID, sub.SubscriptionID)
		require.NoError(t, err)
		for _, entry := range h {
			k := stripetest.PeriodKey(sub.AccountID, sub.SubscriptionID, entry.BillingDate.String())
			histories[k] = append(histories[k], entry)
		}
	}

	count := map[billing.Status]int{}
	for _, per := range periods {
		k := stripetest.PeriodKey(per.AccountID, per.SubscriptionID, per.BillingDate.String())
		count[per.Status]++
		assert.Empty(t, per.InFlightKey, "%s: an attempt left in flight", k)
		paid := per.Status == billing.Completed || per.Status == billing.Refunded
		if paid {
			if assert.Len(t, successful[k], 1, "%s is %s: exactly one successful charge", k, per.Status) {
				assert.Equal(t, successful[k][0], per.TransactionID, k)
			} else {
				for _, x := range histories[k] {
					t.Logf("  v%d %s %s %s %s cause=%s", x.Version, x.Status, x.Process, x.UpdatedEvent, x.TransactionID, x.Cause)
				}
				for _, pi := range attempts[k] {
					t.Logf("  %s %s key=%s refunded=%v", pi.ID, pi.Status, pi.IdempotencyKey, pi.Refunded)
				}
			}
			assert.Equal(t, []string{per.TransactionID}, receipts[k], "%s: one receipt for its charge", k)
		} else {
			assert.Empty(t, successful[k], "%s is %s: no successful charge", k, per.Status)
			assert.Empty(t, receipts[k], "%s is %s: no receipt", k, per.Status)
		}
		if per.Status == billing.Paused || per.Status == billing.PausedSkipped {
			assert.Empty(t, attempts[k], "%s is %s: never charged", k, per.Status)
		}
		// History: every change recorded, in order, ending in the current state.
		h := histories[k]
		if !assert.NotEmpty(t, h, "%s: no history", k) {
			continue
		}
		last := h[len(h)-1]
		assert.Equal(t, per.Status, last.Status, "%s: history ends in the current status", k)
		assert.Equal(t, per.Version, last.Version, "%s: the last change is in the history", k)
		for i := 1; i < len(h); i++ {
			assert.Less(t, h[i-1].Version, h[i].Version, "%s: versions increase", k)
			if !assert.True(t, allowed(h[i-1].Status, h[i].Status), "%s: %s → %s is not a lifecycle transition", k, h[i-1].Status, h[i].Status) {
				for _, x := range h {
					t.Logf("  v%d %s %s %s %s cause=%s", x.Version, x.Status, x.Process, x.UpdatedEvent, x.TransactionID, x.Cause)
				}
			}
		}
		// A period ahead of the next one is created PAUSED by a pause.
		assert.Contains(t, []billing.Status{billing.Scheduled, billing.Paused}, h[0].Status, "%s: starts SCHEDULED or PAUSED", k)
		for _, pi := range attempts[k] {
			want := billing.Error
			switch pi.Status {
			case "succeeded":
				want = billing.Completed
			case "processing":
				want = billing.ACHSent
			}
			if per.Status == billing.Cancelled && want == billing.Error {
				continue // a bank debit that failed after the cancellation
			}
			assert.True(t, hasEntry(h, want, pi.ID), "%s: no %s entry for %s", k, want, pi.ID)
			if pi.Refunded {
				assert.True(t, hasEntry(h, billing.Refunded, pi.ID), "%s: no REFUNDED entry for %s", k, pi.ID)
			}
		}
	}
	for k, pis := range successful {
		assert.Len(t, pis, 1, "%s: more than one successful charge", k)
	}
	return count
}

func hasEntry(h []billing.HistoryEntry, st billing.Status, pi string) bool {
	for _, e := range h {
		if e.Status == st && e.TransactionID == pi {
			return true
		}
	}
	return false
}

// allowed is the lifecycle of a billing period (docs/billing.md).
func allowed(from, to billing.Status) bool {
	next := map[billing.Status][]billing.Status{
		billing.Scheduled: {billing.Scheduled, billing.ACHSent, billing.Completed, billing.Error, billing.Waived,
			billing.Cancelled, billing.Paused, billing.Stale},
		// PAUSED → PAUSED: an amount or payment-method change reaches paused
		// periods too.
		billing.Paused: {billing.Paused, billing.PausedSkipped, billing.Scheduled, billing.Cancelled},
		// A period a rule change cancelled is scheduled again when the rule
		// brings its date back (day 15 → 20 → 15).
		billing.Cancelled: {billing.Scheduled},
		billing.Error:     {billing.Error, billing.ACHSent, billing.Completed, billing.Stale, billing.Cancelled, billing.Waived},
		billing.ACHSent:   {billing.Completed, billing.Error, billing.Cancelled},
		billing.Completed: {billing.Refunded},
	}
	for _, s := range next[from] {
		if s == to {
			return true
		}
	}
	return false
}

// logTail keeps what a logger wrote, for a failure message.
type logTail struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// tail is the last n lines written.
func (l *logTail) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := strings.Split(strings.TrimRight(l.buf.String(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
