package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"regexp"
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

	"github.com/stripe-payments/stripe-payments/internal/actions"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// Crash test settings. CRASH_SEED replays another sequence of kill moments
// and flows (the default is fixed, so a run is reproducible as far as the
// scheduler allows; every assertion holds whatever the interleaving).
const (
	crashKills    = 5
	crashWorkers  = 4
	crashSecret   = "whsec_fake_crash_test_secret"
	crashAPIKey   = "sk_test_fake_crash_test_key"
	crashToken    = "crash-test-internal-token"
	crashActions  = "crash-test-actions-secret"
	crashPlatform = "acct_1CrashPlatform0000"
	// crashHistory is how far back the events' created seconds start: one
	// second per event, so up to 21600 events stay older than the poller's
	// settle delay (the run makes about 2 500).
	crashHistory = 6 * time.Hour
)

var crashAccounts = []string{"acct_1CrashMerchantA000", "acct_1CrashMerchantB000", "acct_1CrashMerchantC000"}

// flowKind is what a worker does in one iteration.
type flowKind int

const (
	legacyPaid     flowKind = iota // purchase API (legacy), then payment_intent.succeeded (sometimes after .processing)
	legacyDeclined                 // purchase API (legacy), then payment_intent.payment_failed
	recurringKept                  // purchase API (recurring), subscription created + updated (active)
	recurringEnded                 // the same, then customer.subscription.deleted
	platformNoise                  // a platform event without an applier (customer.created)
)

// sentEvent is one Stripe event of the run: it is always listable on the
// fake Events API; the webhook may have delivered it, or not.
type sentEvent struct {
	id        string
	account   string // "" for the platform
	payload   []byte
	delivered bool // answered 200 by the webhook
	sent      bool // the webhook was tried at all (not a webhook gap)
}

// crashFlow is one purchase (or noise event) and what Stripe said about it.
type crashFlow struct {
	kind     flowKind
	account  string // Stripe account
	purchase uuid.UUID
	pi, sub  string
	events   []*sentEvent
	newest   *sentEvent // the event with the latest created about pi/sub
}

// crashSink is ACTIONS_URL: actions by id; one changing its type or
// purchase between deliveries is bad.
type crashSink = actionReceiver[actions.Action]

func newCrashSink(t *testing.T) *crashSink {
	return newActionReceiver(t, crashActions, func(a actions.Action) string { return a.ID.String() },
		func(a actions.Action) string { return a.Type + ":" + deref(a.PurchaseID) })
}

// crashRun is the state of one crash test.
type crashRun struct {
	t        *testing.T
	srv      *server
	fixtures map[string]map[string]any
	created  atomic.Int64 // seconds after base: every event has its own second
	base     time.Time
	client   *http.Client

	mu    sync.Mutex
	flows []*crashFlow
	all   []*sentEvent

	delivered, abandoned, gaps, duplicates, refusals atomic.Int64
	purchaseRetries                                  atomic.Int64
}

