package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/store"
	"github.com/stripe-payments/stripe-payments/internal/lock"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// Collections at scale (docs/billing.md "Billing queue", DESIGN §10): N
// subscriptions due on one day of a test clock, each on an account of its
// own, collected by the real binary, through the billing queue by one or
// more `serve` replicas (one of them kill -9ed mid-run and restarted) or in
// process as the baseline. The fake Stripe's own record of PaymentIntents
// is the judge of exactly-once, not the service's.

const (
	collToken   = "collections-test-internal-token"
	collSecret  = "whsec_fake_collections_test_secret"
	collActions = "collections-test-actions-secret"
	collAPIKey  = "sk_test_fake_collections_test_key"
	// The clock stands the day before the due date; one advance makes every
	// period due at once.
	collFrom    = "2024-01-09T12:00:00Z"
	collDueDate = "2024-01-10"
	collTo      = collDueDate + "T12:00:00Z"
	collDay     = 10
)

// collectionsConfig is one collection run to prove or measure.
type collectionsConfig struct {
	Subs     int
	Replicas int
	// Queue: collect through a fresh FIFO queue (with its dead-letter
	// queue and redrive) on the local SQS server; otherwise in process.
	Queue bool
	// Kill: kill -9 replica 2 once KillAfter of the accounts are
	// collected, and start it again half a second later.
	Kill      bool
	KillAfter float64
	// RateLimit is STRIPE_RATE_LIMIT (the fake Stripe itself is unthrottled).
	RateLimit int
}

// collectionsResult is what a run did, for the test's log and the benchmark.
type collectionsResult struct {
	Elapsed time.Duration // the advance: enqueue and drain (or the in-process run)
	// CollectSpan: first to last outcome recorded by the workers (queue only).
	CollectSpan      time.Duration
	DynamoRequests   int
	DynamoOps        map[string]int
	SeedTime         time.Duration
	KilledAt         time.Duration // after the advance began
	CollectedAtKill  int
	ReceivedAgain    int // messages whose account was finished after a first receive that did not end
	Replicas         int // replicas that recorded an outcome of the run
	Collected        int
	NothingDue       int
	PICreations      int
	LoadBefore       string
	LoadAfter        string
	StripeRequests   int
	ReplicaRestarted time.Duration
}

func (r collectionsResult) perSecond(n int) float64 { return float64(n) / r.Elapsed.Seconds() }

// dynamoCounter is a loopback proxy in front of DynamoDB Local that counts
// the replicas' requests by operation (X-Amz-Target).
type dynamoCounter struct {
	URL string
	mu  sync.Mutex
	ops map[string]int
}

func newDynamoCounter(t testing.TB, target string) *dynamoCounter {
	u, err := url.Parse(target)
	require.NoError(t, err)
	c := &dynamoCounter{ops: map[string]int{}}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.Transport = &http.Transport{MaxIdleConnsPerHost: 256}
	proxy.ErrorLog = log.New(io.Discard, "", 0) // a killed replica's requests end mid-way
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := r.Header.Get("X-Amz-Target")
		if i := strings.LastIndexByte(op, '.'); i >= 0 {
			op = op[i+1:]
		}
		c.mu.Lock()
		c.ops[op]++
		c.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

// snapshot returns the counts so far and their total.
func (c *dynamoCounter) snapshot() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out, total := map[string]int{}, 0
	for k, v := range c.ops {
		out[k] = v
		total += v
	}
	return out, total
}

// collAPI calls the internal API of one replica.
func collAPI(t testing.TB, client *http.Client, base, method, path string, body any) (int, map[string]any) {
	t.Helper()
	status, out, err := collCall(client, base, method, path, body)
	require.NoError(t, err, "%s %s", method, path)
	return status, out
}

