package handler_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/handler"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/recordq"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// gate holds calls until the test opens it; entered is closed once the
// first call is held.
type gate struct {
	entered, open chan struct{}
	once          sync.Once
}

func newGate() *gate { return &gate{entered: make(chan struct{}), open: make(chan struct{})} }

// pass holds the caller at the gate (a zero gate lets it through).
func (g *gate) pass(ctx context.Context) error {
	if g.open == nil {
		return nil
	}
	select {
	case <-g.open:
		return nil
	default:
	}
	g.once.Do(func() { close(g.entered) })
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s never began", what)
	}
}

// lateMarker is a replica's write-behind as its events store sees it, slow
// around its record of a failure: held at before (before it marks the
// event in Postgres) or at after (marked, before the table write).
type lateMarker struct {
	*recordq.Queue
	before, after *gate
}

func (m lateMarker) Mark(ctx context.Context, ids []string) error {
	if err := m.before.pass(ctx); err != nil {
		return err
	}
	if err := m.Queue.Mark(ctx, ids); err != nil {
		return err
	}
	return m.after.pass(ctx)
}

// heldTable is the events table whose write of the record of event id
// waits at the gate.
type heldTable struct {
	*events.Store
	id string
	g  *gate
}

func (h heldTable) PutProcessed(ctx context.Context, recs []events.Record) error {
	for _, r := range recs {
		if r.ID == h.id {
			if err := h.g.pass(ctx); err != nil {
				return err
			}
		}
	}
	return h.Store.PutProcessed(ctx, recs)
}

// racedTable is the events table where, when the writer first writes the
// record of event id (its row loaded), race runs first.
type racedTable struct {
	*events.Store
	id   string
	once *sync.Once
	race func()
}

func (r racedTable) before(recs []events.Record) {
	for _, rec := range recs {
		if rec.ID == r.id {
			r.once.Do(r.race)
		}
	}
}

func (r racedTable) PutProcessed(ctx context.Context, recs []events.Record) error {
	r.before(recs)
	return r.Store.PutProcessed(ctx, recs)
}

// replica is one instance: a handler answering on the commit, its queue.
type replica struct {
	h     *handler.Handler
	q     *recordq.Queue
	store *events.Store // the table read through this replica's pending rows
}

func (e *env) replica(t *testing.T, table recordq.Table, writers int, pending func(*recordq.Queue) events.Pending) replica {
	t.Helper()
	q := recordq.New(e.pool, table, recordq.Config{Writers: writers})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = q.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-stopped })
	for !q.Running() {
		time.Sleep(time.Millisecond)
	}
	var p events.Pending = q
	if pending != nil {
		p = pending(q)
	}
	store := e.store.WithPending(p)
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
	return replica{h: h, q: q, store: store}
}

