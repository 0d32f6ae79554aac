package recordq_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/pgtx"
	"github.com/stripe-payments/stripe-payments/internal/recordq"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

type env struct {
	pool  *pgxpool.Pool
	table *events.Store // the events table alone
}

func newEnv(t testing.TB) *env {
	t.Helper()
	client := testenv.Dynamo(t)
	name := testenv.TableName("events")
	testenv.CreateTables(t, client, dynamo.EventsTable(name))
	return &env{pool: testenv.Postgres(t), table: events.NewStore(client, name, 720*time.Hour, nil)}
}

// record builds the processed record of a fresh real-shaped event.
func record(t *testing.T) events.Record {
	t.Helper()
	payload := stripetest.Event{Fixture: "customer.subscription.updated"}.Build(t)
	ev, err := stripeevent.Parse(payload)
	require.NoError(t, err)
	r := events.NewRecord(ev, payload, "acct_platform_test", 720*time.Hour, stripeevent.SourceWebhook, time.Now())
	r.Status, r.ProcessedAt = events.StatusProcessed, time.Now().UTC()
	return r
}

// commit enqueues recs in a committed transaction, as the handler's batch does.
func commit(t *testing.T, e *env, q *recordq.Queue, recs ...events.Record) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
		return q.Enqueue(context.Background(), tx, recs)
	}))
}

