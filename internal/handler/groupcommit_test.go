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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
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
			p.outcome = stripeevent.Applied
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
			assert.Equal(t, stripeevent.Applied, outcome)
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
	h := New(Config{PlatformAccount: "acct_platform_test", EventTTL: 720 * time.Hour}, store, ledger.New(pool),
		slog.New(slog.NewTextHandler(io.Discard, nil)),
		WithRoutes(Routes{{Type: "payment_intent.succeeded", Apply: []Applier{func(ctx context.Context, tx Tx, ev *stripe.Event) error {
			if ev.ID == poisonID {
				return errors.New("poison")
			}
			_, err := tx.Exec(ctx, `INSERT INTO effects (event_id) VALUES ($1)`, ev.ID)
			return err
		}}}}))
	var batch []*pending
	for range 5 {
		payload := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
		ev, err := stripeevent.Parse(payload)
		require.NoError(t, err)
		rec := events.NewRecord(ev, payload, "acct_platform_test", 720*time.Hour, stripeevent.SourceWebhook, time.Now())
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
			assert.Equal(t, stripeevent.Failed, p.outcome)
			assert.ErrorContains(t, p.err, "poison")
			assert.Equal(t, events.StatusFailed, rec.Status)
			assert.Zero(t, effects)
		case i == len(batch)-1:
			assert.Equal(t, stripeevent.Duplicate, p.outcome, "the second copy")
			assert.Equal(t, 1, effects)
		default:
			assert.NoError(t, p.err)
			assert.Equal(t, stripeevent.Applied, p.outcome)
			assert.Equal(t, events.StatusProcessed, rec.Status)
			assert.Equal(t, 1, effects)
		}
	}
}

// blockingGroup's batches wait for release (or their deadline) and record
// which deliveries they saw.
type blockingGroup struct {
	*groupCommit
	release chan struct{}
	mu      sync.Mutex
	seen    []*pending
	started chan struct{}
}

func newBlockingGroup(flushers, maxQueue int, maxBytes int64) *blockingGroup {
	b := &blockingGroup{release: make(chan struct{}), started: make(chan struct{}, 100)}
	b.groupCommit = &groupCommit{maxBatch: 25, maxFlushers: flushers, maxQueue: maxQueue, maxBytes: maxBytes,
		process: func(ctx context.Context, batch []*pending) {
			b.started <- struct{}{}
			select {
			case <-b.release:
			case <-ctx.Done():
			}
			b.mu.Lock()
			b.seen = append(b.seen, batch...)
			b.mu.Unlock()
			for _, p := range batch {
				p.outcome, p.err = stripeevent.Applied, ctx.Err()
				close(p.done)
			}
		}}
	return b
}

// submitAsync submits p in a goroutine; the result arrives on the channel.
func submitAsync(ctx context.Context, g *groupCommit, p *pending) <-chan error {
	res := make(chan error, 1)
	go func() {
		_, err := g.submit(ctx, p)
		res <- err
	}()
	return res
}

func waitQueued(t *testing.T, g *groupCommit, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return g.stats(time.Now()).Queued == n }, 10*time.Second, time.Millisecond)
}

func TestGroupCommitSurvivesPanics(t *testing.T) {
	var (
		calls    atomic.Int32
		panicked atomic.Int32
	)
	const flushers = 2
	g := &groupCommit{maxBatch: 25, maxFlushers: flushers,
		panicked: func(v any, stack []byte, batch int) {
			panicked.Add(1)
			assert.Equal(t, "injected", v)
			assert.NotEmpty(t, stack)
		},
		process: func(_ context.Context, batch []*pending) {
			switch calls.Add(1) {
			case 1, 2:
				panic("injected")
			case 3:
				// Answered before the panic: it keeps its answer, and is
				// not answered twice.
				batch[0].outcome = stripeevent.Applied
				close(batch[0].done)
				panic("injected")
			}
			for _, p := range batch {
				p.outcome = stripeevent.Applied
				close(p.done)
			}
		}}
	// More panics than flushers: before the fix, each leaked its slot and
	// the next delivery waited forever.
	for range 2 {
		outcome, err := g.submit(context.Background(), &pending{done: make(chan struct{})})
		require.ErrorIs(t, err, ErrPanicked)
		assert.Equal(t, stripeevent.Failed, outcome)
	}
	outcome, err := g.submit(context.Background(), &pending{done: make(chan struct{})})
	require.NoError(t, err)
	assert.Equal(t, stripeevent.Applied, outcome)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	outcome, err = g.submit(ctx, &pending{done: make(chan struct{})})
	require.NoError(t, err, "a delivery after the panics is processed")
	assert.Equal(t, stripeevent.Applied, outcome)
	assert.Equal(t, int32(3), panicked.Load(), "every panic reported")
	assert.True(t, g.idle(), "every flusher slot released")
}

