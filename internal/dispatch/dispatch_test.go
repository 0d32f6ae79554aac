package dispatch_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/actions"
	"github.com/stripe-payments/stripe-payments/internal/dispatch"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

const secret = "actions-test-secret"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// receiver is an ACTIONS_URL endpoint that can be down (connection dropped,
// or 503) and records every delivery attempt.
type receiver struct {
	t    *testing.T
	srv  *httptest.Server
	mode atomic.Int32 // 0 up, 1 drops connections, 2 answers 503, 3 answers 400
	slow atomic.Int64 // nanoseconds to wait before answering

	mu       sync.Mutex
	attempts []attempt
	ok       map[uuid.UUID]int // successful deliveries per action id
}

type attempt struct {
	id        uuid.UUID // from Idempotency-Key
	body      actions.Action
	signature error
	ok        bool
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{t: t, ok: map[uuid.UUID]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var a actions.Action
	_ = json.Unmarshal(body, &a)
	id, _ := uuid.Parse(req.Header.Get("Idempotency-Key"))
	at := attempt{id: id, body: a, signature: dispatch.Verify(req.Header.Get("X-Signature"), secret, body, 5*time.Minute, time.Now())}
	if d := r.slow.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	mode := r.mode.Load()
	at.ok = mode == 0
	r.mu.Lock()
	r.attempts = append(r.attempts, at)
	if at.ok {
		r.ok[id]++
	}
	r.mu.Unlock()
	switch mode {
	case 1:
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	case 2:
		http.Error(w, `{"error":"maintenance"}`, http.StatusServiceUnavailable)
	case 3:
		http.Error(w, `{"error":"bad"}`, http.StatusBadRequest)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

func (r *receiver) snapshot() ([]attempt, map[uuid.UUID]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := map[uuid.UUID]int{}
	for k, v := range r.ok {
		ok[k] = v
	}
	return append([]attempt(nil), r.attempts...), ok
}

// enqueue writes n actions, one per effect, and returns their ids by dedupe key.
func enqueue(t *testing.T, pool *pgxpool.Pool, n int) map[string]uuid.UUID {
	t.Helper()
	ctx := context.Background()
	keys := map[string]uuid.UUID{}
	for i := range n {
		purchase := uuid.NewString()
		key := actions.DedupeKey(actions.TypePurchaseFulfilled, purchase)
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			a := actions.Action{Type: actions.TypePurchaseFulfilled, Account: uuid.NewString(), StripeAccount: "acct_test", PurchaseID: &purchase}
			added, err := actions.Enqueue(ctx, tx, a, key, time.Now())
			require.True(t, added, "action %d", i)
			return err
		}))
		// The same effect caused again: no second action.
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			added, err := actions.Enqueue(ctx, tx, actions.Action{Type: actions.TypePurchaseFulfilled, PurchaseID: &purchase}, key, time.Now())
			require.False(t, added)
			return err
		}))
		var id uuid.UUID
		require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM outbox WHERE dedupe_key = $1`, key).Scan(&id))
		keys[key] = id
	}
	return keys
}

func fast(int) time.Duration { return 50 * time.Millisecond }

func waitDelivered(t *testing.T, pool *pgxpool.Pool, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		n, err := outbox.Pending(context.Background(), pool, actions.Topic)
		require.NoError(t, err)
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d actions still pending after %s", n, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReceiverDownThenUp: while the receiver drops connections, then answers
// 503, every action is retried with backoff; once it is up, every action is
// delivered, each under its one id (never a new id for the same effect),
// signed, with Idempotency-Key = the body's id. A dispatcher restart in the
// middle loses nothing.
func TestReceiverDownThenUp(t *testing.T) {
	pool := testenv.Postgres(t)
	r := newReceiver(t)
	ids := enqueue(t, pool, 12)
	r.mode.Store(1)

	start := func() (stop func()) {
		d := dispatch.New(pool, dispatch.Config{URL: r.srv.URL, Secret: secret, Backoff: fast, Idle: 10 * time.Millisecond, Log: quiet})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = d.Run(ctx) }()
		return func() { cancel(); <-done }
	}
	stop := start()
	time.Sleep(300 * time.Millisecond)
	r.mode.Store(2)
	time.Sleep(300 * time.Millisecond)
	// Restart the dispatcher while the receiver is still down.
	stop()
	stop = start()
	defer func() { stop() }()
	time.Sleep(200 * time.Millisecond)
	r.mode.Store(0)
	waitDelivered(t, pool, 20*time.Second)

	attempts, ok := r.snapshot()
	failed := 0
	for _, a := range attempts {
		require.NoError(t, a.signature, "every delivery is signed")
		assert.Equal(t, a.id, a.body.ID, "Idempotency-Key is the action id")
		if !a.ok {
			failed++
		}
	}
	assert.Greater(t, failed, len(ids), "the receiver was down for several rounds")
	require.Len(t, ok, len(ids), "every action delivered")
	for key, id := range ids {
		assert.Equal(t, 1, ok[id], "action %s delivered once", key)
	}
	// No attempt ever carried an id outside the enqueued set.
	known := map[uuid.UUID]bool{}
	for _, id := range ids {
		known[id] = true
	}
	for _, a := range attempts {
		assert.True(t, known[a.id], "unknown action id %s", a.id)
	}
	var maxAttempts int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT max(attempts) FROM outbox`).Scan(&maxAttempts))
	assert.Greater(t, maxAttempts, 1)
}

