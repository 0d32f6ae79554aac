package handler_test

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

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/handler"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/recordq"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// flakyTable fails every write while down is set: the events table out of reach.
type flakyTable struct {
	*events.Store
	down atomic.Bool
}

func (f *flakyTable) PutProcessed(ctx context.Context, recs []events.Record) error {
	if f.down.Load() {
		return errors.New("events table unreachable")
	}
	return f.Store.PutProcessed(ctx, recs)
}

// writeBehind is a handler that answers on the Postgres commit, its records
// written by a running queue over table; the handler reads through the queue.
func (e *env) writeBehind(t *testing.T, table recordq.Table) (*handler.Handler, *recordq.Queue, *events.Store) {
	t.Helper()
	h, q, store, _ := e.killableWriteBehind(t, table)
	return h, q, store
}

// killableWriteBehind is writeBehind, with kill: the queue's writers stop
// where they are, as in a process killed (no Flush, no delete of what they
// were writing); kill returns once they have stopped.
func (e *env) killableWriteBehind(t *testing.T, table recordq.Table) (*handler.Handler, *recordq.Queue, *events.Store, func()) {
	t.Helper()
	q := recordq.New(e.pool, table, recordq.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = q.Run(ctx)
	}()
	kill := func() { cancel(); <-stopped }
	t.Cleanup(kill)
	for !q.Running() {
		time.Sleep(time.Millisecond)
	}
	store := e.store.WithPending(q)
	effect := func(ctx context.Context, tx handler.Tx, ev *stripe.Event) error {
		if fail := e.failNext.Swap(nil); fail != nil {
			if err := (*fail)(ctx, tx); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO effects (event_id) VALUES ($1)`, ev.ID)
		return err
	}
	h := handler.New(handler.Config{PlatformAccount: "acct_platform_test", EventTTL: 720 * time.Hour},
		store, ledger.New(e.pool), slog.New(slog.NewTextHandler(io.Discard, nil)),
		handler.WithRoutes(handler.Routes{{Type: "payment_intent.succeeded", Apply: []handler.Applier{effect}}}), handler.WithRecordQueue(q))
	return h, q, store, kill
}

func flushed(t *testing.T, q *recordq.Queue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, q.Flush(ctx))
}

func (e *env) pending(t *testing.T, id string) int {
	return e.count(t, `SELECT count(*) FROM event_records_pending WHERE event_id = $1`, id)
}

func TestWriteBehindAnswersOnTheCommitAndTheRecordFollows(t *testing.T) {
	for _, fixture := range []string{"payment_intent.succeeded", "customer.created"} { // with effects, and none
		t.Run(fixture, func(t *testing.T) {
			e := newEnv(t)
			h, q, store := e.writeBehind(t, e.store)
			ctx := context.Background()
			payload := stripetest.Event{Fixture: fixture}.Build(t)
			ev := parse(t, payload)

			outcome, err := h.Handle(ctx, ev, payload, stripeevent.SourceWebhook)
			require.NoError(t, err)
			assert.Equal(t, stripeevent.Applied, outcome)
			assert.Equal(t, 1, e.ledger(t, ev.ID))
			// Answered: readable at once, from Postgres or the table.
			rec, err := store.Get(ctx, ev.ID)
			require.NoError(t, err)
			assert.Equal(t, events.StatusProcessed, rec.Status)

			flushed(t, q)
			rec, err = e.store.Get(ctx, ev.ID) // the table alone
			require.NoError(t, err)
			assert.Equal(t, events.StatusProcessed, rec.Status)
			assert.Equal(t, 1, rec.Attempts)
			assert.JSONEq(t, string(payload), string(rec.Payload))
			assert.Equal(t, 0, e.pending(t, ev.ID), "the written record left Postgres")

			outcome, err = h.Handle(ctx, parse(t, payload), payload, stripeevent.SourcePoller)
			require.NoError(t, err)
			assert.Equal(t, stripeevent.Duplicate, outcome)
			assert.Equal(t, 1, e.ledger(t, ev.ID))
		})
	}
}

func TestWriteBehindConcurrentDuplicatesApplyOnce(t *testing.T) {
	for _, fixture := range []string{"payment_intent.succeeded", "customer.created"} {
		t.Run(fixture, func(t *testing.T) {
			e := newEnv(t)
			h, q, _ := e.writeBehind(t, e.store)
			payload := stripetest.Event{Fixture: fixture}.Build(t)
			ev := parse(t, payload)
			const deliveries = 20
			outcomes, count := deliverAtOnce(t, h, payload, deliveries)
			assert.Equal(t, deliveries-1, count[stripeevent.Duplicate], "every other delivery is a duplicate: %v", outcomes)
			assert.Equal(t, 1, count[stripeevent.Applied], "exactly one delivery applies: %v", outcomes)
			assert.Equal(t, 1, e.ledger(t, ev.ID))
			if fixture == "payment_intent.succeeded" {
				assert.Equal(t, 1, e.effects(t, ev.ID))
			}
			flushed(t, q)
			rec, err := e.store.Get(context.Background(), ev.ID)
			require.NoError(t, err)
			assert.Equal(t, events.StatusProcessed, rec.Status)
		})
	}
}

// crashTable makes the first write of the records it is given die mid-way:
// before the table write lands ("before"), or after it landed and before
// the queue could delete the pending row ("after"). The write then hangs
// until the queue is killed, and reports nothing.
type crashTable struct {
	*events.Store
	after   bool
	entered chan struct{} // closed once the write is under way
	once    sync.Once
}

func (c *crashTable) PutProcessed(ctx context.Context, recs []events.Record) error {
	first := false
	c.once.Do(func() { first = true })
	if !first {
		return c.Store.PutProcessed(ctx, recs)
	}
	if c.after {
		if err := c.Store.PutProcessed(ctx, recs); err != nil {
			return err
		}
	}
	close(c.entered)
	<-ctx.Done() // the process dies here
	return ctx.Err()
}

// A crash after the commit, in the middle of the table write: the delivery
// was answered, so nobody delivers it again. The queue is killed while it
// writes the record (before the write lands, or after it and before the
// pending row's delete); the row stays; the restarted process's queue
// writes it from Postgres, once (the record keeps one attempt), and a
// redelivery meanwhile is a duplicate.
func TestWriteBehindCrashAfterTheAnswerLosesNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after bool
	}{{"crash before the table write lands", false}, {"crash after the table write, before the row delete", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			crash := &crashTable{Store: e.store, after: tc.after, entered: make(chan struct{})}
			h, _, store, kill := e.killableWriteBehind(t, crash)
			ctx := context.Background()
			payload := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
			ev := parse(t, payload)

			outcome, err := h.Handle(ctx, ev, payload, stripeevent.SourceWebhook)
			require.NoError(t, err)
			assert.Equal(t, stripeevent.Applied, outcome)
			select {
			case <-crash.entered:
			case <-time.After(20 * time.Second):
				t.Fatal("the queue never began the write")
			}
			kill() // mid-write
			assert.Equal(t, 1, e.pending(t, ev.ID), "the killed write left its row")
			_, err = e.store.Get(ctx, ev.ID)
			if tc.after {
				require.NoError(t, err, "the write had landed")
			} else {
				require.ErrorIs(t, err, apperr.ErrNotFound, "the write never landed")
			}
			rec, err := store.Get(ctx, ev.ID)
			require.NoError(t, err, "never a 404 for an answered event")
			assert.Equal(t, events.StatusProcessed, rec.Status)

			// The restarted process: its queue takes the row up on start;
			// a redelivery meanwhile applies nothing.
			h2, q2, _ := e.writeBehind(t, e.store)
			outcome, err = h2.Handle(ctx, parse(t, payload), payload, stripeevent.SourcePoller)
			require.NoError(t, err)
			assert.Equal(t, stripeevent.Duplicate, outcome)
			flushed(t, q2)
			deadline := time.Now().Add(20 * time.Second)
			for e.pending(t, ev.ID) > 0 {
				require.True(t, time.Now().Before(deadline), "the left row was never written")
				time.Sleep(20 * time.Millisecond)
			}
			rec, err = e.store.Get(ctx, ev.ID)
			require.NoError(t, err)
			assert.Equal(t, events.StatusProcessed, rec.Status)
			assert.Equal(t, 1, rec.Attempts, "one delivery, one attempt, however often the record was written")
			assert.JSONEq(t, string(payload), string(rec.Payload))
			assert.Equal(t, 1, e.effects(t, ev.ID))
			assert.Equal(t, 1, e.ledger(t, ev.ID))
		})
	}
}

func TestWriteBehindRefusesWhileTheTableIsDown(t *testing.T) {
	e := newEnv(t)
	table := &flakyTable{Store: e.store}
	h, q, _ := e.writeBehind(t, table)
	ctx := context.Background()
	first := stripetest.Event{Fixture: "customer.created"}.Build(t)
	table.down.Store(true)
	_, err := h.Handle(ctx, parse(t, first), first, stripeevent.SourceWebhook)
	require.NoError(t, err, "answered on the commit; the table's failure shows on the write")

	refused := false
	deadline := time.Now().Add(20 * time.Second)
	for !refused {
		require.True(t, time.Now().Before(deadline), "deliveries still accepted while the table is down")
		payload := stripetest.Event{Fixture: "customer.created"}.Build(t)
		ev := parse(t, payload)
		if _, err := h.Handle(ctx, ev, payload, stripeevent.SourceWebhook); err != nil {
			require.ErrorIs(t, err, recordq.ErrUnavailable)
			assert.Equal(t, 0, e.ledger(t, ev.ID), "a refused delivery changes nothing")
			refused = true
		}
		time.Sleep(5 * time.Millisecond)
	}
	table.down.Store(false)
	flushed(t, q)
	payload := stripetest.Event{Fixture: "customer.created"}.Build(t)
	outcome, err := h.Handle(ctx, parse(t, payload), payload, stripeevent.SourceWebhook)
	require.NoError(t, err)
	assert.Equal(t, stripeevent.Applied, outcome)
	rec, err := e.store.Get(ctx, parse(t, first).ID)
	require.NoError(t, err)
	assert.Equal(t, events.StatusProcessed, rec.Status)
}

func TestWriteBehindIsolatesAFailingEventAndRecordsIt(t *testing.T) {
	e := newEnv(t)
	h, q, store := e.writeBehind(t, e.store)
	ctx := context.Background()
	boom := func(context.Context, handler.Tx) error { return errors.New("transition refused") }
	e.failNext.Store(&boom)
	payload := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
	ev := parse(t, payload)
	_, err := h.Handle(ctx, ev, payload, stripeevent.SourceWebhook)
	require.ErrorContains(t, err, "transition refused")
	rec, err := store.Get(ctx, ev.ID)
	require.NoError(t, err)
	assert.Equal(t, events.StatusFailed, rec.Status)
	assert.Equal(t, 0, e.pending(t, ev.ID), "no pending record for an event whose transaction failed")

	outcome, err := h.Handle(ctx, parse(t, payload), payload, stripeevent.SourceWebhook)
	require.NoError(t, err)
	assert.Equal(t, stripeevent.Applied, outcome)
	flushed(t, q)
	rec, err = e.store.Get(ctx, ev.ID)
	require.NoError(t, err)
	assert.Equal(t, events.StatusProcessed, rec.Status)
	assert.Equal(t, 2, rec.Attempts, "the failed attempt is counted")
	assert.Equal(t, 1, e.effects(t, ev.ID))
}
