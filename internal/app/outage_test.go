package app_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/app"
	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/handler"
	"github.com/stripe-payments/stripe-payments/internal/postgres"
	"github.com/stripe-payments/stripe-payments/internal/recordq"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// outageEnv is the real program behind fault proxies on Postgres and
// DynamoDB, with an ACTIONS_URL receiver and direct (unproxied) access to
// both stores for the test's own checks.
type outageEnv struct {
	app    *apptest.App
	pg     *testenv.FaultProxy
	ddb    *testenv.FaultProxy
	direct *pgxpool.Pool           // Postgres, not through the proxy
	events *events.Store           // DynamoDB, not through the proxy
	queue  *recordq.Queue          // the write-behind's Postgres side, not through the proxy
	sink   *testenv.ActionReceiver // ACTIONS_URL
	client *http.Client            // the sender's
	merch  string                  // the purchases' merchant account (UUID)
	purch  chan uuid.UUID          // purchases waiting for their payment
}

// effectsTable is written by a test applier beside the real flows, once
// per application of an event. It has no key: an event applied twice would
// show two rows (the ledger's primary key could never show that).
const effectsTable = `CREATE TABLE test_effects (event_id text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`

func startOutageEnv(t *testing.T, overrides map[string]string) *outageEnv {
	t.Helper()
	directURL := testenv.DatabaseURL(t)
	dbURL, err := url.Parse(directURL)
	require.NoError(t, err)
	e := &outageEnv{pg: testenv.NewFaultProxy(t, dbURL.Host), sink: newActionSink(t), merch: uuid.NewString()}
	dbURL.Host = e.pg.Addr()
	dynamoURL, err := url.Parse(testenv.DynamoEndpoint(t))
	require.NoError(t, err)
	e.ddb = testenv.NewFaultProxy(t, dynamoURL.Host)

	ctx := context.Background()
	e.direct, err = postgres.Connect(ctx, directURL)
	require.NoError(t, err)
	t.Cleanup(e.direct.Close)
	_, err = e.direct.Exec(ctx, effectsTable)
	require.NoError(t, err)
	// Purchases the events pay for, one each, made up front: the test's
	// own writes must not depend on the dependencies it breaks. Enough for
	// every sender at full speed through the whole test: with the
	// write-behind, deliveries go on being accepted while DynamoDB is
	// black-holed, until the writers' failure closes admission.
	const purchases = 16000
	e.purch = make(chan uuid.UUID, purchases)
	rows := make([][]any, purchases)
	for i := range rows {
		id := uuid.New()
		e.purch <- id
		rows[i] = []any{id, e.merch, merchant, "legacy"}
	}
	_, err = e.direct.CopyFrom(ctx, pgx.Identifier{"purchases"}, []string{"id", "account", "stripe_account", "kind"}, pgx.CopyFromRows(rows))
	require.NoError(t, err)

	env := map[string]string{
		"DATABASE_URL":      dbURL.String(),
		"DYNAMODB_ENDPOINT": "http://" + e.ddb.Addr(),
		"ACTIONS_URL":       e.sink.URL,
		"ACTIONS_SECRET":    actionsSecret,
	}
	for k, v := range overrides {
		env[k] = v
	}
	e.app = startApp(t, nil, env, app.WithRoutes(func(r handler.Routes) handler.Routes {
		return r.With("payment_intent.succeeded", func(ctx context.Context, tx handler.Tx, ev *stripe.Event) error {
			_, err := tx.Exec(ctx, `INSERT INTO test_effects (event_id) VALUES ($1)`, ev.ID)
			return err
		})
	}))
	e.events = events.NewStore(testenv.Dynamo(t), e.app.Config.EventsTable, e.app.Config.EventTTL, nil)
	e.queue = recordq.New(e.direct, e.events, recordq.Config{})
	e.client = &http.Client{Timeout: 60 * time.Second}
	return e
}

// delivery is one event and what the webhook answered it.
type delivery struct {
	id       string
	purchase uuid.UUID
	payload  []byte
	ok       bool
}

// answer is one webhook answer.
type answer struct {
	status     int
	retryAfter string
	queueFull  bool // a 503 because the ingest queue was full
	elapsed    time.Duration
}

// newDelivery builds a payment_intent.succeeded paying the next purchase, or
// returns nil once they are used up.
func (e *outageEnv) newDelivery(t *testing.T) *delivery {
	select {
	case p := <-e.purch:
		id := stripetest.NewID()
		payload := stripetest.Event{Fixture: "payment_intent.succeeded", ID: id, Object: map[string]any{
			"id":       "pi_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:24],
			"metadata": map[string]any{"purchase_id": p.String(), "account": e.merch},
		}}.Build(t)
		return &delivery{id: id, purchase: p, payload: payload}
	default:
		return nil
	}
}