// docs/design.md §5 (bookkeeping) with the write-behind and two replicas: replica A
// fails to process an event while replica B (Stripe's retry, the poller)
// processes it. Whatever the order in which A's failure record and B's
// processed record reach the table:
//   - B's delivery is answered on its commit and the event is readable from
//     then on (never a 404);
//   - the table ends with the processed record, never the failed one;
//   - when A's failed record was in the table before B's record was
//     written, the processed record keeps A's bookkeeping: A's first
//     received_at and source, and both attempts;
//   - writing B's pending row again (a lost delete, another replica's
//     sweep) and a redelivery change nothing.
func TestWriteBehindKeepsTheBookkeepingOfAFailureRacingASuccessOnAnotherReplica(t *testing.T) {
	for _, tc := range []struct {
		name string
		// where A is held after its failed transaction: before its record
		// of the failure (in Postgres, then the table), or between the two.
		heldAtMark bool
		// the failure reaches the table only after B's record is written.
		afterWrite bool
	}{
		{name: "failure recorded before the success is claimed"},
		{name: "failure written to the table while the success is pending"},
		{name: "failure's whole trace while the success is pending", heldAtMark: true},
		{name: "failure reaches the table after the success is written", afterWrite: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			held := tc.name != "failure recorded before the success is claimed"
			aGate := &gate{}
			if held {
				aGate = newGate()
			}
			before, after := &gate{}, &gate{}
			if tc.heldAtMark {
				before = aGate
			} else {
				after = aGate
			}
			a := e.replica(t, e.store, 0,
				func(q *recordq.Queue) events.Pending { return lateMarker{Queue: q, before: before, after: after} })
			// B's one writer is busy with another event's record (held)
			// when B answers: B's record waits, unread, in the queue.
			busy := stripetest.Event{Fixture: "customer.created"}.Build(t)
			bGate := newGate()
			b := e.replica(t, heldTable{Store: e.store, id: parse(t, busy).ID, g: bGate}, 1, nil)
			_, err := b.h.Handle(ctx, parse(t, busy), busy, stripeevent.SourceWebhook)
			require.NoError(t, err)
			bGate.wait(t, "replica B's table write")

			payload := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
			ev := parse(t, payload)
			boom := func(context.Context, handler.Tx) error { return errors.New("transition refused") }
			e.failNext.Store(&boom)
			aDone := make(chan error, 1)
			go func() {
				_, err := a.h.Handle(ctx, parse(t, payload), payload, stripeevent.SourceWebhook)
				aDone <- err
			}()
			if held {
				aGate.wait(t, "replica A's record of its failure")
			} else {
				require.ErrorContains(t, <-aDone, "transition refused")
			}
			time.Sleep(5 * time.Millisecond) // B's delivery is received later

			outcome, err := b.h.Handle(ctx, parse(t, payload), payload, stripeevent.SourcePoller)
			require.NoError(t, err)
			assert.Equal(t, stripeevent.Applied, outcome)
			// A copy of B's pending row, to write it again later.
			_, err = e.pool.Exec(ctx, `CREATE TABLE saved_pending AS SELECT * FROM event_records_pending WHERE event_id = $1`, ev.ID)
			require.NoError(t, err)
			for _, s := range []*events.Store{a.store, b.store} {
				rec, err := s.Get(ctx, ev.ID)
				require.NoError(t, err, "never a 404 for an answered event")
				assert.Equal(t, events.StatusProcessed, rec.Status)
			}

			if tc.afterWrite {
				close(bGate.open)
				flushed(t, b.q)
			}
			if held {
				close(aGate.open)
				require.ErrorContains(t, <-aDone, "transition refused")
			}
			failed, err := e.store.Get(ctx, ev.ID) // the table alone
			require.NoError(t, err)
			if !tc.afterWrite {
				require.Equal(t, events.StatusFailed, failed.Status, "A's failure is in the table before B's write")
				close(bGate.open)
				flushed(t, b.q)
			}

			check := func(what string) {
				t.Helper()
				rec, err := e.store.Get(ctx, ev.ID)
				require.NoError(t, err, what)
				assert.Equal(t, events.StatusProcessed, rec.Status, what)
				assert.Empty(t, rec.LastError, what)
				if tc.afterWrite {
					assert.Equal(t, 1, rec.Attempts, "%s: the processed record is left alone", what)
					assert.Equal(t, stripeevent.SourcePoller, rec.Source, what)
					return
				}
				assert.Equal(t, 2, rec.Attempts, "%s: A's failed attempt is counted", what)
				assert.True(t, failed.ReceivedAt.Equal(rec.ReceivedAt), "%s: A's received_at kept: got %s, want %s", what, rec.ReceivedAt, failed.ReceivedAt)
				assert.Equal(t, stripeevent.SourceWebhook, rec.Source, "%s: A's source kept", what)
			}
			check("written")

			// B's row again (a lost delete): a starting replica's sweep writes it.
			_, err = e.pool.Exec(ctx, `INSERT INTO event_records_pending SELECT * FROM saved_pending`)
			require.NoError(t, err)
			c := e.replica(t, e.store, 0, nil)
			deadline := time.Now().Add(20 * time.Second)
			for e.pending(t, ev.ID) > 0 {
				require.True(t, time.Now().Before(deadline), "the row written again never left")
				time.Sleep(10 * time.Millisecond)
			}
			check("written again")

			outcome, err = c.h.Handle(ctx, parse(t, payload), payload, stripeevent.SourceWebhook)
			require.NoError(t, err)
			assert.Equal(t, stripeevent.Duplicate, outcome)
			flushed(t, c.q)
			check("after a redelivery")
			assert.Equal(t, 1, e.effects(t, ev.ID))
			assert.Equal(t, 1, e.ledger(t, ev.ID))
		})
	}
}

