package dispatch_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
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

// newReceiver is an ACTIONS_URL endpoint that answers 204 until the test
// says otherwise (testenv.Drop, 503, 400), whatever the signature: the
// tests check every delivery's signature themselves.
func newReceiver(t *testing.T) *testenv.ActionReceiver {
	r := testenv.NewActionReceiver(t, secret)
	r.AnswerAll(http.StatusNoContent)
	return r
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
	r.AnswerAll(testenv.Drop)

	start := func() (stop func()) {
		d := dispatch.New(pool, dispatch.Config{URL: r.URL, Secret: secret, Backoff: fast, Idle: 10 * time.Millisecond, Log: quiet})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = d.Run(ctx) }()
		return func() { cancel(); <-done }
	}
	stop := start()
	time.Sleep(300 * time.Millisecond)
	r.AnswerAll(http.StatusServiceUnavailable)
	time.Sleep(300 * time.Millisecond)
	// Restart the dispatcher while the receiver is still down.
	stop()
	stop = start()
	defer func() { stop() }()
	time.Sleep(200 * time.Millisecond)
	r.AnswerAll(http.StatusNoContent)
	waitDelivered(t, pool, 20*time.Second)

	attempts, ok := r.Deliveries(), r.Accepted()
	failed := 0
	for _, a := range attempts {
		require.NoError(t, a.Signature, "every delivery is signed")
		assert.True(t, a.Valid, "Idempotency-Key is the action id: %s %s", a.Key, a.Body)
		if !a.Accepted() {
			failed++
		}
	}
	assert.Greater(t, failed, len(ids), "the receiver was down for several rounds")
	require.Len(t, ok, len(ids), "every action delivered")
	for key, id := range ids {
		assert.Equal(t, 1, ok[id.String()], "action %s delivered once", key)
	}
	// No attempt ever carried an id outside the enqueued set.
	known := map[string]bool{}
	for _, id := range ids {
		known[id.String()] = true
	}
	for _, a := range attempts {
		assert.True(t, known[a.Key], "unknown action id %s", a.Key)
	}
	var maxAttempts int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT max(attempts) FROM outbox`).Scan(&maxAttempts))
	assert.Greater(t, maxAttempts, 1)
}

func TestClientErrorsAreRetriedToo(t *testing.T) {
	pool := testenv.Postgres(t)
	r := newReceiver(t)
	ids := enqueue(t, pool, 1)
	r.AnswerAll(http.StatusBadRequest)
	now := time.Now()
	d := dispatch.New(pool, dispatch.Config{URL: r.URL, Secret: secret, Log: quiet, Now: func() time.Time { return now }})
	n, err := d.DeliverDue(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	var lastErr string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT last_error FROM outbox`).Scan(&lastErr))
	assert.Contains(t, lastErr, "400")
	r.AnswerAll(http.StatusNoContent)
	now = now.Add(time.Hour)
	_, err = d.DeliverDue(context.Background())
	require.NoError(t, err)
	ok := r.Accepted()
	for _, id := range ids {
		assert.Equal(t, 1, ok[id.String()])
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
	r.Delay(500 * time.Millisecond)
	d := dispatch.New(pool, dispatch.Config{URL: r.URL, Secret: secret, Log: quiet, Idle: 10 * time.Millisecond})
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