// TestCrashRecovery runs the real binary under load, kills it with SIGKILL
// at random moments, restarts it each time, checks that every event it
// answered 200 is applied and recorded processed before any recovery (an
// acknowledgement is durable), then runs `stripe-payments poll
// --once` against a fake Stripe Events API that holds every event of the run,
// and shows: no event missing (every one recorded processed and in the
// ledger), no effect doubled (one ledger row per event, one action per
// effect, each delivered at least once under one id, one PaymentIntent or
// subscription created at Stripe per purchase, rows in their newest state),
// and no purchase stuck (every paid purchase fulfilled).
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Fatal("this test has no short mode; run it with `make test`")
	}
	t.Parallel()
	began := time.Now()
	seed := uint64(20240308)
	if v := os.Getenv("CRASH_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "CRASH_SEED")
		seed = n
	}
	t.Logf("seed %d (CRASH_SEED=%d reproduces the kill schedule and flows)", seed, seed)
	bin := binary(t)

	// One fake Stripe: the purchase API, the invoice lookups and the Events
	// API the poller lists (it expects the binary's key).
	fake := stripetest.New(t, stripetest.Options{Key: crashAPIKey})
	sink := newCrashSink(t)
	vars := stackVars(t, fake, map[string]string{
		"STRIPE_WEBHOOK_SECRET":   crashSecret,
		"STRIPE_PLATFORM_ACCOUNT": crashPlatform,
		"INTERNAL_API_TOKEN":      crashToken,
		"ACTIONS_URL":             sink.URL,
		"ACTIONS_SECRET":          crashActions,
		"LOG_LEVEL":               "info",
		"POLL_EVERY":              "",
	})
	dbURL, table := vars["DATABASE_URL"], vars["EVENTS_TABLE"]
	addr := freeAddr(t)
	env := with(vars, addr)
	migrateStack(t, bin, vars)

	run := &crashRun{t: t, srv: newServer(t, bin, env, addr), fixtures: map[string]map[string]any{},
		base: time.Now().Add(-crashHistory).Truncate(time.Second), client: &http.Client{Timeout: 15 * time.Second}}
	run.fixtures = fixtures(t, "payment_intent.succeeded", "payment_intent.payment_failed", "payment_intent.processing",
		"customer.subscription.created", "customer.subscription.updated", "customer.subscription.deleted", "customer.created")
	run.srv.start()

	// Load: workers run flows until stop; meanwhile the server is killed at
	// random moments and started again.
	stop := runLoad(crashWorkers, seed, run.flow)
	schedule := rand.New(rand.NewPCG(seed, 0))
	var restarts []time.Duration
	loadStart := time.Now()
	for k := range crashKills {
		time.Sleep(time.Duration(2500+schedule.IntN(3000)) * time.Millisecond)
		run.srv.kill()
		t.Logf("kill -9 #%d at %s (%d events so far)", k+1, time.Since(loadStart).Round(time.Millisecond), run.eventCount())
		time.Sleep(time.Duration(schedule.IntN(400)) * time.Millisecond) // down for a moment
		restarts = append(restarts, run.srv.start())
	}
	time.Sleep(2 * time.Second)
	stop()
	loadTime := time.Since(loadStart)

	// Before any recovery: every event answered 200 is already applied and
	// recorded processed (the poll below would mend a lost acknowledged
	// event and hide the loss, so it must not run first).
	pool := connect(t, dbURL)
	acked := run.checkAcknowledged(pool, table)

	// Stripe lists every event of the run, delivered or not.
	byAccount := map[string][][]byte{}
	for _, ev := range run.all {
		byAccount[ev.account] = append(byAccount[ev.account], ev.payload)
	}
	for account, payloads := range byAccount {
		fake.Add(account, payloads...)
	}

	// The operator's recovery: one poll, replaying through the restarted
	// server's webhook endpoint (the default path, as Stripe delivers).
	pollStart := time.Now()
	stdout, stderr, err := runCommand(t, bin, env, 2*time.Minute, "poll", "--once", "--target", run.srv.url()+"/webhooks/stripe", "--rate", "0")
	require.NoError(t, err, "poll --once failed\nstdout:\n%s\nstderr (tail):\n%s", stdout, lastLines(stderr, 30))
	pollTime := time.Since(pollStart)
	summary := regexp.MustCompile(`(?m)^poll: .*$`).FindString(stdout)
	require.NotEmpty(t, summary, "poll printed no summary:\n%s", stdout)
	assert.Contains(t, summary, "failed 0 ", summary)
	replayed := 0
	if m := regexp.MustCompile(`replayed (\d+)`).FindStringSubmatch(summary); m != nil {
		replayed, _ = strconv.Atoi(m[1])
	}

	ctx := context.Background()
	waitFor(t, 60*time.Second, "the outbox to drain (every action delivered)", func() (bool, string) {
		var pending int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE delivered_at IS NULL`).Scan(&pending))
		return pending == 0, fmt.Sprintf("%d actions still undelivered", pending)
	})
	stopErr := run.srv.stop(30 * time.Second)

	run.check(pool, table, fake, sink)
	assert.NoError(t, stopErr, "serve did not exit cleanly on SIGTERM (a -race binary exits 66 after a data race)")
	logs := run.srv.allLogs()
	for _, bad := range []string{"WARNING: DATA RACE", "panic:", "fatal error:"} {
		assert.NotContains(t, logs, bad, "the server logs show %q", bad)
	}

	var maxRestart time.Duration
	for _, d := range restarts {
		maxRestart = max(maxRestart, d)
	}
	t.Logf("crash recovery: %d kill -9 in %s of load; %d events (%d delivered with 200, all %d found applied and processed before the poll, %d abandoned after failed deliveries, %d never sent, %d duplicate deliveries, %d purchase API retries); restarts healthy in ≤ %s; poll replayed %d in %s (%s); %d actions, %d delivered more than once; total %s",
		crashKills, loadTime.Round(time.Millisecond), len(run.all), run.delivered.Load(), acked, run.abandoned.Load(), run.gaps.Load(),
		run.duplicates.Load(), run.purchaseRetries.Load(), maxRestart.Round(time.Millisecond), replayed, pollTime.Round(time.Millisecond),
		summary, len(sink.deliveries), sink.redelivered(), time.Since(began).Round(time.Millisecond))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func connect(t testing.TB, dbURL string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// waitFor polls cond until it holds or timeout passes, then fails with
// cond's last explanation.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s: %s", timeout, what, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (r *crashRun) eventCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.all)
}

// flow runs one flow of a worker: a purchase through the purchase API and
// the Stripe events about it, or a platform event.
func (r *crashRun) flow(rng *rand.Rand, worker, n int) {
	if r.created.Load() > int64(crashHistory/time.Second)-3600 {
		time.Sleep(10 * time.Millisecond) // enough events: keep the created seconds in the past
		return
	}
	f := &crashFlow{account: crashAccounts[rng.IntN(len(crashAccounts))]}
	switch p := rng.IntN(100); {
	case p < 45:
		f.kind = legacyPaid
	case p < 60:
		f.kind = legacyDeclined
	case p < 75:
		f.kind = recurringKept
	case p < 90:
		f.kind = recurringEnded
	default:
		f.kind = platformNoise
		f.account = ""
	}
	var evs []*sentEvent
	switch f.kind {
	case legacyPaid, legacyDeclined:
		if !r.createPurchase(f, fmt.Sprintf("crash-%d-%d", worker, n), map[string]any{"mode": "legacy", "amount": 1000 + rng.IntN(9000), "currency": "usd"}) {
			return
		}
		md := map[string]any{"purchase_id": f.purchase.String(), "account": crashMerchant(f).String()}
		obj := map[string]any{"id": f.pi, "metadata": md, "invoice": nil, "client_secret": nil}
		if f.kind == legacyPaid && rng.IntN(3) == 0 {
			evs = append(evs, r.event("payment_intent.processing", f.account, obj))
		}
		outcome := "payment_intent.succeeded"
		if f.kind == legacyDeclined {
			outcome = "payment_intent.payment_failed"
		}
		f.newest = r.event(outcome, f.account, obj)
		evs = append(evs, f.newest)
	case recurringKept, recurringEnded:
		suffix := strings.ReplaceAll(uuid.NewString(), "-", "")[:14]
		if !r.createPurchase(f, fmt.Sprintf("crash-%d-%d", worker, n), map[string]any{"mode": "product",
			"customer": "cus_crash" + suffix, "payment_method": "pm_crash" + suffix, "recurring_price": "price_crash1"}) {
			return
		}
		md := map[string]any{"purchase_id": f.purchase.String(), "account": crashMerchant(f).String()}
		evs = append(evs,
			r.event("customer.subscription.created", f.account, map[string]any{"id": f.sub, "status": "active", "metadata": md}),
			r.event("customer.subscription.updated", f.account, map[string]any{"id": f.sub, "status": "active", "metadata": md,
				"cancel_at_period_end": f.kind == recurringEnded}))
		if f.kind == recurringEnded {
			evs = append(evs, r.event("customer.subscription.deleted", f.account, map[string]any{"id": f.sub, "status": "canceled", "metadata": md}))
		}
		f.newest = evs[len(evs)-1]
		if rng.IntN(3) == 0 { // Stripe does not promise order
			rng.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
		}
	case platformNoise:
		evs = append(evs, r.event("customer.created", "", map[string]any{"id": "cus_noise" + strings.ReplaceAll(uuid.NewString(), "-", "")[:14]}))
	}
	f.events = evs
	r.mu.Lock()
	r.flows = append(r.flows, f)
	r.all = append(r.all, evs...)
	r.mu.Unlock()

	var dup sync.WaitGroup
	for _, ev := range evs {
		if rng.IntN(20) == 0 {
			r.gaps.Add(1) // the webhook never comes: only the poller finds it
			continue
		}
		ev.sent = true
		if rng.IntN(10) == 0 {
			// The same event delivered twice at once.
			r.duplicates.Add(1)
			dup.Add(1)
			go func() { defer dup.Done(); r.deliver(ev, 1) }()
		}
		if r.deliver(ev, 3) {
			r.delivered.Add(1)
			ev.delivered = true
		} else {
			r.abandoned.Add(1)
		}
		time.Sleep(time.Duration(rng.IntN(8)) * time.Millisecond)
	}
	dup.Wait()
}

// crashMerchant is the merchant UUID of a flow: one per Stripe account.
func crashMerchant(f *crashFlow) uuid.UUID {
	return uuid.NewSHA1(uuid.NameSpaceOID, []byte(f.account))
}

// createPurchase POSTs /v1/purchases until it answers 201, retrying with the
// same Idempotency-Key across crashes, as a client must.
func (r *crashRun) createPurchase(f *crashFlow, key string, body map[string]any) bool {
	body["account"] = crashMerchant(f).String()
	body["stripe_account"] = f.account
	raw, _ := json.Marshal(body)
	answer, ok := purchase(r.t, r.client, r.srv.adminURL(), crashToken, key, raw, &r.purchaseRetries)
	if !ok {
		return false
	}
	var p struct {
		ID            uuid.UUID `json:"id"`
		PaymentIntent string    `json:"payment_intent"`
		Subscription  string    `json:"subscription"`
	}
	if err := json.Unmarshal(answer, &p); err != nil {
		r.t.Errorf("purchase %s: %v", key, err)
		return false
	}
	f.purchase, f.pi, f.sub = p.ID, p.PaymentIntent, p.Subscription
	if f.pi == "" && f.sub == "" {
		r.t.Errorf("purchase %s answered without its Stripe object: %s", key, answer)
		return false
	}
	return true
}

// event builds a real-shaped event from a fixture, with its own created
// second (so "newest" is well defined) well in the past (so the poller,
// which leaves the last 30 s to the webhook, lists it).
func (r *crashRun) event(fixture, account string, object map[string]any) *sentEvent {
	id, payload := fixtureEvent(r.fixtures[fixture], account, r.base.Unix()+r.created.Add(1), object)
	return &sentEvent{id: id, account: account, payload: payload}
}

// deliver POSTs the signed event to the webhook up to attempts times, as
// Stripe would (briefly): true when it was answered 200.
func (r *crashRun) deliver(ev *sentEvent, attempts int) bool {
	for attempt := 0; attempt < attempts; attempt++ {
		if attempt > 0 {
			time.Sleep(150 * time.Millisecond)
		}
		headers := []string{"Stripe-Signature", stripetest.Sign(ev.payload, crashSecret, time.Now())}
		status, body, err := postJSON(r.client, r.srv.url()+"/webhooks/stripe", ev.payload, headers...)
		if err != nil {
			continue
		}
		if status == http.StatusOK {
			return true
		}
		if status < 500 {
			r.refusals.Add(1)
			r.t.Errorf("a valid event was refused: %s %d %s", ev.id, status, body)
			return false
		}
	}
	return false
}

// checkAcknowledged asserts, before any poll, that every event the webhook
// answered 200 is in the ledger and recorded processed (checkAcknowledged).
// It returns how many events it checked.
func (r *crashRun) checkAcknowledged(pool *pgx.Conn, table string) int {
	var acked []string
	for _, ev := range r.all {
		if ev.delivered {
			acked = append(acked, ev.id)
		}
	}
	checkAcknowledged(r.t, pool, table, acked)
	return len(acked)
}

// checkAcknowledged asserts that every event of acked (answered 200 by a
// webhook) is in the ledger and recorded processed: in the events table,
// or still in the write-behind's pending rows (read first: a row leaves only
// once its record is in the table, so a record moving meanwhile is found in
// the table).
func checkAcknowledged(t *testing.T, pool *pgx.Conn, table string, acked []string) {
	t.Helper()
	ctx := context.Background()
	require.NotEmpty(t, acked, "no event was answered 200")
	pending := map[string]string{} // id -> status
	rows, err := pool.Query(ctx, `SELECT event_id, record FROM event_records_pending`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		var meta []byte
		require.NoError(t, rows.Scan(&id, &meta))
		var m struct {
			Status string `json:"status"`
		}
		require.NoError(t, json.Unmarshal(meta, &m))
		pending[id] = m.Status
	}
	require.NoError(t, rows.Err())
	ledger := map[string]bool{}
	for _, id := range ledgerEventIDs(t, pool) {
		ledger[id] = true
	}
	records := recordsOf(t, events.NewStore(testenv.Dynamo(t), table, 720*time.Hour, nil), acked)
	var lost, unprocessed, unapplied []string
	for _, id := range acked {
		status, isPending := pending[id]
		rec, inTable := records[id]
		switch {
		case isPending:
			if status != string(events.StatusProcessed) {
				unprocessed = append(unprocessed, id+" (pending "+status+")")
			}
		case !inTable:
			lost = append(lost, id)
		case rec.Status != events.StatusProcessed:
			unprocessed = append(unprocessed, id+" ("+string(rec.Status)+")")
		}
		if !ledger[id] {
			unapplied = append(unapplied, id)
		}
	}
	assert.Empty(t, lost, "acknowledged events with no record (before any poll)")
	assert.Empty(t, unprocessed, "acknowledged events not recorded processed (before any poll)")
	assert.Empty(t, unapplied, "acknowledged events whose effects are not applied (before any poll)")
}

// check asserts the run's outcome against the stores and the fakes.
func (r *crashRun) check(pool *pgx.Conn, table string, fake *stripetest.Stripe, sink *crashSink) {
	t := r.t
	ctx := context.Background()
	ids := make([]string, len(r.all))
	for i, ev := range r.all {
		ids[i] = ev.id
	}

	// 0 events missing: every event recorded processed, and in the ledger.
	store := events.NewStore(testenv.Dynamo(t), table, 720*time.Hour, nil)
	records := recordsOf(t, store, ids)
	ledger := map[string]bool{}
	ledgerIDs := ledgerEventIDs(t, pool)
	for _, id := range ledgerIDs {
		ledger[id] = true
	}
	var missing, unprocessed, unledgered []string
	for _, id := range ids {
		rec, ok := records[id]
		switch {
		case !ok:
			missing = append(missing, id)
		case rec.Status != events.StatusProcessed:
			unprocessed = append(unprocessed, id+" ("+string(rec.Status)+": "+rec.LastError+")")
		}
		if !ledger[id] {
			unledgered = append(unledgered, id)
		}
	}
	assert.Empty(t, missing, "events never recorded")
	assert.Empty(t, unprocessed, "events recorded but not processed")
	assert.Empty(t, unledgered, "events whose effects were never applied")
	assert.Len(t, ledgerIDs, len(ids), "ledger rows = unique events (no event applied twice, none unknown)")

	// Actions: one per effect, each delivered at least once under one id.
	type outboxRow struct {
		id        string
		typ, key  string
		delivered bool
		action    actions.Action
	}
	rows, err := pool.Query(ctx, `SELECT id::text, type, dedupe_key, delivered_at IS NOT NULL, payload FROM outbox WHERE topic = 'action'`)
	require.NoError(t, err)
	var outbox []outboxRow
	for rows.Next() {
		var o outboxRow
		var payload []byte
		require.NoError(t, rows.Scan(&o.id, &o.typ, &o.key, &o.delivered, &payload))
		require.NoError(t, json.Unmarshal(payload, &o.action))
		outbox = append(outbox, o)
	}
	require.NoError(t, rows.Err())
	sink.mu.Lock()
	defer sink.mu.Unlock()
	assert.Empty(t, sink.bad, "deliveries the receiver refused")
	fulfilled := map[string][]string{}  // purchase id -> action ids
	terminated := map[string][]string{} // purchase id -> action ids
	for _, o := range outbox {
		assert.True(t, o.delivered, "action %s (%s) not marked delivered", o.id, o.key)
		assert.GreaterOrEqual(t, sink.deliveries[o.id], 1, "action %s (%s) never reached ACTIONS_URL", o.id, o.key)
		switch o.typ {
		case actions.TypePurchaseFulfilled:
			fulfilled[*o.action.PurchaseID] = append(fulfilled[*o.action.PurchaseID], o.id)
		case actions.TypeSubscriptionTerminated:
			terminated[*o.action.PurchaseID] = append(terminated[*o.action.PurchaseID], o.id)
		}
	}
	inOutbox := map[string]bool{}
	for _, o := range outbox {
		inOutbox[o.id] = true
	}
	for id := range sink.deliveries {
		assert.True(t, inOutbox[id], "ACTIONS_URL received action %s that the outbox does not hold", id)
	}
	byEffect := map[string]map[string]bool{} // effect -> distinct action ids received
	for id, a := range sink.byID {
		effect := a.Type + ":" + *a.PurchaseID
		if byEffect[effect] == nil {
			byEffect[effect] = map[string]bool{}
		}
		byEffect[effect][id] = true
	}
	for effect, ids := range byEffect {
		assert.Len(t, ids, 1, "effect %s reached ACTIONS_URL under %d different action ids", effect, len(ids))
	}

	// Per flow: the newest state, the expected effects, nothing stuck.
	var purchases, legacies, recurrings, stuck int
	for _, f := range r.flows {
		if f.kind == platformNoise {
			continue
		}
		purchases++
		var fulfilledRow bool
		var paymentIntent, subscription *string
		require.NoError(t, pool.QueryRow(ctx, `SELECT fulfilled, payment_intent, subscription FROM purchases WHERE id = $1`, f.purchase).
			Scan(&fulfilledRow, &paymentIntent, &subscription), "purchase %s", f.purchase)
		pid := f.purchase.String()
		switch f.kind {
		case legacyPaid, legacyDeclined:
			legacies++
			var status, last string
			require.NoError(t, pool.QueryRow(ctx, `SELECT status::text, coalesce(last_event_id, '') FROM payments WHERE id = $1`, f.pi).Scan(&status, &last))
			want := map[flowKind]string{legacyPaid: "paid", legacyDeclined: "failed"}[f.kind]
			assert.Equal(t, want, status, "payment %s of purchase %s", f.pi, pid)
			assert.Equal(t, f.newest.id, last, "payment %s is not in the state of its newest event", f.pi)
			if f.kind == legacyPaid {
				if !fulfilledRow {
					stuck++
				}
				assert.Len(t, fulfilled[pid], 1, "purchase %s (paid): purchase.fulfilled actions", pid)
			} else {
				assert.False(t, fulfilledRow, "purchase %s fulfilled though its payment failed", pid)
				assert.Empty(t, fulfilled[pid], "purchase %s (declined): no purchase.fulfilled", pid)
			}
			assert.Empty(t, terminated[pid])
		case recurringKept, recurringEnded:
			recurrings++
			var status, last string
			require.NoError(t, pool.QueryRow(ctx, `SELECT status::text, coalesce(last_event_id, '') FROM subscriptions WHERE id = $1`, f.sub).Scan(&status, &last))
			assert.Equal(t, f.newest.id, last, "subscription %s is not in the state of its newest event", f.sub)
			if f.kind == recurringKept {
				assert.Equal(t, "active", status, "subscription %s", f.sub)
				if !fulfilledRow {
					stuck++
				}
				assert.Len(t, fulfilled[pid], 1, "purchase %s (active subscription): purchase.fulfilled actions", pid)
				assert.Empty(t, terminated[pid], "purchase %s (active subscription): no unsubscribe", pid)
			} else {
				// Terminated. Whether it was ever active depends on the order
				// the events were applied in (an older activation never
				// overrides a newer termination); either way the effects
				// match: fulfilled exactly when unsubscribed, once each.
				assert.Equal(t, "terminated", status, "subscription %s", f.sub)
				n := 0
				if fulfilledRow {
					n = 1
				}
				assert.Len(t, fulfilled[pid], n, "purchase %s (ended): purchase.fulfilled actions", pid)
				assert.Len(t, terminated[pid], n, "purchase %s (ended): subscription.terminated actions", pid)
			}
		}
	}
	assert.Zero(t, stuck, "purchases paid but never fulfilled")
	var storedPurchases, unfinished int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE payment_intent IS NULL AND subscription IS NULL) FROM purchases`).
		Scan(&storedPurchases, &unfinished))
	assert.Equal(t, purchases, storedPurchases, "one purchase per client request, retries included")
	assert.Zero(t, unfinished, "purchases left without their Stripe object")
	assert.Equal(t, legacies, fake.Created("payment_intent"), "one PaymentIntent per legacy purchase: no double charge")
	assert.Equal(t, recurrings, fake.Created("subscription"), "one Stripe subscription per recurring purchase")
	var paidUnfulfilled int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM purchases p JOIN payments pay ON pay.id = p.payment_intent
		WHERE pay.status = 'paid' AND NOT p.fulfilled`).Scan(&paidUnfulfilled))
	assert.Zero(t, paidUnfulfilled, "purchases whose payment succeeded but are not fulfilled")
	assert.Zero(t, r.refusals.Load(), "valid events refused")

	t.Logf("checked %d events, %d purchases (%d legacy, %d recurring), %d actions", len(ids), purchases, legacies, recurrings, len(outbox))
}