func (e *env) pendingRows(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT count(*) FROM event_records_pending`).Scan(&n))
	return n
}

// run starts the queue's writers until the test ends.
func run(t *testing.T, q *recordq.Queue) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = q.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

func flush(t *testing.T, q *recordq.Queue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, q.Flush(ctx))
}

// readEverywhere checks rec's record as the store answers it while rec is
// pending (Get, BatchGet), then hands rec to q's writers and checks the
// record they leave in the table.
func readEverywhere(t *testing.T, e *env, q *recordq.Queue, rec events.Record, check func(what string, got events.Record)) {
	t.Helper()
	ctx := context.Background()
	store := e.table.WithPending(q)
	got, err := store.Get(ctx, rec.ID)
	require.NoError(t, err)
	check("Get while pending", got)
	found, err := store.BatchGet(ctx, []string{rec.ID})
	require.NoError(t, err)
	check("BatchGet while pending", found[rec.ID])
	q.Hand([]events.Record{rec})
	run(t, q)
	flush(t, q)
	got, err = e.table.Get(ctx, rec.ID)
	require.NoError(t, err)
	check("in the table", got)
	assert.Zero(t, e.pendingRows(t))
}

func TestRecordsReachTheTableAndLeavePostgres(t *testing.T) {
	e := newEnv(t)
	q := recordq.New(e.pool, e.table, recordq.Config{})
	store := e.table.WithPending(q)
	ctx := context.Background()
	recs := make([]events.Record, 60) // more than two batches
	for i := range recs {
		recs[i] = record(t)
	}
	commit(t, e, q, recs...)

	// Before any write: every record is readable, with its payload, through
	// the store, and absent from the table itself.
	got, err := store.Get(ctx, recs[0].ID)
	require.NoError(t, err)
	assert.Equal(t, events.StatusProcessed, got.Status)
	assert.JSONEq(t, string(recs[0].Payload), string(got.Payload))
	assert.Equal(t, recs[0].Subscription, got.Subscription)
	_, err = e.table.Get(ctx, recs[0].ID)
	assert.ErrorIs(t, err, apperr.ErrNotFound)
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	found, err := store.BatchGet(ctx, ids)
	require.NoError(t, err)
	assert.Len(t, found, len(recs))

	q.Hand(recs)
	run(t, q)
	flush(t, q)
	assert.Zero(t, e.pendingRows(t), "written rows are deleted")
	inTable, err := e.table.BatchGet(ctx, ids)
	require.NoError(t, err)
	require.Len(t, inTable, len(recs))
	for _, r := range recs {
		assert.Equal(t, events.StatusProcessed, inTable[r.ID].Status, r.ID)
		assert.Equal(t, 1, inTable[r.ID].Attempts)
	}
	got, err = store.Get(ctx, recs[59].ID)
	require.NoError(t, err)
	assert.JSONEq(t, string(recs[59].Payload), string(got.Payload))
}

func TestRowsLeftByACrashAreWrittenOnStart(t *testing.T) {
	e := newEnv(t)
	dead := recordq.New(e.pool, e.table, recordq.Config{})
	recs := []events.Record{record(t), record(t), record(t)}
	commit(t, e, dead, recs...) // committed, never handed over: the process died

	q := recordq.New(e.pool, e.table, recordq.Config{})
	run(t, q)
	deadline := time.Now().Add(20 * time.Second)
	for e.pendingRows(t) > 0 {
		require.True(t, time.Now().Before(deadline), "rows still pending")
		time.Sleep(20 * time.Millisecond)
	}
	for _, r := range recs {
		got, err := e.table.Get(context.Background(), r.ID)
		require.NoError(t, err)
		assert.Equal(t, events.StatusProcessed, got.Status)
	}
}

func TestWriteKeepsTheBookkeepingOfEarlierAttempts(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	q := recordq.New(e.pool, e.table, recordq.Config{})

	failedBefore := record(t)
	first := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	prev := failedBefore
	prev.Status, prev.ProcessedAt, prev.ReceivedAt, prev.Source, prev.Attempts = events.StatusFailed, time.Time{}, first, stripeevent.SourcePoller, 2
	require.NoError(t, e.table.RecordFailure(ctx, prev, errors.New("postgres down")))

	processedBefore := record(t)
	done := processedBefore
	done.ProcessedAt = time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	done.Attempts = 5
	require.NoError(t, e.table.PutProcessed(ctx, []events.Record{done}))

	commit(t, e, q, failedBefore, processedBefore)
	q.Hand([]events.Record{failedBefore, processedBefore})
	run(t, q)
	flush(t, q)

	got, err := e.table.Get(ctx, failedBefore.ID)
	require.NoError(t, err)
	assert.Equal(t, events.StatusProcessed, got.Status)
	assert.Equal(t, 3, got.Attempts, "one more attempt than the failed record")
	assert.True(t, first.Equal(got.ReceivedAt), "first received_at kept: %s", got.ReceivedAt)
	assert.Equal(t, stripeevent.SourcePoller, got.Source)

	got, err = e.table.Get(ctx, processedBefore.ID)
	require.NoError(t, err)
	assert.Equal(t, 5, got.Attempts, "a processed record is left alone")
	assert.True(t, done.ProcessedAt.Equal(got.ProcessedAt))
	assert.Zero(t, e.pendingRows(t))
}

func TestAdmitRefusesWhileTheTableFailsAndRecovers(t *testing.T) {
	e := newEnv(t)
	client := testenv.Dynamo(t)
	missing := testenv.TableName("events-later")
	table := events.NewStore(client, missing, 720*time.Hour, nil) // not created yet: every write fails
	q := recordq.New(e.pool, table, recordq.Config{})
	ctx := context.Background()
	require.NoError(t, q.Admit(ctx))

	r := record(t)
	commit(t, e, q, r)
	q.Hand([]events.Record{r})
	run(t, q)
	deadline := time.Now().Add(20 * time.Second)
	for q.Admit(ctx) == nil {
		require.True(t, time.Now().Before(deadline), "Admit never refused while the table was missing")
		time.Sleep(10 * time.Millisecond)
	}
	assert.ErrorIs(t, q.Admit(ctx), recordq.ErrUnavailable)
	// The record stays readable from Postgres during the outage.
	got, err := table.WithPending(q).Get(ctx, r.ID)
	require.NoError(t, err)
	assert.Equal(t, events.StatusProcessed, got.Status)

	testenv.CreateTables(t, client, dynamo.EventsTable(missing))
	flush(t, q)
	require.NoError(t, q.Admit(ctx))
	got, err = table.Get(ctx, r.ID)
	require.NoError(t, err)
	assert.Equal(t, events.StatusProcessed, got.Status)
	assert.Zero(t, e.pendingRows(t))
}

func TestAdmitWaitsAtTheBacklogBound(t *testing.T) {
	e := newEnv(t)
	q := recordq.New(e.pool, e.table, recordq.Config{MaxBacklog: 2})
	recs := []events.Record{record(t), record(t)}
	commit(t, e, q, recs...)
	q.Hand(recs) // no writer runs yet: the backlog is full

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, q.Admit(ctx), recordq.ErrUnavailable)
	assert.ErrorIs(t, q.Admit(ctx), context.DeadlineExceeded)

	admitted := make(chan error, 1)
	go func() { admitted <- q.Admit(context.Background()) }()
	run(t, q)
	select {
	case err := <-admitted:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Admit still waiting after the writers emptied the backlog")
	}
}

func TestStoreFindsNothingForAnUnknownEvent(t *testing.T) {
	e := newEnv(t)
	q := recordq.New(e.pool, e.table, recordq.Config{})
	store := e.table.WithPending(q)
	_, err := store.Get(context.Background(), stripetest.NewID())
	assert.ErrorIs(t, err, apperr.ErrNotFound)
	found, err := store.BatchGet(context.Background(), []string{stripetest.NewID()})
	require.NoError(t, err)
	assert.Empty(t, found)
}

func TestClaimAndEnqueueClaimsOnceAndQueuesOnlyNewClaims(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	q := recordq.New(e.pool, e.table, recordq.Config{})
	ref := func(r events.Record) ledger.EventRef {
		return ledger.EventRef{ID: r.ID, Type: r.Type, StripeAccount: r.StripeAccount, Created: r.Created}
	}
	old, a, b := record(t), record(t), record(t)
	applied, err := ledger.New(e.pool).Apply(ctx, ref(old), func(context.Context, pgtx.Tx) error { return nil })
	require.NoError(t, err)
	require.True(t, applied)

	claimed, err := q.ClaimAndEnqueue(ctx, []ledger.EventRef{ref(a), ref(old), ref(b)}, []events.Record{a, old, b})
	require.NoError(t, err)
	assert.Equal(t, map[string]bool{a.ID: true, b.ID: true}, claimed)
	assert.Equal(t, 2, e.pendingRows(t), "no pending row for an event claimed before")
	var ledgerRows int
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM processed_events WHERE event_id = ANY($1)`,
		[]string{a.ID, b.ID, old.ID}).Scan(&ledgerRows))
	assert.Equal(t, 3, ledgerRows)

	again, err := q.ClaimAndEnqueue(ctx, []ledger.EventRef{ref(a)}, []events.Record{a})
	require.NoError(t, err)
	assert.Empty(t, again, "a second claim of the same event claims nothing")
	pending, err := q.Lookup(ctx, []string{a.ID, b.ID, old.ID})
	require.NoError(t, err)
	assert.Len(t, pending, 2)
	assert.JSONEq(t, string(a.Payload), string(pending[a.ID].Payload))
}

