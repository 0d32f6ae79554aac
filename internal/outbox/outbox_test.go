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
