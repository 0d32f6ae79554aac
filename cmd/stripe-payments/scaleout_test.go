package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// Scale-out test settings.
const (
	scaleReplicas = 3
	scaleWorkers  = 4
	scaleLoad     = 12 * time.Second // load phase; one replica is killed in it
	scaleSecret   = "whsec_fake_scale_out_test_secret"
	scaleAPIKey   = "sk_test_fake_scale_out_test_key"
	scaleToken    = "scale-out-test-internal-token"
	scaleActions  = "scale-out-test-actions-secret"
	scalePlatform = "acct_1ScalePlatform0000"
	// replicaHeader pins a request to one replica at the test's load
	// balancer (two copies of one event to two replicas at once).
	replicaHeader = "X-Test-Replica"
	// scaleSubsPerWave billing subscriptions are made due in each of two
	// waves: one at the start of the load, one just before the kill.
	scaleSubsPerWave = 8
)

var (
	scaleAccounts        = []string{"acct_1ScaleMerchantA000", "acct_1ScaleMerchantB000", "acct_1ScaleMerchantC000"}
	scaleBillingAccounts = []string{"bill-acct-1", "bill-acct-2", "bill-acct-3", "bill-acct-4"}
)

// roundRobin is the load balancer in front of the replicas: each request
// goes to the next replica (or the one replicaHeader names). A request to a
// replica that is down fails with 502, as an LB's would before its health
// check notices; the sender retries, as Stripe and API clients do.
type roundRobin struct {
	replicas []*server
	next     atomic.Uint64
	served   []atomic.Int64
}

func (lb *roundRobin) handler() http.Handler {
	transport := &http.Transport{MaxIdleConnsPerHost: 64, ResponseHeaderTimeout: 20 * time.Second}
	return &httputil.ReverseProxy{
		Transport: transport,
		ErrorLog:  log.New(io.Discard, "", 0), // a killed replica's requests end mid-way
		Rewrite: func(pr *httputil.ProxyRequest) {
			i := int(lb.next.Add(1) % uint64(len(lb.replicas)))
			if v := pr.In.Header.Get(replicaHeader); v != "" {
				i, _ = strconv.Atoi(v)
			}
			pr.Out.Header.Del(replicaHeader)
			// the two load balancers of docs/design.md §3 in one: the webhook to
			// the public listener, everything else to the admin one
			target, _ := url.Parse(lb.replicas[i].urlFor(pr.In.URL.Path))
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
			lb.served[i].Add(1)
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, "bad gateway: "+err.Error(), http.StatusBadGateway)
		},
	}
}

// scaleAction is one delivery at ACTIONS_URL, purchase or billing action.
type scaleAction struct {
	ID             string  `json:"id"`
	Type           string  `json:"type"`
	Account        string  `json:"account"`
	PurchaseID     *string `json:"purchase_id"`
	SubscriptionID *string `json:"subscription_id"`
	BillingDate    string  `json:"billing_date"`
	PaymentIntent  string  `json:"payment_intent"`
}