func TestStorePrefersThePendingProcessedRecordToAFailedOne(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	q := recordq.New(e.pool, e.table, recordq.Config{})
	store := e.table.WithPending(q)
	r := record(t)
	failed := r
	failed.Status, failed.ProcessedAt, failed.Source = events.StatusFailed, time.Time{}, stripeevent.SourcePoller
	failed.ReceivedAt = time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	require.NoError(t, e.table.RecordFailure(ctx, failed, errors.New("postgres down")))
	commit(t, e, q, r) // the redelivery committed; its record is not in the table yet

	got, err := store.Get(ctx, r.ID)
	require.NoError(t, err)
	assert.Equal(t, events.StatusProcessed, got.Status)
	assert.Equal(t, 2, got.Attempts)
	assert.Equal(t, stripeevent.SourcePoller, got.Source)
	assert.True(t, failed.ReceivedAt.Equal(got.ReceivedAt))
	found, err := store.BatchGet(ctx, []string{r.ID})
	require.NoError(t, err)
	assert.Equal(t, events.StatusProcessed, found[r.ID].Status)
	assert.Equal(t, 2, found[r.ID].Attempts)
}

func TestListingsWaitForThePendingRecords(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	q := recordq.New(e.pool, e.table, recordq.Config{})
	store := e.table.WithPending(q)
	r := record(t)
	commit(t, e, q, r)
	q.Hand([]events.Record{r})

	listed := make(chan events.Page, 1)
	go func() {
		page, err := store.ByAccount(ctx, r.StripeAccount, events.Range{}, 100, "")
		assert.NoError(t, err)
		listed <- page
	}()
	select {
	case <-listed:
		t.Fatal("the listing did not wait for the pending record")
	case <-time.After(100 * time.Millisecond): // no writer runs yet
	}
	run(t, q)
	select {
	case page := <-listed:
		require.Len(t, page.Records, 1, "the acknowledged event is listed")
		assert.Equal(t, r.ID, page.Records[0].ID)
	case <-time.After(20 * time.Second):
		t.Fatal("the listing never returned")
	}
}