// docs/design.md §5 (bookkeeping): replica A's transaction for an
// event fails before replica B claims it, and A records the failure (mark,
// then table) only after B's writer has loaded B's pending row (not marked
// then) and before that writer's put. B's processed record must still keep
// A's bookkeeping (A's received_at and source, both attempts), and the
// event is applied once and readable throughout.
func TestWriteBehindSupersedesAFailureWrittenBetweenItsLoadAndItsPut(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	payload := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
	ev := parse(t, payload)

	aGate := newGate()
	a := e.replica(t, e.store, 0,
		func(q *recordq.Queue) events.Pending { return lateMarker{Queue: q, before: aGate, after: &gate{}} })
	boom := func(context.Context, handler.Tx) error { return errors.New("transition refused") }
	e.failNext.Store(&boom)
	aDone := make(chan error, 1)
	go func() {
		_, err := a.h.Handle(ctx, parse(t, payload), payload, stripeevent.SourceWebhook)
		aDone <- err
	}()
	aGate.wait(t, "replica A's record of its failure")

	// B's writer, about to write B's record, lets A record its failure
	// first, and waits for it to be in the table.
	var aErr error
	raced := false
	b := e.replica(t, racedTable{Store: e.store, id: ev.ID, once: &sync.Once{}, race: func() {
		raced = true
		close(aGate.open)
		aErr = <-aDone
	}}, 1, nil)
	time.Sleep(5 * time.Millisecond) // B's delivery is received later
	outcome, err := b.h.Handle(ctx, parse(t, payload), payload, stripeevent.SourcePoller)
	require.NoError(t, err)
	assert.Equal(t, stripeevent.Applied, outcome)
	rec, err := b.store.Get(ctx, ev.ID)
	require.NoError(t, err, "never a 404 for an answered event")
	assert.Equal(t, events.StatusProcessed, rec.Status)
	flushed(t, b.q)
	require.True(t, raced, "B's writer wrote the record")
	require.ErrorContains(t, aErr, "transition refused")

	var marked int
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM event_records_prior WHERE event_id = $1`, ev.ID).Scan(&marked))
	require.Equal(t, 1, marked, "A marked its failure (after B's load)")
	got, err := e.store.Get(ctx, ev.ID) // the table alone
	require.NoError(t, err)
	assert.Equal(t, events.StatusProcessed, got.Status)
	assert.Empty(t, got.LastError)
	assert.Equal(t, 2, got.Attempts, "A's failed attempt is counted")
	assert.Equal(t, stripeevent.SourceWebhook, got.Source, "A's source kept")
	assert.True(t, got.ReceivedAt.Before(rec.ReceivedAt), "A's earlier received_at kept: got %s, B's %s", got.ReceivedAt, rec.ReceivedAt)
	assert.Zero(t, e.pending(t, ev.ID))
	assert.Equal(t, 1, e.effects(t, ev.ID))
	assert.Equal(t, 1, e.ledger(t, ev.ID))
}

// readRacedTable is the events table where, once the writer has read the
// record of event id (BatchGet answered, before its put), race runs.
type readRacedTable struct {
	racedTable
}

func (r readRacedTable) BatchGet(ctx context.Context, ids []string) (map[string]events.Record, error) {
	found, err := r.Store.BatchGet(ctx, ids)
	for _, id := range ids {
		if id == r.id {
			r.once.Do(r.race)
		}
	}
	return found, err
}

// docs/design.md §5 (bookkeeping): replicas A and C
// fail to process an event and B processes it. C records its failure
// (mark, then table) after B's writer has read the table's record of the
// event and before that writer writes its processed record over it. The
// processed record must count every attempt (A's, C's, B's: 3), keep A's
// source, and the event is applied once. A's failure is in the table
// either before B's claim (B's row is marked: read at once) or only after
// B's load (B's write as a fresh record is refused, then read).
func TestWriteBehindSupersedesAFailureWrittenBetweenItsReadAndItsPut(t *testing.T) {
	for _, tc := range []struct {
		name string
		// A records its failure only when B's writer first writes.
		aLate bool
	}{
		{name: "first failure recorded before the claim"},
		{name: "first failure recorded after the load", aLate: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			payload := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
			ev := parse(t, payload)
			boom := func(context.Context, handler.Tx) error { return errors.New("transition refused") }

			fail := func(g *gate) (replica, chan error) {
				r := e.replica(t, e.store, 0,
					func(q *recordq.Queue) events.Pending { return lateMarker{Queue: q, before: g, after: &gate{}} })
				e.failNext.Store(&boom)
				done := make(chan error, 1)
				go func() {
					_, err := r.h.Handle(ctx, parse(t, payload), payload, stripeevent.SourceWebhook)
					done <- err
				}()
				return r, done
			}
			aGate := &gate{}
			if tc.aLate {
				aGate = newGate()
			}
			_, aDone := fail(aGate)
			var aErr error
			if tc.aLate {
				aGate.wait(t, "replica A's record of its failure")
			} else {
				aErr = <-aDone
				require.ErrorContains(t, aErr, "transition refused")
			}
			time.Sleep(5 * time.Millisecond) // C's delivery is received later
			cGate := newGate()
			_, cDone := fail(cGate)
			cGate.wait(t, "replica C's record of its failure")

			// B's writer lets A record its failure before its first write
			// (aLate), and C record its own once B's writer has read A's.
			var cErr error
			aRaced, cRaced := false, false
			table := readRacedTable{racedTable{Store: e.store, id: ev.ID, once: &sync.Once{}, race: func() {
				cRaced = true
				close(cGate.open)
				cErr = <-cDone
			}}}
			var wt recordq.Table = table
			if tc.aLate {
				wt = struct {
					racedTable
					readRacedTable
				}{racedTable{Store: e.store, id: ev.ID, once: &sync.Once{}, race: func() {
					aRaced = true
					close(aGate.open)
					aErr = <-aDone
				}}, table}
			}
			b := e.replica(t, wt, 1, nil)
			time.Sleep(5 * time.Millisecond) // B's delivery is received later
			outcome, err := b.h.Handle(ctx, parse(t, payload), payload, stripeevent.SourcePoller)
			require.NoError(t, err)
			assert.Equal(t, stripeevent.Applied, outcome)
			flushed(t, b.q)
			require.True(t, cRaced, "B's writer read the record")
			require.Equal(t, tc.aLate, aRaced)
			require.ErrorContains(t, aErr, "transition refused")
			require.ErrorContains(t, cErr, "transition refused")

			got, err := e.store.Get(ctx, ev.ID) // the table alone
			require.NoError(t, err)
			assert.Equal(t, events.StatusProcessed, got.Status)
			assert.Empty(t, got.LastError)
			assert.Equal(t, 3, got.Attempts, "A's and C's failed attempts are counted")
			assert.Equal(t, stripeevent.SourceWebhook, got.Source, "A's source kept")
			assert.Zero(t, e.pending(t, ev.ID))
			assert.Equal(t, 1, e.effects(t, ev.ID))
			assert.Equal(t, 1, e.ledger(t, ev.ID))
		})
	}
}
