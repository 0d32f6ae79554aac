package handler_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/handler"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

type env struct {
	pool  *pgxpool.Pool
	store *events.Store
	// failNext makes the effect applier fail the way the test wants, once.
	failNext atomic.Pointer[func(ctx context.Context, tx handler.Tx) error]
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{pool: testenv.Postgres(t)}
	client := testenv.Dynamo(t)
	table := testenv.TableName("events")
	testenv.CreateTables(t, client, dynamo.EventsTable(table))
	e.store = events.NewStore(client, table, 720*time.Hour, nil)
	// No unique key: an effect applied twice shows as two rows.
	_, err := e.pool.Exec(context.Background(), `CREATE TABLE effects (event_id text NOT NULL)`)
	require.NoError(t, err)
	return e
}

func (e *env) handler(store handler.EventStore) *handler.Handler {
	if store == nil {
		store = e.store
	}
	effect := func(ctx context.Context, tx handler.Tx, ev *stripe.Event) error {
		if fail := e.failNext.Swap(nil); fail != nil {
			if err := (*fail)(ctx, tx); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO effects (event_id) VALUES ($1)`, ev.ID)
		return err
	}
	return handler.New(handler.Config{PlatformAccount: "acct_platform_test", EventTTL: 720 * time.Hour},
		store, ledger.New(e.pool), slog.New(slog.NewTextHandler(io.Discard, nil)),
		handler.WithRoutes(handler.Routes{{Type: "payment_intent.succeeded", Apply: []handler.Applier{effect}}}))
}

func (e *env) count(t *testing.T, query, id string) int {
	t.Helper()
	var n int
	require.NoError(t, e.pool.QueryRow(context.Background(), query, id).Scan(&n))
	return n
}

func (e *env) effects(t *testing.T, id string) int {
	return e.count(t, `SELECT count(*) FROM effects WHERE event_id = $1`, id)
}

func (e *env) ledger(t *testing.T, id string) int {
	return e.count(t, `SELECT count(*) FROM processed_events WHERE event_id = $1`, id)
}

func parse(t *testing.T, payload []byte) *stripe.Event {
	t.Helper()
	ev, err := stripeevent.Parse(payload)
	require.NoError(t, err)
	return ev
}

// deliverAtOnce hands payload to h n times at the same moment (the
// webhook's source), requires each delivery to succeed, and returns their
// outcomes and how many of each.
func deliverAtOnce(t *testing.T, h *handler.Handler, payload []byte, n int) ([]stripeevent.Outcome, map[stripeevent.Outcome]int) {
	t.Helper()
	var wg sync.WaitGroup
	outcomes := make([]stripeevent.Outcome, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			outcomes[i], errs[i] = h.Handle(context.Background(), parse(t, payload), payload, stripeevent.SourceWebhook)
		}()
	}
	close(start)
	wg.Wait()
	count := map[stripeevent.Outcome]int{}
	for i := range n {
		require.NoError(t, errs[i], "delivery %d", i)
		count[outcomes[i]]++
	}
	return outcomes, count
}

func TestConcurrentDuplicateDeliveriesApplyOnce(t *testing.T) {
	e := newEnv(t)
	h := e.handler(nil)
	payload := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
	ev := parse(t, payload)

	const deliveries = 20
	outcomes, count := deliverAtOnce(t, h, payload, deliveries)
	assert.Equal(t, 1, count[stripeevent.Applied], "exactly one delivery applies the effects: %v", outcomes)
	assert.Equal(t, 1, e.effects(t, ev.ID))
	assert.Equal(t, 1, e.ledger(t, ev.ID))
	rec, err := e.store.Get(context.Background(), ev.ID)
	require.NoError(t, err)
	assert.Equal(t, events.StatusProcessed, rec.Status)
}

func TestOutcomes(t *testing.T) {
	e := newEnv(t)
	h := e.handler(nil)
	ctx := context.Background()

	t.Run("unknown type is recorded and processed with no effect", func(t *testing.T) {
		payload := stripetest.Event{Fixture: "customer.created", Type: "radar.early_fraud_warning.created"}.Build(t)
		ev := parse(t, payload)
		outcome, err := h.Handle(ctx, ev, payload, stripeevent.SourceWebhook)
		require.NoError(t, err)
		assert.Equal(t, stripeevent.Applied, outcome)
		rec, err := e.store.Get(ctx, ev.ID)
		require.NoError(t, err)
		assert.Equal(t, events.StatusProcessed, rec.Status)
		assert.Equal(t, 1, e.ledger(t, ev.ID))
		assert.Equal(t, 0, e.effects(t, ev.ID))
	})
	t.Run("sequential duplicate", func(t *testing.T) {
		payload := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
		ev := parse(t, payload)
		first, err := h.Handle(ctx, ev, payload, stripeevent.SourceWebhook)
		require.NoError(t, err)
		second, err := h.Handle(ctx, ev, payload, stripeevent.SourcePoller)
		require.NoError(t, err)
		assert.Equal(t, []stripeevent.Outcome{stripeevent.Applied, stripeevent.Duplicate}, []stripeevent.Outcome{first, second})
		assert.Equal(t, 1, e.effects(t, ev.ID))
	})
	t.Run("livemode mismatch is ignored and not recorded", func(t *testing.T) {
		payload := stripetest.Event{Fixture: "payment_intent.succeeded", Livemode: stripetest.Ptr(true)}.Build(t)
		ev := parse(t, payload)
		outcome, err := h.Handle(ctx, ev, payload, stripeevent.SourceWebhook)
		require.NoError(t, err)
		assert.Equal(t, stripeevent.Ignored, outcome)
		_, err = e.store.Get(ctx, ev.ID)
		assert.ErrorIs(t, err, apperr.ErrNotFound)
		assert.Equal(t, 0, e.ledger(t, ev.ID))
	})
}

func TestPostgresFailureMidProcessingIsRedriven(t *testing.T) {
	e := newEnv(t)
	h := e.handler(nil)
	ctx := context.Background()
	payload := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
	ev := parse(t, payload)

	// The transaction's own connection dies after the ledger claim: a real
	// Postgres failure between the claim and the effects.
	kill := func(ctx context.Context, tx handler.Tx) error {
		_, err := tx.Exec(ctx, `SELECT pg_terminate_backend(pg_backend_pid())`)
		return err
	}
	e.failNext.Store(&kill)
	outcome, err := h.Handle(ctx, ev, payload, stripeevent.SourceWebhook)
	require.Error(t, err)
	assert.Equal(t, stripeevent.Failed, outcome)
	rec, err := e.store.Get(ctx, ev.ID)
	require.NoError(t, err)
	assert.Equal(t, events.StatusFailed, rec.Status)
	assert.NotEmpty(t, rec.LastError)
	assert.Equal(t, 0, e.ledger(t, ev.ID), "the claim rolled back with the transaction")

	outcome, err = h.Handle(ctx, ev, payload, stripeevent.SourceWebhook)
	require.NoError(t, err)
	assert.Equal(t, stripeevent.Applied, outcome)
	assert.Equal(t, 1, e.effects(t, ev.ID))
	rec, err = e.store.Get(ctx, ev.ID)
	require.NoError(t, err)
	assert.Equal(t, events.StatusProcessed, rec.Status)
	assert.Equal(t, 2, rec.Attempts)
}

// crashBeforeMark loses the "record processed" write once, as a crash right
// after the Postgres commit would.
type crashBeforeMark struct {
	*events.Store
	crashed atomic.Bool
}

func (c *crashBeforeMark) PutProcessed(ctx context.Context, recs []events.Record) error {
	if c.crashed.CompareAndSwap(false, true) {
		return errors.New("process killed")
	}
	return c.Store.PutProcessed(ctx, recs)
}

func TestCrashBetweenCommitAndMarkDoesNotReapply(t *testing.T) {
	e := newEnv(t)
	h := e.handler(&crashBeforeMark{Store: e.store})
	ctx := context.Background()
	payload := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
	ev := parse(t, payload)

	_, err := h.Handle(ctx, ev, payload, stripeevent.SourceWebhook)
	require.Error(t, err, "the delivery must not be acknowledged")
	_, err = e.store.Get(ctx, ev.ID)
	require.ErrorIs(t, err, apperr.ErrNotFound, "no processed record before the write")
	assert.Equal(t, 1, e.ledger(t, ev.ID))

	outcome, err := h.Handle(ctx, ev, payload, stripeevent.SourcePoller)
	require.NoError(t, err)
	assert.Equal(t, stripeevent.Completed, outcome)
	assert.Equal(t, 1, e.effects(t, ev.ID))
	rec, err := e.store.Get(ctx, ev.ID)
	require.NoError(t, err)
	assert.Equal(t, events.StatusProcessed, rec.Status)
}

func TestApplierErrorMarksFailed(t *testing.T) {
	e := newEnv(t)
	h := e.handler(nil)
	ctx := context.Background()
	payload := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
	ev := parse(t, payload)
	boom := func(context.Context, handler.Tx) error { return errors.New("transition refused") }
	e.failNext.Store(&boom)

	_, err := h.Handle(ctx, ev, payload, stripeevent.SourceWebhook)
	require.ErrorContains(t, err, "transition refused")
	rec, err := e.store.Get(ctx, ev.ID)
	require.NoError(t, err)
	assert.Equal(t, events.StatusFailed, rec.Status)
	assert.Contains(t, rec.LastError, "transition refused")
	assert.Equal(t, 0, e.effects(t, ev.ID))
}

func TestPreparerRunsBeforeTheTransactionAndCanFail(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var inTx atomic.Bool
	var calls atomic.Int32
	fail := atomic.Bool{}
	fail.Store(true)
	prepare := func(ctx context.Context, ev *stripe.Event) error {
		calls.Add(1)
		// No ledger row yet: the transaction has not opened.
		var n int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM processed_events WHERE event_id = $1`, ev.ID).Scan(&n); err != nil {
			return err
		}
		inTx.Store(n != 0)
		if fail.Load() {
			return errors.New("stripe unreachable")
		}
		obj, err := stripeevent.Object(ev)
		if err != nil {
			return err
		}
		obj["prepared"] = true
		return nil
	}
	var sawPrepared atomic.Bool
	apply := func(ctx context.Context, tx handler.Tx, ev *stripe.Event) error {
		obj, err := stripeevent.Object(ev)
		if err != nil {
			return err
		}
		sawPrepared.Store(obj["prepared"] == true)
		return nil
	}
	h := handler.New(handler.Config{PlatformAccount: "acct_platform_test", EventTTL: 720 * time.Hour},
		e.store, ledger.New(e.pool), slog.New(slog.NewTextHandler(io.Discard, nil)),
		handler.WithRoutes(handler.Routes{{Type: "payment_intent.succeeded", Prepare: prepare, Apply: []handler.Applier{apply}}}))
	payload := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
	ev := parse(t, payload)

	outcome, err := h.Handle(ctx, ev, payload, stripeevent.SourceWebhook)
	require.ErrorContains(t, err, "stripe unreachable")
	assert.Equal(t, stripeevent.Failed, outcome)
	rec, err := e.store.Get(ctx, ev.ID)
	require.NoError(t, err)
	assert.Equal(t, events.StatusFailed, rec.Status)
	assert.Equal(t, 0, e.ledger(t, ev.ID))

	fail.Store(false)
	outcome, err = h.Handle(ctx, parse(t, payload), payload, stripeevent.SourceWebhook)
	require.NoError(t, err)
	assert.Equal(t, stripeevent.Applied, outcome)
	assert.False(t, inTx.Load(), "the preparer ran inside the ledger transaction")
	assert.True(t, sawPrepared.Load(), "the applier sees what the preparer added")
	assert.Equal(t, int32(2), calls.Load())
}