// send delivers d once, as Stripe does. A 200 is checked at once, directly
// in both stores: the event must be durable (recorded processed, its effect
// committed) when the webhook says so, outage or not.
func (e *outageEnv) send(t *testing.T, d *delivery) (answer, error) {
	req, err := http.NewRequest(http.MethodPost, e.app.Server.URL()+"/webhooks/stripe", bytes.NewReader(d.payload))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Stripe-Signature", stripetest.Sign(d.payload, secret, time.Now()))
	start := time.Now()
	resp, err := e.client.Do(req)
	if err != nil {
		return answer{}, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	a := answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), elapsed: time.Since(start),
		queueFull: bytes.Contains(body, []byte("ingest queue full"))}
	if a.status == http.StatusOK {
		d.ok = true
		ctx := context.Background()
		// Recorded in the events table, or still in the write-behind's
		// Postgres table (committed with the effects, copied after).
		pending, err := e.queue.Lookup(ctx, []string{d.id})
		require.NoError(t, err)
		rec, ok := pending[d.id]
		if !ok {
			rec, err = e.events.Get(ctx, d.id)
			assert.NoError(t, err, "event %s answered 200 but not recorded", d.id)
		}
		assert.Equal(t, events.StatusProcessed, rec.Status, "event %s answered 200", d.id)
		var n int
		require.NoError(t, e.direct.QueryRow(ctx, `SELECT count(*) FROM test_effects WHERE event_id = $1`, d.id).Scan(&n))
		assert.Equal(t, 1, n, "event %s answered 200: its effect committed once", d.id)
	} else {
		assert.Equal(t, http.StatusServiceUnavailable, a.status, "a valid event is refused only with a 503 (never a 4xx): event %s", d.id)
		assert.NotEmpty(t, a.retryAfter, "a 503 says when to come again")
	}
	return a, nil
}

// load sends events from senders goroutines until stop; refused deliveries
// wait pause before the sender goes on (a client backing off).
type load struct {
	e        *outageEnv
	mu       sync.Mutex
	sent     []*delivery
	answers  []answer
	refused  atomic.Int64
	accepted atomic.Int64
	stop     chan struct{}
	wg       sync.WaitGroup
	// record, when true, keeps every answer (during an outage).
	record atomic.Bool
}

func (e *outageEnv) startLoad(t *testing.T, senders int, pause time.Duration) *load {
	l := &load{e: e, stop: make(chan struct{})}
	for range senders {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				d := e.newDelivery(t)
				if d == nil {
					return
				}
				recording := l.record.Load()
				a, err := e.send(t, d)
				l.mu.Lock()
				l.sent = append(l.sent, d)
				if recording && err == nil {
					l.answers = append(l.answers, a)
				}
				l.mu.Unlock()
				if d.ok {
					l.accepted.Add(1)
					time.Sleep(5 * time.Millisecond)
				} else {
					l.refused.Add(1)
					time.Sleep(pause)
				}
			}
		}()
	}
	return l
}

func (l *load) finish() []*delivery {
	close(l.stop)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent
}

// outageAnswers returns the answers recorded since the last call.
func (l *load) takeAnswers() []answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.answers
	l.answers = nil
	return a
}

func (e *outageEnv) ready() int {
	resp, err := e.client.Get(e.app.Admin.URL() + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (e *outageEnv) waitReady(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for e.ready() != want {
		require.True(t, time.Now().Before(deadline), "/readyz never became %d", want)
		time.Sleep(100 * time.Millisecond)
	}
}

// redeliver sends every unacknowledged event again until it is accepted, as
// Stripe does after an outage (several at a time, as Stripe does too).
func (e *outageEnv) redeliver(t *testing.T, sent []*delivery) {
	todo := make(chan *delivery, len(sent))
	for _, d := range sent {
		if !d.ok {
			todo <- d
		}
	}
	close(todo)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range todo {
				for attempt := 0; !d.ok; attempt++ {
					if !assert.Less(t, attempt, 50, "event %s never accepted after recovery", d.id) {
						break
					}
					if _, err := e.send(t, d); err != nil || !d.ok {
						time.Sleep(200 * time.Millisecond)
					}
				}
			}
		}()
	}
	wg.Wait()
}