func TestWritersRecoverAfterTheTableWasBlackHoled(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	proxy := testenv.NewFaultProxy(t, strings.TrimPrefix(testenv.DynamoEndpoint(t), "http://"))
	client, err := dynamo.NewClient(ctx, "us-east-1", "http://"+proxy.Addr(), dynamo.WithTimeout(time.Second))
	require.NoError(t, err)
	table := events.NewStore(client, e.table.Table(), 720*time.Hour, nil)
	q := recordq.New(e.pool, table, recordq.Config{Timeout: 2 * time.Second})
	run(t, q)
	write := func() events.Record {
		r := record(t)
		commit(t, e, q, r)
		q.Hand([]events.Record{r})
		return r
	}
	write()
	flush(t, q)
	proxy.BlackHole()
	lost := write()
	deadline := time.Now().Add(30 * time.Second)
	for q.Admit(ctx) == nil {
		require.True(t, time.Now().Before(deadline), "Admit never refused while the table was black-holed")
		time.Sleep(20 * time.Millisecond)
	}
	proxy.Restore()
	deadline = time.Now().Add(30 * time.Second)
	for q.Admit(ctx) != nil {
		require.True(t, time.Now().Before(deadline), "Admit still refusing 30 s after the table came back: %v", q.Admit(ctx))
		time.Sleep(20 * time.Millisecond)
	}
	got, err := e.table.Get(ctx, lost.ID)
	require.NoError(t, err)
	assert.Equal(t, events.StatusProcessed, got.Status)
}

// A delivery acknowledged on its commit (its record pending, first received
// by the webhook) can be followed, before the writers copy the record, by a
// redelivery that fails (a poller replay while Stripe is unreachable), whose
// failed record reaches the table first. The record keeps the first
// delivery's bookkeeping (docs/architecture.md: first received_at and source, attempts +
// 1), read through the store and once written.
func TestALaterFailedAttemptDoesNotTakeTheFirstDeliverysBookkeeping(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	q := recordq.New(e.pool, e.table, recordq.Config{})
	first := record(t)
	first.ReceivedAt = time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	commit(t, e, q, first) // acknowledged: effects and record committed

	later := first
	later.ProcessedAt, later.Source = time.Time{}, stripeevent.SourcePoller
	later.ReceivedAt = time.Now().UTC().Truncate(time.Millisecond)
	require.NoError(t, e.table.RecordFailure(ctx, later, errors.New("prepare event: stripe unreachable")))

	check := func(what string, got events.Record) {
		t.Helper()
		assert.Equal(t, events.StatusProcessed, got.Status, what)
		assert.Equal(t, 2, got.Attempts, what)
		assert.True(t, first.ReceivedAt.Equal(got.ReceivedAt), "%s: first received_at kept: got %s, want %s", what, got.ReceivedAt, first.ReceivedAt)
		assert.Equal(t, stripeevent.SourceWebhook, got.Source, what)
	}
	readEverywhere(t, e, q, first, check)
}

// writtenDuringLookup is the write-behind with a writer that copies every
// pending record to the table (and deletes the rows) between the store's
// first read of the table and its look-up of the pending rows: the
// interleaving a busy instance meets.
type writtenDuringLookup struct {
	t *testing.T
	q *recordq.Queue
}

func (w writtenDuringLookup) Lookup(ctx context.Context, ids []string) (map[string]events.Record, error) {
	run(w.t, w.q)
	flush(w.t, w.q)
	return w.q.Lookup(ctx, ids)
}

func (w writtenDuringLookup) Settled(ctx context.Context) error { return w.q.Settled(ctx) }

// docs/design.md §4: from the 200 on, the internal API (and the handler's and the
// poller's reads) find the event processed. An earlier attempt's failed
// record in the table must not be answered when the processed record moved
// from Postgres to the table during the read.
func TestAReadRacingTheWriterFindsTheProcessedRecord(t *testing.T) {
	for _, read := range []string{"Get", "BatchGet"} {
		t.Run(read, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			q := recordq.New(e.pool, e.table, recordq.Config{})
			store := e.table.WithPending(writtenDuringLookup{t: t, q: q})
			r := record(t)
			failed := r
			failed.ProcessedAt, failed.ReceivedAt = time.Time{}, time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
			require.NoError(t, e.table.RecordFailure(ctx, failed, errors.New("postgres down")))
			commit(t, e, q, r) // the redelivery is acknowledged
			q.Hand([]events.Record{r})

			var got events.Record
			if read == "Get" {
				var err error
				got, err = store.Get(ctx, r.ID)
				require.NoError(t, err)
			} else {
				found, err := store.BatchGet(ctx, []string{r.ID})
				require.NoError(t, err)
				got = found[r.ID]
			}
			assert.Zero(t, e.pendingRows(t), "the writer ran during the read")
			assert.Equal(t, events.StatusProcessed, got.Status, "an acknowledged event read as %q", got.Status)
			assert.Equal(t, 2, got.Attempts)
		})
	}
}