// effect names what an action does, independent of its id: two ids for
// one effect is a double.
func (a scaleAction) effect() string {
	switch {
	case strings.HasPrefix(a.Type, "billing."):
		return a.Type + ":" + a.Account + ":" + deref(a.SubscriptionID) + ":" + a.BillingDate
	default:
		return a.Type + ":" + deref(a.PurchaseID)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// scaleSink is ACTIONS_URL for all replicas: actions by id; two ids for
// one effect, or an id changing its effect, is a double.
type scaleSink = actionReceiver[scaleAction]

// scaleEvent is one Stripe event of the run; every one is listable on the
// Events API as soon as it exists.
type scaleEvent struct {
	id      string
	account string
	payload []byte
	sent    bool // the webhook was tried (not a missed webhook)
}

type scalePurchase struct {
	id   uuid.UUID
	pi   string
	paid bool
}

type scaleRun struct {
	t        *testing.T
	lb       string
	fixtures map[string]map[string]any
	stripe   *stripetest.Stripe
	client   *http.Client

	mu        sync.Mutex
	all       []*scaleEvent
	purchases []*scalePurchase

	missed, duplicates, delivered, abandoned, refusals, retries atomic.Int64
}

// TestScaleOut runs three `serve` replicas of the real binary on one
// Postgres database and one set of DynamoDB tables, with the poller
// (POLL_EVERY) and the billing jobs (BILLING_EVERY) on in each, behind a
// round-robin load balancer; sends purchases and their events with
// duplicates to different replicas at once and missed webhooks only the
// pollers can find; makes billing periods due today in two waves; kills one
// replica with SIGKILL mid-run and restarts it. Then: every event processed
// once, every effect delivered under one action id, every billing period
// charged once (at most one successful PaymentIntent per period and per
// idempotency key), reminders once per charge date, and the jobs' and
// pollers' runs accounted for.
func TestScaleOut(t *testing.T) {
	if testing.Short() {
		t.Fatal("this test has no short mode; run it with `make test`")
	}
	t.Parallel()
	began := time.Now()
	bin := binary(t)
	// One fake Stripe for the replicas: the Events API, the billing core's
	// charges and the purchase API.
	fake := stripetest.New(t, stripetest.Options{Key: scaleAPIKey})
	sink := newActionReceiver(t, scaleActions, func(a scaleAction) string { return a.ID }, scaleAction.effect)
	vars := stackVars(t, fake, map[string]string{
		"STRIPE_WEBHOOK_SECRET":   scaleSecret,
		"STRIPE_PLATFORM_ACCOUNT": scalePlatform,
		"INTERNAL_API_TOKEN":      scaleToken,
		"ACTIONS_URL":             sink.URL,
		"ACTIONS_SECRET":          scaleActions,
		"LOG_LEVEL":               "info",
		// Every replica runs the poller and the billing jobs, often.
		"POLL_EVERY":    "1s",
		"BILLING_EVERY": "1s",
		// A killed replica's account locks expire after 6 s, not 60.
		"BILLING_LOCK_LEASE":     "6s",
		"BILLING_LOCK_HEARTBEAT": "1s",
	})
	dbURL := vars["DATABASE_URL"]
	migrateStack(t, bin, vars)

	lb := &roundRobin{served: make([]atomic.Int64, scaleReplicas)}
	for range scaleReplicas {
		addr := freeAddr(t)
		lb.replicas = append(lb.replicas, newServer(t, bin, with(vars, addr), addr))
	}
	for _, s := range lb.replicas {
		s.start()
	}
	front := httptest.NewServer(lb.handler())
	t.Cleanup(front.Close)

	run := &scaleRun{t: t, lb: front.URL, fixtures: map[string]map[string]any{}, stripe: fake,
		client: &http.Client{Timeout: 20 * time.Second}}
	run.fixtures = fixtures(t, "payment_intent.succeeded", "payment_intent.payment_failed", "customer.created")

	// Load.
	stop := runLoad(scaleWorkers, 20261123, run.flow)
	loadStart := time.Now()

	// Billing: subscriptions made through the API, their first period moved
	// to today (the operator's move), so the replicas' real-time jobs find
	// it due. Wave 1 now; wave 2 right before the kill, so the killed
	// replica's jobs are likely mid-run on it.
	var subs []billingSub
	subs = append(subs, run.dueSubscriptions(0, scaleSubsPerWave)...)
	time.Sleep(3 * time.Second)
	subs = append(subs, run.dueSubscriptions(1, scaleSubsPerWave)...)
	victim := lb.replicas[1]
	victim.kill()
	killedAt := time.Since(loadStart)
	t.Logf("kill -9 replica 2 at %s (%d events so far)", killedAt.Round(time.Millisecond), run.eventCount())
	time.Sleep(500 * time.Millisecond)
	restart := victim.start()
	time.Sleep(max(0, scaleLoad-time.Since(loadStart)))
	stop()
	loadTime := time.Since(loadStart)

	// Drain: the pollers replay what no webhook delivered, the jobs charge
	// what is due, the dispatchers deliver every action.
	pool := connect(t, dbURL)
	ctx := context.Background()
	store := events.NewStore(testenv.Dynamo(t), vars["EVENTS_TABLE"], 720*time.Hour, nil)
	drainStart := time.Now()
	waitFor(t, 90*time.Second, "every event processed, every period charged, the outbox drained", func() (bool, string) {
		records := run.records(store)
		notDone := 0
		for _, ev := range run.all {
			if rec, ok := records[ev.id]; !ok || rec.Status != events.StatusProcessed {
				notDone++
			}
		}
		uncharged := 0
		for _, s := range subs {
			if got := run.subscription(s); got["last_payment_date"] == nil {
				uncharged++
			}
		}
		var pending int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE delivered_at IS NULL`).Scan(&pending))
		return notDone == 0 && uncharged == 0 && pending == 0,
			fmt.Sprintf("%d events not processed, %d periods not charged, %d outbox messages undelivered", notDone, uncharged, pending)
	})
	drainTime := time.Since(drainStart)
	// One more round of every job and poll on every replica after the
	// work was done: reruns must find nothing to do twice.
	time.Sleep(2500 * time.Millisecond)
	waitFor(t, 30*time.Second, "the outbox to drain again", func() (bool, string) {
		var pending int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE delivered_at IS NULL`).Scan(&pending))
		return pending == 0, fmt.Sprintf("%d undelivered", pending)
	})
	run.checkEvents(pool, store)
	actionsN := run.checkActions(pool, sink, fake)
	run.checkBilling(pool, fake, sink, subs)

	var stopErrs []error
	for i, s := range lb.replicas {
		if err := s.stop(30 * time.Second); err != nil {
			stopErrs = append(stopErrs, fmt.Errorf("replica %d: %w", i+1, err))
		}
	}

	assert.Empty(t, stopErrs, "every replica exits cleanly on SIGTERM (a -race binary exits 66 after a data race)")
	var logs strings.Builder
	for _, s := range lb.replicas {
		logs.WriteString(s.allLogs())
	}
	for _, bad := range []string{"WARNING: DATA RACE", "panic:", "fatal error:"} {
		assert.NotContains(t, logs.String(), bad, "the replicas' logs show %q", bad)
	}
	pollDone := strings.Count(logs.String(), "poll run done")
	pollBusy := strings.Count(logs.String(), "poll skipped: another poller run holds the lock")
	assert.Positive(t, pollDone, "the in-serve pollers ran")

	t.Logf("scale-out: %d replicas, %s of load (kill -9 of replica 2 at %s, healthy again in %s); %d events (%d missed webhooks, %d sent twice at once to two replicas, %d answered 200, %d abandoned to the poller, %d client retries); %d purchases; %d billing periods due; LB requests per replica %v; drain %s; poll runs %d done, %d skipped on the lock; %d actions delivered, %d more than once; total %s",
		scaleReplicas, loadTime.Round(time.Millisecond), killedAt.Round(time.Millisecond), restart.Round(time.Millisecond),
		len(run.all), run.missed.Load(), run.duplicates.Load(), run.delivered.Load(), run.abandoned.Load(), run.retries.Load(),
		len(run.purchases), len(subs), servedCounts(lb), drainTime.Round(time.Millisecond), pollDone, pollBusy,
		actionsN, sink.redelivered(), time.Since(began).Round(time.Millisecond))
}