// assertEachProcessedOnce checks, by event id, that every sent event is
// recorded processed with its effect applied exactly once, and, by purchase,
// that each purchase.fulfilled action reached ACTIONS_URL under exactly one
// action id (redeliveries of that id are allowed: delivery is at least once).
func (e *outageEnv) assertEachProcessedOnce(t *testing.T, sent []*delivery) {
	t.Helper()
	ctx := context.Background()
	ids := make([]string, len(sent))
	want := map[string]bool{}
	for i, d := range sent {
		ids[i] = d.id
		want[d.purchase.String()] = true
	}
	// The write-behind copies the last records to the events table
	// moments after their acknowledgement.
	var records map[string]events.Record
	require.Eventually(t, func() bool {
		var err error
		records, err = e.events.BatchGet(ctx, ids)
		if err != nil {
			return false
		}
		for _, r := range records {
			if r.Status != events.StatusProcessed {
				return false
			}
		}
		return len(records) == len(ids)
	}, 60*time.Second, 200*time.Millisecond, "every event recorded processed in the events table")
	effects := map[string]int{}
	rows, err := e.direct.Query(ctx, `SELECT event_id FROM test_effects`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		effects[id]++
	}
	require.NoError(t, rows.Err())
	for _, d := range sent {
		rec, ok := records[d.id]
		if assert.True(t, ok, "event %s not recorded", d.id) {
			assert.Equal(t, events.StatusProcessed, rec.Status, "event %s", d.id)
		}
		assert.Equal(t, 1, effects[d.id], "event %s applied %d times", d.id, effects[d.id])
	}
	assert.Len(t, effects, len(sent), "effects only of the events sent")

	// Every fulfilment reaches ACTIONS_URL, each under one action id.
	byPurchase := map[string]map[string]bool{}
	require.Eventually(t, func() bool {
		byPurchase = map[string]map[string]bool{}
		for _, a := range received(t, e.sink) {
			if a.PurchaseID == nil {
				continue
			}
			if byPurchase[*a.PurchaseID] == nil {
				byPurchase[*a.PurchaseID] = map[string]bool{}
			}
			byPurchase[*a.PurchaseID][a.ID.String()] = true
		}
		return len(byPurchase) >= len(want)
	}, 60*time.Second, 100*time.Millisecond, "every purchase's fulfilment delivered to ACTIONS_URL")
	for p, actionIDs := range byPurchase {
		assert.True(t, want[p], "action for purchase %s, which no event paid", p)
		assert.Len(t, actionIDs, 1, "purchase %s fulfilled under %d action ids", p, len(actionIDs))
	}
}

// TestDependencyOutages stops Postgres, then DynamoDB, under load (a proxy
// resets every connection and refuses new ones), and before DynamoDB stops
// it black-holes it until the write-behind's backlog is full. It shows:
// every 200 is durable when answered (checked at once, directly in both
// stores); refusals are 503s; the backlog fills to its bound and no
// further, and then deliveries are refused; /readyz turns red and back
// green; after recovery plus redeliveries every event sent, by id, is
// recorded processed with its effect applied once and one action per
// purchase. Every step waits for a condition, none for a fixed time.
func TestDependencyOutages(t *testing.T) {
	if testing.Short() {
		t.Fatal("this test has no short mode; run it with `make test`")
	}
	const (
		backlog = 100 // INGEST_RECORD_BACKLOG's minimum
		senders = 6
	)
	e := startOutageEnv(t, map[string]string{"INGEST_RECORD_BACKLOG": "100"})
	l := e.startLoad(t, senders, 20*time.Millisecond)
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		require.Eventually(t, cond, 60*time.Second, 10*time.Millisecond, what)
	}
	flowing := func(what string) { // the load is accepted again
		t.Helper()
		accepted := l.accepted.Load()
		waitUntil(what, func() bool { return l.accepted.Load() >= accepted+50 })
	}
	refusing := func(what string) { // the outage is real: deliveries are refused
		t.Helper()
		refused := l.refused.Load()
		waitUntil(what, func() bool { return l.refused.Load() >= refused+20 })
	}
	outage := func(name string, p *testenv.FaultProxy) {
		t.Helper()
		p.Cut()
		e.waitReady(t, http.StatusServiceUnavailable)
		refusing(name + " outage refuses deliveries")
		p.Restore()
		e.waitReady(t, http.StatusOK)
		flowing("load accepted again after the " + name + " outage")
	}
	flowing("load accepted before the outages")
	outage("postgres", e.pg)

	// DynamoDB stops answering: the webhook answers on the Postgres commit
	// while the write-behind's backlog grows, up to its bound.
	var maxBacklog atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			maxBacklog.Store(max(maxBacklog.Load(), int64(e.app.Records.Backlog())))
			select {
			case <-stopSampling:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	refusedBefore := l.refused.Load()
	e.ddb.BlackHole()
	waitUntil("the write-behind backlog fills to its bound", func() bool { return maxBacklog.Load() >= backlog })
	waitUntil("deliveries refused once the backlog is full", func() bool { return l.refused.Load() > refusedBefore })
	outage("dynamodb", e.ddb)
	waitUntil("the backlog drains", func() bool { return e.app.Records.Backlog() == 0 })
	close(stopSampling)
	<-sampled
	// Admit is asked before a delivery is processed: the deliveries in
	// flight when the bound is met may each add their record.
	assert.LessOrEqual(t, maxBacklog.Load(), int64(backlog+senders), "the backlog stays at its bound")

	sent := l.finish()
	e.redeliver(t, sent)
	e.assertEachProcessedOnce(t, sent)
	t.Logf("%d events, %d refusals during the outages; write-behind backlog max %d (bound %d)",
		len(sent), l.refused.Load(), maxBacklog.Load(), backlog)
}