// collCall is collAPI for a goroutine other than the test's: it returns
// the error instead of ending the test.
func collCall(client *http.Client, base, method, path string, body any) (int, map[string]any, error) {
	var raw []byte
	if body != nil {
		raw, _ = json.Marshal(body)
	}
	req, err := http.NewRequest(method, base+path, bytes.NewReader(raw))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+collToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(answer, &out)
	return resp.StatusCode, out, nil
}

func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func collAccount(i int) string { return fmt.Sprintf("acc-coll-%06d", i) }
func collSub(i int) string     { return fmt.Sprintf("sub-coll-%06d", i) }

// runCollections runs cfg and checks, at the fake Stripe, that every due
// period was charged exactly once and nothing else was; with the queue,
// that the run's record drained with every account accounted for; with a
// kill, that the killed replica's accounts in hand were finished by the
// others.
func runCollections(t testing.TB, cfg collectionsConfig) collectionsResult {
	t.Helper()
	var res collectionsResult
	res.LoadBefore = loadAverage()
	bin := binary(t)
	fake := stripetest.New(t, stripetest.Options{Key: collAPIKey})
	counter := newDynamoCounter(t, testenv.DynamoEndpoint(t))
	sink := testenv.NewActionReceiver(t, collActions)
	vars := stackVars(t, fake, map[string]string{
		"STRIPE_WEBHOOK_SECRET":   collSecret,
		"STRIPE_PLATFORM_ACCOUNT": "acct_1CollPlatform000000",
		"INTERNAL_API_TOKEN":      collToken,
		"ACTIONS_URL":             sink.URL,
		"ACTIONS_SECRET":          collActions,
		"LOG_LEVEL":               "warn",
		"STRIPE_RATE_LIMIT":       fmt.Sprint(cfg.RateLimit),
		// A killed replica's account locks free after 6 s, not 60: its
		// messages come back after their visibility timeout (60 s), by
		// which time their locks are long free.
		"BILLING_LOCK_LEASE":     "6s",
		"BILLING_LOCK_HEARTBEAT": "1s",
	})
	vars["DYNAMODB_ENDPOINT"] = counter.URL
	if cfg.Queue {
		q := testenv.CreateFIFOQueue(t, testenv.SQS(t), 60*time.Second, 10)
		vars["BILLING_QUEUE_URL"] = q.URL
		vars["SQS_ENDPOINT"] = testenv.SQSEndpoint(t)
	}
	migrateStack(t, bin, vars)

	replicas := make([]*server, cfg.Replicas)
	for i := range replicas {
		addr := freeAddr(t)
		replicas[i] = newServer(t, bin, with(vars, addr), addr)
		replicas[i].start()
	}
	client := &http.Client{Timeout: 30 * time.Second}
	front := replicas[0].adminURL()
	status, clock := collAPI(t, client, front, http.MethodPost, "/internal/v1/test_clocks", map[string]any{"frozen_time": collFrom, "name": "collections"})
	require.Equal(t, http.StatusCreated, status, "%v", clock)
	clockID := clock["id"].(string)

	seedStart := time.Now()
	seedCollections(t, vars, clockID, cfg.Subs)
	res.SeedTime = time.Since(seedStart)
	status, sub := collAPI(t, client, front, http.MethodGet, "/internal/v1/accounts/"+collAccount(0)+"/subscriptions/"+collSub(0), nil)
	require.Equal(t, http.StatusOK, status, "%v", sub)
	require.Equal(t, collDueDate, sub["next_payment_date"], "the seeded subscriptions are due on the clock's next day: %v", sub)

	dbURL := vars["DATABASE_URL"]
	pool := connect(t, dbURL)
	ctx := context.Background()
	_, ddbBefore := counter.snapshot()
	opsBefore, _ := counter.snapshot()
	stripeBefore := len(fake.Requests())

	// The advance runs on replica 1; replica 2 is the one killed.
	begin := time.Now()
	advanced := make(chan struct{})
	go func() {
		defer close(advanced)
		advClient := &http.Client{Timeout: 20 * time.Minute}
		status, body, err := collCall(advClient, front, http.MethodPost, "/internal/v1/test_clocks/"+clockID+"/advance", map[string]any{"frozen_time": collTo})
		if err != nil || status != http.StatusOK && status != http.StatusAccepted {
			t.Errorf("advance: %d %v %v", status, body, err)
		}
	}()
	var victimReplica string
	if cfg.Kill {
		require.GreaterOrEqual(t, cfg.Replicas, 2, "a kill needs a replica to do the work meanwhile")
		victim := replicas[1]
		threshold := int(float64(cfg.Subs) * cfg.KillAfter)
		waitFor(t, 15*time.Minute, fmt.Sprintf("%d accounts collected before the kill", threshold), func() (bool, string) {
			var n int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ops_billing_queue_messages m JOIN ops_billing_queue_runs r ON r.id = m.run_id
				WHERE r.test_clock = $1 AND m.outcome = 'collected'`, clockID).Scan(&n))
			res.CollectedAtKill = n
			return n >= threshold, fmt.Sprintf("%d collected", n)
		})
		host, _ := os.Hostname()
		victimReplica = fmt.Sprintf("%s/%d", host, victim.cmd.Process.Pid)
		victim.kill()
		res.KilledAt = time.Since(begin)
		var collected int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ops_billing_queue_messages m JOIN ops_billing_queue_runs r ON r.id = m.run_id
			WHERE r.test_clock = $1 AND m.outcome = 'collected'`, clockID).Scan(&collected))
		require.Less(t, collected, cfg.Subs, "the kill came after the run had drained: it proves nothing")
		time.Sleep(500 * time.Millisecond)
		res.ReplicaRestarted = victim.start()
	}
	<-advanced
	waitFor(t, 20*time.Minute, "the clock's advance to finish", func() (bool, string) {
		status, c := collAPI(t, client, front, http.MethodGet, "/internal/v1/test_clocks/"+clockID, nil)
		require.Equal(t, http.StatusOK, status, "%v", c)
		require.NotEqual(t, "internal_failure", c["status"], "the advance failed: %v", c)
		return c["status"] == "ready", fmt.Sprintf("status %v", c["status"])
	})
	res.Elapsed = time.Since(begin)
	opsAfter, ddbAfter := counter.snapshot()
	res.DynamoRequests = ddbAfter - ddbBefore
	res.DynamoOps = map[string]int{}
	for k, v := range opsAfter {
		if d := v - opsBefore[k]; d > 0 {
			res.DynamoOps[k] = d
		}
	}
	res.StripeRequests = len(fake.Requests()) - stripeBefore
	res.LoadAfter = loadAverage()

	checkCollectedOnce(t, fake, cfg.Subs, &res)
	if cfg.Queue {
		checkQueueRun(t, pool, client, front, clockID, cfg, victimReplica, &res)
	}

	for i, s := range replicas {
		assert.NoError(t, s.stop(30*time.Second), "replica %d exits cleanly on SIGTERM (a -race binary exits 66 after a data race)", i+1)
		logs := s.allLogs()
		for _, bad := range []string{"WARNING: DATA RACE", "panic:", "fatal error:"} {
			assert.NotContains(t, logs, bad, "replica %d's logs show %q", i+1, bad)
		}
	}
	return res
}