// An event whose object its applier cannot use (stripeevent.ErrUnprocessable)
// would fail the same way on every delivery: it is recorded as processed with
// the reason, answered (no 5xx loop, no held poller checkpoint), and takes no
// ledger entry, so that a replay after a fix applies it.
func TestUnprocessableEventIsRejectedNotRetriedForever(t *testing.T) {
	e := newEnv(t)
	h := e.handler(nil)
	ctx := context.Background()
	payload := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
	ev := parse(t, payload)
	unusable := func(context.Context, handler.Tx) error {
		return fmt.Errorf("%w: decode payment intent: bad metadata", stripeevent.ErrUnprocessable)
	}
	e.failNext.Store(&unusable)

	outcome, err := h.Handle(ctx, ev, payload, stripeevent.SourceWebhook)
	require.NoError(t, err, "retrying cannot help: the delivery is answered")
	assert.Equal(t, stripeevent.Rejected, outcome)
	rec, err := e.store.Get(ctx, ev.ID)
	require.NoError(t, err)
	assert.Equal(t, events.StatusProcessed, rec.Status, "the poller and the stuck sweep leave it alone")
	assert.Contains(t, rec.LastError, "bad metadata")
	assert.Equal(t, 0, e.ledger(t, ev.ID), "no ledger entry: effects were not applied")
	assert.Equal(t, 0, e.effects(t, ev.ID))

	outcome, err = h.Handle(ctx, parse(t, payload), payload, stripeevent.SourceWebhook)
	require.NoError(t, err)
	assert.Equal(t, stripeevent.Applied, outcome, "once the applier can use it (a fix), a replay applies it")
	assert.Equal(t, 1, e.effects(t, ev.ID))
	assert.Equal(t, 1, e.ledger(t, ev.ID))

	t.Run("a preparer's verdict rejects too, without running the appliers", func(t *testing.T) {
		var applied atomic.Int32
		h := handler.New(handler.Config{PlatformAccount: "acct_platform_test", EventTTL: 720 * time.Hour},
			e.store, ledger.New(e.pool), slog.New(slog.NewTextHandler(io.Discard, nil)),
			handler.WithRoutes(handler.Routes{{Type: "payment_intent.succeeded",
				Prepare: func(context.Context, *stripe.Event) error {
					return fmt.Errorf("%w: invoice id is not an invoice id", stripeevent.ErrUnprocessable)
				},
				Apply: []handler.Applier{func(context.Context, handler.Tx, *stripe.Event) error {
					applied.Add(1)
					return nil
				}}}}))
		payload := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
		ev := parse(t, payload)
		outcome, err := h.Handle(ctx, ev, payload, stripeevent.SourceWebhook)
		require.NoError(t, err)
		assert.Equal(t, stripeevent.Rejected, outcome)
		assert.Zero(t, applied.Load())
		assert.Equal(t, 0, e.ledger(t, ev.ID))
		rec, err := e.store.Get(ctx, ev.ID)
		require.NoError(t, err)
		assert.Equal(t, events.StatusProcessed, rec.Status)
		assert.Contains(t, rec.LastError, "not an invoice id")
	})
}