// TestDependencyBlackHoles black-holes Postgres, then DynamoDB (the proxy
// stops forwarding and closes nothing: packets silently dropped, as in a
// partition or a failover) under a load larger than the ingest queue, and
// shows: every refusal is a 503 with Retry-After answered within
// INGEST_TIMEOUT, the queue and the heap stay bounded, /readyz turns red,
// and once the network is back the service recovers by itself and every
// event, redelivered, is processed exactly once.
func TestDependencyBlackHoles(t *testing.T) {
	if testing.Short() {
		t.Fatal("this test has no short mode; run it with `make test`")
	}
	const (
		ingestTimeout = 4 * time.Second
		queueMax      = 16
		senders       = 40 // more than the queue holds
	)
	e := startOutageEnv(t, map[string]string{
		"INGEST_TIMEOUT":       ingestTimeout.String(),
		"INGEST_BATCH_TIMEOUT": "2s",
		"INGEST_QUEUE_MAX":     "16",
		"DYNAMODB_TIMEOUT":     "2s",
	})
	var base runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&base)
	l := e.startLoad(t, senders, 200*time.Millisecond)

	fullTotal := 0
	blackHole := func(name string, p *testenv.FaultProxy) {
		time.Sleep(2 * time.Second)
		before := l.refused.Load()
		l.takeAnswers()
		l.record.Store(true)
		p.BlackHole()
		// Sample the queue and the heap while the dependency is gone.
		var maxQueued int
		var maxBytes int64
		var maxHeap uint64
		sample := func() {
			s := e.app.Handler.Stats()
			maxQueued, maxBytes = max(maxQueued, s.Queued), max(maxBytes, s.Bytes)
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			maxHeap = max(maxHeap, m.HeapAlloc)
		}
		e.waitReady(t, http.StatusServiceUnavailable)
		for end := time.Now().Add(12 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			sample()
		}
		l.record.Store(false)
		restored := time.Now()
		p.Restore()
		e.waitReady(t, http.StatusOK)
		readyAfter := time.Since(restored)
		accepted := l.accepted.Load()
		require.Eventually(t, func() bool { return l.accepted.Load() > accepted }, 60*time.Second, 50*time.Millisecond,
			"ingest never accepted an event again after %s came back", name)
		acceptingAfter := time.Since(restored)

		answers := l.takeAnswers()
		var slowest time.Duration
		full := 0
		for _, a := range answers {
			if a.status == http.StatusOK {
				continue
			}
			slowest = max(slowest, a.elapsed)
			if a.queueFull {
				full++
			}
			assert.LessOrEqual(t, a.elapsed, ingestTimeout+3*time.Second, "%s black-holed: a refusal came after %s", name, a.elapsed)
		}
		assert.Greater(t, l.refused.Load(), before, "%s black hole refused nothing: it was not real", name)
		fullTotal += full
		assert.LessOrEqual(t, maxQueued, queueMax, "%s: queue bounded", name)
		heapGrowth := int64(maxHeap) - int64(base.HeapAlloc)
		assert.Less(t, heapGrowth, int64(64<<20), "%s: heap bounded", name)
		t.Logf("%s black-holed: %d answers, slowest refusal %s (INGEST_TIMEOUT %s), %d refused at once; "+
			"queue max %d deliveries / %d bytes (bound %d); heap max %.1f MiB (+%.1f MiB); ready %s and accepting %s after restore",
			name, len(answers), slowest.Round(time.Millisecond), ingestTimeout, full, maxQueued, maxBytes, queueMax,
			float64(maxHeap)/(1<<20), float64(heapGrowth)/(1<<20), readyAfter.Round(time.Millisecond), acceptingAfter.Round(time.Millisecond))
	}
	blackHole("postgres", e.pg)
	blackHole("dynamodb", e.ddb)
	// Where deliveries wait depends on the dependency (a DynamoDB outage
	// may hold them elsewhere, each within its deadline); the queue bound
	// must have been met at least once.
	assert.Greater(t, fullTotal, 0, "the queue filled and refused at once")
	sent := l.finish()
	e.redeliver(t, sent)
	e.assertEachProcessedOnce(t, sent)
	t.Logf("%d events, %d refusals, all processed once after redelivery", len(sent), l.refused.Load())
}
