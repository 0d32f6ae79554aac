package outbox_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestEnqueueIsOncePerEffect(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	for i, want := range []bool{true, false} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			added, err := outbox.Enqueue(ctx, tx, outbox.Message{Topic: "action", Type: "purchase.fulfilled", DedupeKey: "fulfil:p1"})
			assert.Equal(t, want, added, "enqueue %d", i)
			return err
		})
		require.NoError(t, err)
	}
	n, err := outbox.Pending(ctx, pool, "action")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
}

func TestWorkerRetriesUntilDeliveredAndKeepsTheID(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := outbox.Enqueue(ctx, tx, outbox.Message{Topic: "action", Type: "t", DedupeKey: "k"})
		return err
	}))
	now := time.Now()
	var seen []uuid.UUID
	fail := 2
	w := &outbox.Worker{Pool: pool, Topic: "action", Log: quiet, Now: func() time.Time { return now },
		Deliver: func(_ context.Context, m outbox.Message) error {
			seen = append(seen, m.ID)
			if fail > 0 {
				fail--
				return errors.New("receiver down")
			}
			return nil
		}}
	for range 3 {
		_, err := w.DeliverDue(ctx)
		require.NoError(t, err)
		// Not due again until the backoff has passed.
		n, err := w.DeliverDue(ctx)
		require.NoError(t, err)
		assert.Zero(t, n)
		now = now.Add(outbox.DefaultBackoff(10))
	}
	require.Len(t, seen, 3)
	assert.Equal(t, seen[0], seen[1])
	assert.Equal(t, seen[0], seen[2])
	n, err := outbox.Pending(ctx, pool, "action")
	require.NoError(t, err)
	assert.Zero(t, n)
}

func TestConcurrentWorkersDeliverEachMessageOnce(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	const messages = 50
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range messages {
			if _, err := outbox.Enqueue(ctx, tx, outbox.Message{Topic: "action", Type: "t", DedupeKey: uuid.NewString() + string(rune('a'+i%26))}); err != nil {
				return err
			}
		}
		return nil
	}))
	var mu sync.Mutex
	delivered := map[uuid.UUID]int{}
	deliver := func(_ context.Context, m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		delivered[m.ID]++
		return nil
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &outbox.Worker{Pool: pool, Topic: "action", Deliver: deliver, Log: quiet, Batch: 1000}
			_, err := w.DeliverDue(ctx)
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	assert.Len(t, delivered, messages)
	for id, n := range delivered {
		assert.Equal(t, 1, n, "message %s", id)
	}
}

func enqueue(t *testing.T, pool *pgxpool.Pool, topic string, n int, created time.Time) []uuid.UUID {
	t.Helper()
	var ids []uuid.UUID
	require.NoError(t, pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		for range n {
			id := uuid.New()
			ids = append(ids, id)
			if _, err := outbox.Enqueue(context.Background(), tx, outbox.Message{ID: id, Topic: topic, Type: "t",
				DedupeKey: id.String(), CreatedAt: created, Payload: []byte(`{"card":"secret-payload-value"}`)}); err != nil {
				return err
			}
		}
		return nil
	}))
	return ids
}

// A worker holds no database connection while its consumer runs: the pool
// serves only this worker, and it has nothing acquired inside Deliver.
func TestWorkerHoldsNoConnectionWhileDelivering(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	enqueue(t, pool, "action", 5, time.Now())
	var acquired []int32
	w := &outbox.Worker{Pool: pool, Topic: "action", Log: quiet, Batch: 5,
		Deliver: func(context.Context, outbox.Message) error {
			acquired = append(acquired, pool.Stat().AcquiredConns())
			return nil
		}}
	n, err := w.DeliverDue(ctx)
	require.NoError(t, err)
	assert.Equal(t, 5, n)
	assert.Equal(t, []int32{0, 0, 0, 0, 0}, acquired)
}

// A lease keeps other workers off a message until it expires; then another
// worker takes it over, and the first worker's late result changes nothing.
func TestLeaseIsTakenOverAfterExpiry(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	t0 := time.Now()
	ids := enqueue(t, pool, "action", 1, t0)
	const lease = time.Hour // never reached in real time: the clocks below are injected
	entered, release := make(chan struct{}), make(chan struct{})
	a := &outbox.Worker{Pool: pool, Topic: "action", Log: quiet, Lease: lease, Owner: "a",
		Now: func() time.Time { return t0 },
		Deliver: func(context.Context, outbox.Message) error {
			close(entered)
			<-release // a worker that hangs (or died) mid-delivery
			return errors.New("late failure")
		}}
	aDone := make(chan error, 1)
	go func() { _, err := a.DeliverDue(ctx); aDone <- err }()
	<-entered

	var got []outbox.Message
	b := func(at time.Time) *outbox.Worker {
		return &outbox.Worker{Pool: pool, Topic: "action", Log: quiet, Lease: lease, Owner: "b",
			Now: func() time.Time { return at },
			Deliver: func(_ context.Context, m outbox.Message) error {
				got = append(got, m)
				return nil
			}}
	}
	for _, at := range []time.Time{t0, t0.Add(lease / 2), t0.Add(lease - time.Second)} {
		n, err := b(at).DeliverDue(ctx)
		require.NoError(t, err)
		assert.Zero(t, n, "claimed under a valid lease at +%s", at.Sub(t0))
	}
	n, err := b(t0.Add(lease + time.Second)).DeliverDue(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Len(t, got, 1)
	assert.Equal(t, ids[0], got[0].ID)
	assert.Equal(t, 1, got[0].Attempts, "the expired lease counts as an attempt")

	close(release)
	require.NoError(t, <-aDone)
	var delivered bool
	var lastError *string
	require.NoError(t, pool.QueryRow(ctx, `SELECT delivered_at IS NOT NULL, last_error FROM outbox WHERE id = $1`, ids[0]).
		Scan(&delivered, &lastError))
	assert.True(t, delivered, "the late failure of the first worker must not undo the delivery")
	assert.Nil(t, lastError)
}

// Many workers on one topic, consumers that fail half the time and retry at
// once: no message is ever in two deliveries at the same time, and every
// message is delivered.
func TestWorkersNeverDeliverAMessageConcurrently(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	const messages, workers = 40, 4
	ids := enqueue(t, pool, "action", messages, time.Now())
	var mu sync.Mutex
	inFlight, calls, delivered, overlaps := map[uuid.UUID]bool{}, 0, map[uuid.UUID]int{}, 0
	deliver := func(_ context.Context, m outbox.Message) error {
		mu.Lock()
		if inFlight[m.ID] {
			overlaps++
		}
		inFlight[m.ID] = true
		calls++
		fail := calls%2 == 0
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		delete(inFlight, m.ID)
		if fail {
			return errors.New("flaky receiver")
		}
		delivered[m.ID]++
		return nil
	}
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &outbox.Worker{Pool: pool, Topic: "action", Deliver: deliver, Log: quiet, Batch: 3,
				Owner: string(rune('a' + i)), Backoff: func(int) time.Duration { return 0 }}
			for range 200 {
				if _, err := w.DeliverDue(ctx); !assert.NoError(t, err) {
					return
				}
				if n, _ := outbox.Pending(ctx, pool, "action"); n == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, overlaps, "a message was in two deliveries at once")
	assert.Len(t, delivered, messages)
	for _, id := range ids {
		assert.Equal(t, 1, delivered[id], "message %s", id)
	}
}
