package handler

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
	"github.com/stripe-payments/stripe-payments/internal/tracking"
)

func TestGroupCommitBatchesConcurrentDeliveries(t *testing.T) {
	var (
		inFlight, maxInFlight atomic.Int32
		mu                    sync.Mutex
		sizes                 []int
	)
	g := &groupCommit{maxBatch: 25, maxFlushers: 3, process: func(_ context.Context, batch []*pending) {
		n := inFlight.Add(1)
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		sizes = append(sizes, len(batch))
		mu.Unlock()
		inFlight.Add(-1)
		for _, p := range batch {
			p.outcome = Applied
			close(p.done)
		}
	}}
	const deliveries = 300
	var wg sync.WaitGroup
	for range deliveries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outcome, err := g.submit(context.Background(), &pending{done: make(chan struct{})})
			assert.NoError(t, err)
			assert.Equal(t, Applied, outcome)
		}()
	}
	wg.Wait()
	total, largest := 0, 0
	for _, s := range sizes {
		total += s
		largest = max(largest, s)
		assert.LessOrEqual(t, s, 25)
	}
	assert.Equal(t, deliveries, total, "every delivery processed exactly once")
	assert.Greater(t, largest, 1, "concurrent deliveries were batched")
	assert.LessOrEqual(t, maxInFlight.Load(), int32(3), "at most maxFlushers batches in flight")
	g.mu.Lock()
	defer g.mu.Unlock()
	assert.Zero(t, g.flushing)
	assert.Empty(t, g.queue)
}

func TestBatchIsolatesAPoisonEvent(t *testing.T) {
	pool := testenv.Postgres(t)
	client := testenv.Dynamo(t)
	table := testenv.TableName("events")
	testenv.CreateTables(t, client, dynamo.EventsTable(table))
	store := events.NewStore(client, table, 720*time.Hour, nil)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `CREATE TABLE effects (event_id text NOT NULL)`)
	require.NoError(t, err)

	var poisonID string
	h := New(Config{PlatformAccount: "acct_platform_test", EventTTL: 720 * time.Hour}, store, tracking.NewLedger(pool),
		slog.New(slog.NewTextHandler(io.Discard, nil)),
		WithApplier("payment_intent.succeeded", func(ctx context.Context, tx pgx.Tx, ev *stripe.Event) error {
			if ev.ID == poisonID {
				return errors.New("poison")
			}
			_, err := tx.Exec(ctx, `INSERT INTO effects (event_id) VALUES ($1)`, ev.ID)
			return err
		}))
	var batch []*pending
	for range 5 {
		payload := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
		ev, err := events.Parse(payload)
		require.NoError(t, err)
		rec := events.NewRecord(ev, payload, "acct_platform_test", 720*time.Hour, events.SourceWebhook, time.Now())
		batch = append(batch, &pending{ev: ev, rec: rec, done: make(chan struct{})})
	}
	poisonID = batch[2].rec.ID
	// A duplicate copy inside the same batch shares the first copy's fate.
	batch = append(batch, &pending{ev: batch[0].ev, rec: batch[0].rec, done: make(chan struct{})})

	h.processBatch(ctx, batch)

	for i, p := range batch {
		<-p.done
		var effects int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM effects WHERE event_id = $1`, p.rec.ID).Scan(&effects))
		rec, err := store.Get(ctx, p.rec.ID)
		require.NoError(t, err)
		switch {
		case p.rec.ID == poisonID:
			assert.Equal(t, Failed, p.outcome)
			assert.ErrorContains(t, p.err, "poison")
			assert.Equal(t, events.StatusFailed, rec.Status)
			assert.Zero(t, effects)
		case i == len(batch)-1:
			assert.Equal(t, Duplicate, p.outcome, "the second copy")
			assert.Equal(t, 1, effects)
		default:
			assert.NoError(t, p.err)
			assert.Equal(t, Applied, p.outcome)
			assert.Equal(t, events.StatusProcessed, rec.Status)
			assert.Equal(t, 1, effects)
		}
	}
}