// seedCollections creates n subscriptions on the clock, each on an account
// of its own, due on its next day, through the billing core's own create
// (what the API's create calls) on the replicas' tables: the API would take
// minutes for 100,000.
func seedCollections(t testing.TB, vars map[string]string, clockID string, n int) {
	t.Helper()
	ddb := testenv.Dynamo(t)
	st := store.New(ddb, vars["BILLING_TABLE"], vars["BILLING_HISTORY_TABLE"], billing.DefaultConfig().Shards)
	locks := lock.New(ddb, vars["LOCKS_TABLE"], lock.Options{Lease: 6 * time.Second, Heartbeat: time.Second})
	svc, err := billing.New(billing.Config{}, billing.Deps{Store: st, Locks: locks, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	const workers = 16
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				in := billing.CreateInput{SubscriptionID: collSub(i), SKU: "gold", Email: "coll@example.com", PaymentDay: collDay,
					Amount: int64(1000 + i%1000), Currency: "usd", Term: dates.Monthly, Customer: "cus_coll",
					PaymentMethod: "pm_card_visa", TestClock: clockID}
				if _, err := svc.CreateSubscription(context.Background(), collAccount(i), in); err != nil {
					errs <- fmt.Errorf("seed %s: %w", collSub(i), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// checkCollectedOnce: at the fake Stripe, every seeded period has exactly
// one successful PaymentIntent, no PaymentIntent was made for anything
// else, and no period got a second PaymentIntent (every charge succeeds
// here, so a second creation would be a second attempt next to one in
// flight).
func checkCollectedOnce(t testing.TB, fake *stripetest.Stripe, n int, res *collectionsResult) {
	t.Helper()
	successful := fake.Successful()
	var missed, twice []string
	want := make(map[string]bool, n)
	for i := range n {
		key := stripetest.PeriodKey(collAccount(i), collSub(i), collDueDate)
		want[key] = true
		switch got := len(successful[key]); {
		case got == 0:
			missed = append(missed, key)
		case got > 1:
			twice = append(twice, fmt.Sprintf("%s ×%d %v", key, got, successful[key]))
		}
	}
	var stray []string
	for key := range successful {
		if !want[key] {
			stray = append(stray, key)
		}
	}
	perPeriod := map[string]int{}
	for _, p := range fake.PIs() {
		res.PICreations++
		perPeriod[stripetest.PeriodKey(p.Metadata[billing.MetaAccount], p.Metadata[billing.MetaSubscription], p.Metadata[billing.MetaDate])]++
	}
	var recreated []string
	for key, c := range perPeriod {
		if c > 1 {
			recreated = append(recreated, fmt.Sprintf("%s ×%d", key, c))
		}
	}
	sort.Strings(missed)
	sort.Strings(twice)
	assert.Empty(t, twice, "periods charged more than once at Stripe")
	assert.Empty(t, missed, "due periods never charged at Stripe (of %d)", n)
	assert.Empty(t, stray, "PaymentIntents for periods that were not due")
	assert.Empty(t, recreated, "periods with more than one PaymentIntent at Stripe")
	assert.Equal(t, n, res.PICreations, "PaymentIntents created at Stripe: one per due period")
}

// checkQueueRun: the run's record drained with every account accounted for
// (collected, or found with nothing due when a killed worker had charged
// it but not recorded it), nothing failed or dead, and, after a kill, the
// killed replica's accounts in hand received again and finished by another
// replica.
func checkQueueRun(t testing.TB, pool *pgx.Conn, client *http.Client, front, clockID string, cfg collectionsConfig, victim string, res *collectionsResult) {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT r.id::text, r.date::text, r.enqueued, r.superseded_at IS NOT NULL,
			coalesce(min(m.at), r.started_at), coalesce(max(m.at), r.started_at)
		FROM ops_billing_queue_runs r LEFT JOIN ops_billing_queue_messages m ON m.run_id = r.id
		WHERE r.test_clock = $1 GROUP BY r.id ORDER BY r.started_at`, clockID)
	require.NoError(t, err)
	var runID string
	var runs []string
	for rows.Next() {
		var id, date string
		var enqueued int
		var superseded bool
		var first, last time.Time
		require.NoError(t, rows.Scan(&id, &date, &enqueued, &superseded, &first, &last))
		runs = append(runs, fmt.Sprintf("%s %s enqueued %d superseded %v", id, date, enqueued, superseded))
		if !superseded {
			runID, res.CollectSpan = id, last.Sub(first)
		}
	}
	require.NoError(t, rows.Err())
	// One advance by one day is one collection run (its job date is the
	// next UTC date, as the real ticker's); a superseded run would have read
	// the index again.
	require.Len(t, runs, 1, "queued runs on the clock: %v", runs)
	require.NotEmpty(t, runID, "the clock's run was superseded: %v", runs)
	status, run := collAPI(t, client, front, http.MethodGet, "/internal/v1/billing/queue-runs/"+runID, nil)
	require.Equal(t, http.StatusOK, status, "%v", run)
	assert.Equal(t, "drained", run["status"], "the run's record: %v", run)
	num := func(k string) int { f, _ := run[k].(float64); return int(f) }
	res.Collected, res.NothingDue, res.Replicas = num("collected"), num("nothing_due"), num("replicas")
	assert.Equal(t, cfg.Subs, num("enqueued"), "one message per account due: %v", run)
	assert.Equal(t, cfg.Subs, res.Collected+res.NothingDue, "every message ended collected (or found done): %v", run)
	assert.Zero(t, num("failed"), "failed messages: %v", run)
	if !cfg.Kill {
		assert.Zero(t, res.NothingDue, "without a kill no account is found done: %v", run)
	}
	var dead, locked int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE outcome = 'dead'), count(*) FILTER (WHERE outcome = 'locked')
		FROM ops_billing_queue_messages WHERE run_id = $1`, runID).Scan(&dead, &locked))
	assert.Zero(t, dead, "dead letters")
	assert.Zero(t, locked, "messages left waiting for a lock")
	if cfg.Kill {
		var again, byVictim int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE receives >= 2), count(*) FILTER (WHERE receives >= 2 AND replica = $2)
			FROM ops_billing_queue_messages WHERE run_id = $1`, runID, victim).Scan(&again, &byVictim))
		res.ReceivedAgain = again
		assert.Positive(t, again, "the killed replica had accounts in hand, received again after their visibility timeout")
		assert.Zero(t, byVictim, "an account received again was finished by the killed process itself")
	}
}

// TestBillingQueueKill9ChargesEveryPeriodOnce: 2,000 subscriptions due on
// one day of a test clock, each on its own account, collected through the
// billing queue by three replicas of the real binary; replica 2 is
// kill -9ed once a quarter of the accounts are collected and started
// again. Every due period is charged exactly once at Stripe, none is
// missed, the killed replica's accounts in hand are finished by the others
// and the run's record drains with every account accounted for.
func TestBillingQueueKill9ChargesEveryPeriodOnce(t *testing.T) {
	if testing.Short() {
		t.Fatal("this test has no short mode; run it with `make test`")
	}
	t.Parallel()
	const subs = 2000
	res := runCollections(t, collectionsConfig{Subs: subs, Replicas: 3, Queue: true, Kill: true, KillAfter: 0.25, RateLimit: 1000})
	t.Logf("billing queue, 3 replicas, kill -9: %d periods due, seeded in %s; advance %s (%.1f accounts/s; workers' span %s); kill -9 of replica 2 at %s with %d collected, healthy again in %s; %d messages received again and finished by another replica; %d collected, %d found done; %d replicas recorded outcomes; %d PaymentIntents created; %d Stripe requests; DynamoDB %d requests (%.2f per collection) %v; load %s → %s",
		subs, res.SeedTime.Round(time.Millisecond), res.Elapsed.Round(time.Millisecond), res.perSecond(subs), res.CollectSpan.Round(time.Millisecond),
		res.KilledAt.Round(time.Millisecond), res.CollectedAtKill, res.ReplicaRestarted.Round(time.Millisecond), res.ReceivedAgain,
		res.Collected, res.NothingDue, res.Replicas, res.PICreations, res.StripeRequests, res.DynamoRequests,
		float64(res.DynamoRequests)/subs, res.DynamoOps, res.LoadBefore, res.LoadAfter)
}