func servedCounts(lb *roundRobin) []int64 {
	out := make([]int64, len(lb.served))
	for i := range lb.served {
		out[i] = lb.served[i].Load()
	}
	return out
}

func (r *scaleRun) eventCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.all)
}

// flow is one purchase (paid or declined) and its event, or a platform
// event, delivered as Stripe would: usually once, sometimes twice at the
// same moment to two different replicas, sometimes never (only the Events
// API has it).
func (r *scaleRun) flow(rng *rand.Rand, worker, n int) {
	var ev *scaleEvent
	switch p := rng.IntN(100); {
	case p < 80:
		account := scaleAccounts[rng.IntN(len(scaleAccounts))]
		merchant := uuid.NewSHA1(uuid.NameSpaceOID, []byte(account))
		pur := &scalePurchase{paid: p < 60}
		if !r.createPurchase(pur, fmt.Sprintf("scale-%d-%d", worker, n), map[string]any{"mode": "legacy",
			"amount": 1000 + rng.IntN(9000), "currency": "usd", "account": merchant.String(), "stripe_account": account}) {
			return
		}
		fixture := "payment_intent.succeeded"
		if !pur.paid {
			fixture = "payment_intent.payment_failed"
		}
		ev = r.event(fixture, account, map[string]any{"id": pur.pi, "invoice": nil, "client_secret": nil,
			"metadata": map[string]any{"purchase_id": pur.id.String(), "account": merchant.String()}})
		r.mu.Lock()
		r.purchases = append(r.purchases, pur)
		r.mu.Unlock()
	default:
		ev = r.event("customer.created", "", map[string]any{"id": "cus_scale" + strings.ReplaceAll(uuid.NewString(), "-", "")[:14]})
	}
	r.mu.Lock()
	r.all = append(r.all, ev)
	r.mu.Unlock()
	r.stripe.Add(ev.account, ev.payload) // Stripe lists every event

	switch k := rng.IntN(100); {
	case k < 12:
		r.missed.Add(1) // the webhook never comes: only a poller finds it
	case k < 32:
		// Two copies at the same moment, to two different replicas.
		ev.sent = true
		r.duplicates.Add(1)
		first := rng.IntN(scaleReplicas)
		gate := make(chan struct{})
		var both sync.WaitGroup
		for _, replica := range []int{first, (first + 1) % scaleReplicas} {
			both.Add(1)
			go func() {
				defer both.Done()
				<-gate
				r.deliver(ev, replica)
			}()
		}
		close(gate)
		both.Wait()
	default:
		ev.sent = true
		r.deliver(ev, -1)
	}
	time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
}