func TestClientErrorsAreRetriedToo(t *testing.T) {
	pool := testenv.Postgres(t)
	r := newReceiver(t)
	ids := enqueue(t, pool, 1)
	r.mode.Store(3)
	now := time.Now()
	d := dispatch.New(pool, dispatch.Config{URL: r.srv.URL, Secret: secret, Log: quiet, Now: func() time.Time { return now }})
	n, err := d.DeliverDue(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	var lastErr string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT last_error FROM outbox`).Scan(&lastErr))
	assert.Contains(t, lastErr, "400")
	r.mode.Store(0)
	now = now.Add(time.Hour)
	_, err = d.DeliverDue(context.Background())
	require.NoError(t, err)
	_, ok := r.snapshot()
	for _, id := range ids {
		assert.Equal(t, 1, ok[id])
	}
}

func TestEmptyURLOnlyLogs(t *testing.T) {
	pool := testenv.Postgres(t)
	enqueue(t, pool, 3)
	d := dispatch.New(pool, dispatch.Config{Secret: secret, Log: quiet})
	n, err := d.DeliverDue(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, n, "one message per poll")
	for range 2 {
		_, err = d.DeliverDue(context.Background())
		require.NoError(t, err)
	}
	pending, err := outbox.Pending(context.Background(), pool, actions.Topic)
	require.NoError(t, err)
	assert.Zero(t, pending)
}

func TestShutdownFinishesTheDeliveryInFlight(t *testing.T) {
	pool := testenv.Postgres(t)
	r := newReceiver(t)
	enqueue(t, pool, 1)
	r.slow.Store(int64(500 * time.Millisecond))
	d := dispatch.New(pool, dispatch.Config{URL: r.srv.URL, Secret: secret, Log: quiet, Idle: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	time.Sleep(200 * time.Millisecond) // the delivery is in flight
	cancel()
	<-done
	pending, err := outbox.Pending(context.Background(), pool, actions.Topic)
	require.NoError(t, err)
	assert.Zero(t, pending, "the in-flight delivery completed and was recorded")
}

func TestSignature(t *testing.T) {
	body := []byte(`{"id":"x"}`)
	now := time.Unix(1_700_000_000, 0)
	h := dispatch.Sign(secret, body, now)
	assert.Regexp(t, `^t=1700000000,v1=[0-9a-f]{64}$`, h)
	tests := []struct {
		name   string
		header string
		secret string
		body   []byte
		at     time.Time
		want   error
	}{
		{"valid", h, secret, body, now, nil},
		{"wrong secret", h, "other", body, now, dispatch.ErrBadSignature},
		{"tampered body", h, secret, []byte(`{"id":"y"}`), now, dispatch.ErrBadSignature},
		{"stale", h, secret, body, now.Add(10 * time.Minute), dispatch.ErrStale},
		{"garbage", "v1=abc", secret, body, now, dispatch.ErrBadSignature},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.ErrorIs(t, dispatch.Verify(tc.header, tc.secret, tc.body, 5*time.Minute, tc.at), tc.want)
			if tc.want == nil {
				assert.NoError(t, dispatch.Verify(tc.header, tc.secret, tc.body, 5*time.Minute, tc.at))
			}
		})
	}
}