// A rejected event is recorded processed with the reason in last_error and
// no effect; once the cause is fixed an operator replay applies it
// (docs/runbooks/StripePaymentsEventRejected.md). With the write-behind,
// the replay's record must then replace the rejection, as the synchronous path does: no stale
// last_error on an event whose effects are now applied, and the attempt
// counted — read through the store and once written.
func TestAnAppliedReplayReplacesTheRejectedRecord(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	q := recordq.New(e.pool, e.table, recordq.Config{})
	replayed := record(t)
	replayed.Source = stripeevent.SourceReplay
	rejected := replayed
	rejected.Source = stripeevent.SourceWebhook
	rejected.ReceivedAt = time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	rejected.LastError = "event object cannot be processed: bad metadata"
	require.NoError(t, e.table.PutProcessed(ctx, []events.Record{rejected}))
	commit(t, e, q, replayed) // the replay claimed and applied it

	check := func(what string, got events.Record) {
		t.Helper()
		assert.Equal(t, events.StatusProcessed, got.Status, what)
		assert.Empty(t, got.LastError, what)
		assert.Equal(t, 2, got.Attempts, what)
		assert.True(t, rejected.ReceivedAt.Equal(got.ReceivedAt), what)
	}
	readEverywhere(t, e, q, replayed, check)
}

// slowTable is the events table with the write of one record held until
// the test ends (a write stuck on a throttled partition, say); entered is
// closed once that write has begun.
type slowTable struct {
	recordq.Table
	slow    string
	release chan struct{}
	entered chan struct{}
	once    *sync.Once
}

func (s slowTable) PutProcessed(ctx context.Context, recs []events.Record) error {
	for _, r := range recs {
		if r.ID == s.slow {
			s.once.Do(func() { close(s.entered) })
			select {
			case <-s.release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return s.Table.PutProcessed(ctx, recs)
}

// docs/architecture.md: a crash leaves rows behind and serve writes them on start (and a
// sweep takes up rows a dead replica left). More than a sweep page of them
// must all be written while live traffic keeps the queue busy (here: one
// live record whose write is stuck), or the listings, which wait for every
// pending row, fail until the traffic stops.
func TestEveryRowLeftByACrashIsWrittenWhileTheQueueIsBusy(t *testing.T) {
	e := newEnv(t)
	table := slowTable{Table: e.table, slow: stripetest.NewID(), release: make(chan struct{}),
		entered: make(chan struct{}), once: &sync.Once{}}
	t.Cleanup(func() { close(table.release) })
	q := recordq.New(e.pool, table, recordq.Config{Timeout: 10 * time.Minute,
		SweepEvery: 50 * time.Millisecond, SweepAge: time.Nanosecond})
	live := record(t)
	live.ID = table.slow
	commit(t, e, q, live) // handed records have committed rows, which the writers read
	q.Hand([]events.Record{live})
	run(t, q)
	// The live write is stuck before any row is left, so no row shares its
	// batch: every row left must get past it.
	select {
	case <-table.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the live record's write never began")
	}
	dead := recordq.New(e.pool, e.table, recordq.Config{})
	left := make([]events.Record, 1010) // more than a sweep page (1000)
	for i := range left {
		left[i] = record(t)
	}
	commit(t, e, dead, left...) // another replica died before handing them over

	// Every row left is written; only the stuck live record's row stays.
	left1 := func() int {
		var n int
		require.NoError(t, e.pool.QueryRow(context.Background(),
			`SELECT count(*) FROM event_records_pending WHERE event_id <> $1`, live.ID).Scan(&n))
		return n
	}
	deadline := time.Now().Add(60 * time.Second)
	for left1() > 0 {
		require.True(t, time.Now().Before(deadline), "%d rows still pending", left1())
		time.Sleep(50 * time.Millisecond)
	}
}

// A rejected event's record goes through the write-behind like any other.
// Writing its pending row a second time (a lost delete, two replicas'
// sweeps) is the same delivery again, not another attempt: the record in
// the table keeps one attempt.
func TestARejectedRecordWrittenTwiceCountsOneAttempt(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	q := recordq.New(e.pool, e.table, recordq.Config{})
	rejected := record(t)
	rejected.LastError = "event object cannot be processed: bad metadata"
	// Written, and its pending row not deleted yet (or the delete lost).
	require.NoError(t, e.table.PutProcessed(ctx, []events.Record{rejected}))
	commit(t, e, q, rejected)
	check := func(what string, got events.Record) {
		t.Helper()
		assert.Equal(t, 1, got.Attempts, what)
		assert.Equal(t, rejected.LastError, got.LastError, what)
	}
	readEverywhere(t, e, q, rejected, check)
}