// createPurchase POSTs /v1/purchases through the LB until it answers 201,
// with the same Idempotency-Key on every retry, as a client must.
func (r *scaleRun) createPurchase(p *scalePurchase, key string, body map[string]any) bool {
	raw, _ := json.Marshal(body)
	answer, ok := purchase(r.t, r.client, r.lb, scaleToken, key, raw, &r.retries, http.StatusConflict)
	if !ok {
		return false
	}
	var got struct {
		ID            uuid.UUID `json:"id"`
		PaymentIntent string    `json:"payment_intent"`
	}
	if err := json.Unmarshal(answer, &got); err != nil || got.PaymentIntent == "" {
		r.t.Errorf("purchase %s: %v %s", key, err, answer)
		return false
	}
	p.id, p.pi = got.ID, got.PaymentIntent
	return true
}

// event builds a real-shaped event from a fixture, created 45 s ago: past
// the pollers' settle delay (30 s), inside the overlap of their checkpoints.
func (r *scaleRun) event(fixture, account string, object map[string]any) *scaleEvent {
	id, payload := fixtureEvent(r.fixtures[fixture], account, time.Now().Add(-45*time.Second).Unix(), object)
	return &scaleEvent{id: id, account: account, payload: payload}
}

// deliver POSTs the signed event through the LB, pinned to replica on the
// first try when replica ≥ 0, up to 4 times; what is not answered 200 is
// left to the pollers (it is on the Events API).
func (r *scaleRun) deliver(ev *scaleEvent, replica int) {
	for attempt := 0; attempt < 4; attempt++ {
		if attempt > 0 {
			time.Sleep(150 * time.Millisecond)
		}
		headers := []string{"Stripe-Signature", stripetest.Sign(ev.payload, scaleSecret, time.Now())}
		if replica >= 0 && attempt == 0 {
			headers = append(headers, replicaHeader, strconv.Itoa(replica))
		}
		status, body, err := postJSON(r.client, r.lb+"/webhooks/stripe", ev.payload, headers...)
		if err != nil {
			continue
		}
		if status == http.StatusOK {
			r.delivered.Add(1)
			return
		}
		if status < 500 {
			r.refusals.Add(1)
			r.t.Errorf("a valid event was refused: %s %d %s", ev.id, status, body)
			return
		}
	}
	r.abandoned.Add(1)
}