func TestGroupCommitQueueIsBounded(t *testing.T) {
	tests := []struct {
		name     string
		maxQueue int
		maxBytes int64
		size     int64
		fits     int // deliveries queued behind the batch in flight
	}{
		{name: "by count", maxQueue: 3, size: 10, fits: 3},
		{name: "by bytes", maxQueue: 100, maxBytes: 25, size: 10, fits: 2},
		{name: "one delivery always fits", maxQueue: 100, maxBytes: 5, size: 10, fits: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBlockingGroup(1, tt.maxQueue, tt.maxBytes)
			ctx := context.Background()
			var results []<-chan error
			results = append(results, submitAsync(ctx, b.groupCommit, &pending{done: make(chan struct{}), size: tt.size}))
			<-b.started // the only flusher is busy
			for i := range tt.fits {
				results = append(results, submitAsync(ctx, b.groupCommit, &pending{done: make(chan struct{}), size: tt.size}))
				waitQueued(t, b.groupCommit, i+1)
			}
			outcome, err := b.submit(ctx, &pending{done: make(chan struct{}), size: tt.size})
			require.ErrorIs(t, err, stripeevent.ErrOverloaded, "refused at once when full")
			assert.Equal(t, stripeevent.Failed, outcome)
			assert.Equal(t, tt.fits, b.stats(time.Now()).Queued, "the refused delivery was not queued")

			close(b.release)
			for _, r := range results {
				require.NoError(t, <-r)
			}
			assert.Len(t, b.seen, tt.fits+1)
			assert.Zero(t, b.stats(time.Now()).Bytes)
		})
	}
}

func TestGroupCommitDropsDeliveriesWhoseCallerHasGone(t *testing.T) {
	b := newBlockingGroup(1, 100, 0)
	ctx := context.Background()
	first := submitAsync(ctx, b.groupCommit, &pending{done: make(chan struct{})})
	<-b.started

	// Withdrawn: its caller gives up while it waits in the queue.
	goneCtx, cancel := context.WithCancel(ctx)
	withdrawn := &pending{done: make(chan struct{}), size: 7}
	res := submitAsync(goneCtx, b.groupCommit, withdrawn)
	waitQueued(t, b.groupCommit, 1)
	cancel()
	require.ErrorIs(t, <-res, context.Canceled)
	assert.Zero(t, b.stats(time.Now()).Queued, "it left the queue")
	assert.Zero(t, b.stats(time.Now()).Bytes)

	// Dropped: its caller has gone by the time a batch takes it.
	deadCtx, kill := context.WithCancel(ctx)
	kill()
	dropped := &pending{ctx: deadCtx, done: make(chan struct{})}
	kept := &pending{done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, dropped)
	b.mu.Unlock()
	keptRes := submitAsync(ctx, b.groupCommit, kept)
	waitQueued(t, b.groupCommit, 2)

	close(b.release)
	require.NoError(t, <-first)
	require.NoError(t, <-keptRes)
	<-dropped.done
	assert.ErrorIs(t, dropped.err, context.Canceled)
	assert.NotContains(t, b.seen, withdrawn)
	assert.NotContains(t, b.seen, dropped, "never processed")
	assert.Contains(t, b.seen, kept)
}

func TestGroupCommitBatchHasADeadline(t *testing.T) {
	b := newBlockingGroup(1, 100, 0)
	b.batchTimeout = 50 * time.Millisecond
	// Nothing releases the batch: only its deadline ends it.
	_, err := b.submit(context.Background(), &pending{done: make(chan struct{})})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.True(t, b.idle())
}

func TestReadyReportsAStalledIngestPath(t *testing.T) {
	h := New(Config{StuckAfter: time.Millisecond}, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	b := newBlockingGroup(1, 100, 0)
	b.groupCommit.panicked = h.group.panicked
	h.group = b.groupCommit
	require.NoError(t, h.Ready(context.Background()), "idle is ready")

	first := submitAsync(context.Background(), h.group, &pending{done: make(chan struct{})})
	<-b.started
	require.NoError(t, h.Ready(context.Background()), "a batch in flight with nothing waiting is ready")
	second := submitAsync(context.Background(), h.group, &pending{done: make(chan struct{})})
	waitQueued(t, h.group, 1)
	require.Eventually(t, func() bool { return h.Ready(context.Background()) != nil }, 10*time.Second, time.Millisecond,
		"a delivery waiting with no batch finishing is reported")
	assert.ErrorContains(t, h.Ready(context.Background()), "ingest stalled")

	close(b.release)
	require.NoError(t, <-first)
	require.NoError(t, <-second)
	require.NoError(t, h.Ready(context.Background()), "ready again once batches finish")
	s := h.group.stats(time.Now().Add(time.Hour))
	assert.Zero(t, s.Stalled, "nothing waits")
}