// billingSub is a subscription made due today.
type billingSub struct {
	account, id string
	period      string // the period's scheduled date (its charge date was moved to today)
}

// api sends an internal API request through the LB, retrying 5xx, 409
// (an account lock held by a job) and connection errors; it returns the
// final status and JSON body.
func (r *scaleRun) api(method, path string, body any) (int, map[string]any) {
	var raw []byte
	if body != nil {
		raw, _ = json.Marshal(body)
	}
	deadline := time.Now().Add(45 * time.Second)
	for {
		req, _ := http.NewRequest(method, r.lb+path, bytes.NewReader(raw))
		req.Header.Set("Authorization", "Bearer "+scaleToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := r.client.Do(req)
		if err == nil {
			answer, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var out map[string]any
			_ = json.Unmarshal(answer, &out)
			if resp.StatusCode < 500 && resp.StatusCode != http.StatusConflict || time.Now().After(deadline) {
				return resp.StatusCode, out
			}
		} else if time.Now().After(deadline) {
			r.t.Fatalf("%s %s: %v", method, path, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dueSubscriptions creates n subscriptions through the API (client-chosen
// ids, so a retried create is idempotent) whose first period is more than a
// week away, then moves each first period's charge date to today (PATCH
// next_payment_date, the operator's move): the replicas' jobs, which work
// on the real date, find it due at once and announce it (one reminder).
func (r *scaleRun) dueSubscriptions(wave, n int) []billingSub {
	t := r.t
	now := time.Now().UTC()
	day := min(now.AddDate(0, 0, 12).Day(), 28)
	var out []billingSub
	for i := range n {
		s := billingSub{account: scaleBillingAccounts[i%len(scaleBillingAccounts)], id: fmt.Sprintf("sub-scale-%d-%02d", wave, i)}
		status, body := r.api(http.MethodPost, "/internal/v1/accounts/"+s.account+"/subscriptions", map[string]any{
			"subscription_id": s.id, "sku": fmt.Sprintf("sku-%d-%d", wave, i), "email": "scale@example.com",
			"payment_day": day, "amount": 1000 + 100*i, "currency": "usd", "term": "MONTHLY",
			"customer": "cus_scale" + strings.ReplaceAll(s.id, "-", "_"), "payment_method": "pm_scale" + strings.ReplaceAll(s.id, "-", "_"),
			"stripe_account": scaleAccounts[i%len(scaleAccounts)]})
		require.Contains(t, []int{http.StatusCreated, http.StatusOK}, status, "create %s: %v", s.id, body)
		s.period, _ = body["next_payment_date"].(string)
		require.NotEmpty(t, s.period, "create %s: %v", s.id, body)
		today := time.Now().UTC().Format(time.DateOnly)
		status, body = r.api(http.MethodPatch, "/internal/v1/accounts/"+s.account+"/subscriptions/"+s.id,
			map[string]any{"next_payment_date": today})
		require.Equal(t, http.StatusOK, status, "move %s to %s: %v", s.id, today, body)
		require.Equal(t, today, body["next_payment_date"], "moved %s: %v", s.id, body)
		out = append(out, s)
	}
	return out
}

func (r *scaleRun) subscription(s billingSub) map[string]any {
	status, body := r.api(http.MethodGet, "/internal/v1/accounts/"+s.account+"/subscriptions/"+s.id, nil)
	require.Equal(r.t, http.StatusOK, status, "get %s: %v", s.id, body)
	return body
}

// records reads the events table's records of every event of the run.
func (r *scaleRun) records(store *events.Store) map[string]events.Record {
	ids := make([]string, len(r.all))
	for i, ev := range r.all {
		ids[i] = ev.id
	}
	return recordsOf(r.t, store, ids)
}

// checkEvents: every event recorded processed and applied once (ledger rows
// = distinct event ids); every missed webhook recorded by a poller.
func (r *scaleRun) checkEvents(pool *pgx.Conn, store *events.Store) {
	t := r.t
	records := r.records(store)
	ledgerIDs := ledgerEventIDs(t, pool)
	ledger := map[string]int{}
	for _, id := range ledgerIDs {
		ledger[id]++
	}
	var unprocessed, unledgered, notPolled []string
	for _, ev := range r.all {
		rec, ok := records[ev.id]
		if !ok || rec.Status != events.StatusProcessed {
			unprocessed = append(unprocessed, ev.id)
		} else if !ev.sent && rec.Source != stripeevent.SourcePoller {
			notPolled = append(notPolled, ev.id+" ("+string(rec.Source)+")")
		}
		if ledger[ev.id] != 1 {
			unledgered = append(unledgered, fmt.Sprintf("%s ×%d", ev.id, ledger[ev.id]))
		}
	}
	assert.Empty(t, unprocessed, "events not recorded processed")
	assert.Empty(t, unledgered, "events not in the ledger exactly once")
	assert.Empty(t, notPolled, "missed webhooks recorded by something other than a poller")
	assert.Len(t, ledgerIDs, len(r.all), "ledger rows = distinct events")
	assert.Zero(t, r.refusals.Load(), "valid events refused")

	// The pollers share one checkpoint per account (their runs take turns
	// on one advisory lock): every merchant account has been polled.
	rows, err := pool.Query(context.Background(), `SELECT stripe_account FROM poller_checkpoints`)
	require.NoError(t, err)
	polled, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, account := range scaleAccounts {
		assert.Contains(t, polled, account, "a poller checkpoint for %s", account)
	}
}

// checkActions: every outbox action delivered, each effect under exactly
// one action id, one purchase.fulfilled per paid purchase and none for a
// declined one, one PaymentIntent per purchase at Stripe.
func (r *scaleRun) checkActions(pool *pgx.Conn, sink *scaleSink, fake *stripetest.Stripe) int {
	t := r.t
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT id::text, delivered_at IS NOT NULL FROM outbox WHERE topic = 'action'`)
	require.NoError(t, err)
	inOutbox := map[string]bool{}
	for rows.Next() {
		var id string
		var delivered bool
		require.NoError(t, rows.Scan(&id, &delivered))
		inOutbox[id] = true
		assert.True(t, delivered, "action %s not marked delivered", id)
	}
	require.NoError(t, rows.Err())
	sink.mu.Lock()
	defer sink.mu.Unlock()
	assert.Empty(t, sink.bad, "deliveries the receiver refused")
	for id := range inOutbox {
		assert.GreaterOrEqual(t, sink.deliveries[id], 1, "action %s never reached ACTIONS_URL", id)
	}
	byEffect := map[string][]string{}
	for id, a := range sink.byID {
		assert.True(t, inOutbox[id], "ACTIONS_URL received action %s that the outbox does not hold", id)
		byEffect[a.effect()] = append(byEffect[a.effect()], id)
	}
	for effect, ids := range byEffect {
		assert.Len(t, ids, 1, "effect %s reached ACTIONS_URL under %d action ids", effect, len(ids))
	}
	for _, p := range r.purchases {
		n := len(byEffect["purchase.fulfilled:"+p.id.String()])
		if p.paid {
			assert.Equal(t, 1, n, "purchase %s (paid): purchase.fulfilled actions", p.id)
		} else {
			assert.Zero(t, n, "purchase %s (declined): purchase.fulfilled actions", p.id)
		}
	}
	assert.Equal(t, len(r.purchases), fake.Created("payment_intent"), "one PaymentIntent per purchase")
	var paidUnfulfilled int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM purchases p JOIN payments pay ON pay.id = p.payment_intent
		WHERE pay.status = 'paid' AND NOT p.fulfilled`).Scan(&paidUnfulfilled))
	assert.Zero(t, paidUnfulfilled, "purchases paid but not fulfilled")
	return len(sink.byID)
}

// checkBilling: every due period charged exactly once at Stripe (one
// successful PaymentIntent per period, one per idempotency key), one
// receipt, one COMPLETED history entry, one billing.payment_completed and
// at most one billing.reminder_due per charge date; the job runs recorded
// by all replicas add up to no more charges than periods.
func (r *scaleRun) checkBilling(pool *pgx.Conn, bill *stripetest.Stripe, sink *scaleSink, subs []billingSub) {
	t := r.t
	successful := bill.Successful()
	byKey := map[string]int{}
	creates := 0
	for _, p := range bill.PIs() {
		creates++
		if p.Status == "succeeded" {
			byKey[p.IdempotencyKey]++
		}
	}
	for key, n := range byKey {
		assert.Equal(t, 1, n, "idempotency key %s: successful PaymentIntents", key)
	}
	// Every attempt succeeds here, so a second PaymentIntent for a period
	// (a new attempt next to one in flight) would be a second creation.
	assert.Equal(t, len(subs), creates, "PaymentIntents created at Stripe: one per due period")
	want := map[string]bool{}
	for _, s := range subs {
		key := stripetest.PeriodKey(s.account, s.id, s.period)
		want[key] = true
		assert.Len(t, successful[key], 1, "period %s: successful PaymentIntents at Stripe", key)
	}
	for key, pis := range successful {
		assert.True(t, want[key], "a PaymentIntent for period %s, which was not due (%v)", key, pis)
	}
	reminders, completed := 0, 0
	sink.mu.Lock()
	perDate := map[string]int{}
	for _, a := range sink.byID {
		switch a.Type {
		case billing.ActionReminderDue:
			reminders++
			perDate[a.effect()]++
		case billing.ActionPaymentCompleted:
			completed++
		}
	}
	sink.mu.Unlock()
	for effect, n := range perDate {
		assert.Equal(t, 1, n, "reminders for %s", effect)
	}
	assert.Equal(t, len(subs), completed, "one billing.payment_completed per period")
	assert.Positive(t, reminders, "the replicas' remind jobs announced the moved charges")
	for _, s := range subs {
		status, list := r.api(http.MethodGet, "/internal/v1/accounts/"+s.account+"/subscriptions/"+s.id+"/history?limit=1000", nil)
		require.Equal(t, http.StatusOK, status, "history %s: %v", s.id, list)
		done := 0
		for _, e := range list["data"].([]any) {
			e := e.(map[string]any)
			if e["billing_status"] == "COMPLETED" {
				done++
			}
		}
		assert.Equal(t, 1, done, "subscription %s: COMPLETED history entries", s.id)
	}
	receipts := 0
	for _, account := range scaleBillingAccounts {
		status, list := r.api(http.MethodGet, "/internal/v1/accounts/"+account+"/receipts?limit=1000", nil)
		require.Equal(t, http.StatusOK, status, "receipts %s: %v", account, list)
		receipts += len(list["data"].([]any))
	}
	assert.Equal(t, len(subs), receipts, "one receipt per period")

	// The runs every replica recorded: charges and reminders they claim to
	// have made add up to at most what there was to do.
	var runs, succeeded, reminded, locked int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*),
		coalesce(sum((report->>'succeeded')::int) FILTER (WHERE job = 'collect'), 0),
		coalesce(sum((report->>'reminded')::int) FILTER (WHERE job = 'remind'), 0),
		coalesce(sum((report->>'locked')::int), 0) FROM ops_billing_runs`).Scan(&runs, &succeeded, &reminded, &locked))
	assert.LessOrEqual(t, succeeded, len(subs), "charges reported by the replicas' collect runs")
	t.Logf("billing: %d periods, %d PaymentIntent creations at Stripe (%d successful), %d reminders, %d job runs recorded (collect charged %d, remind reminded %d, %d account-lock waits)",
		len(subs), creates, len(byKey), reminders, runs, succeeded, reminded, locked)
}
