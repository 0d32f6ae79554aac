package recordq_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/recordq"
)

// The backlog is bounded in bytes as well as records, so a run of big
// events cannot exhaust memory while the table is slow; it holds no
// payload (the writers read it from Postgres), sweeps by pages of
// bounded bytes, and a record the table refuses for good is quarantined
// while admission goes on.

// bigRecord is record with a payload padded to about n bytes (the padding
// in a field the events table keeps).
func bigRecord(t *testing.T, n int) events.Record {
	t.Helper()
	r := record(t)
	pad := strings.Repeat("x", max(0, n-len(r.Payload)))
	r.Payload = []byte(strings.Replace(string(r.Payload), `"object": "event"`, `"object": "event", "padding": "`+pad+`"`, 1))
	if !strings.Contains(string(r.Payload), "padding") {
		r.Payload = []byte(strings.Replace(string(r.Payload), `"object":"event"`, `"object":"event","padding":"`+pad+`"`, 1))
	}
	require.Contains(t, string(r.Payload), "padding")
	return r
}

// observer records the largest backlog seen and the records quarantined.
type observer struct {
	mu          sync.Mutex
	maxRecords  int
	maxBytes    int64
	quarantined int
}

func (o *observer) RecordsWritten(int, time.Duration, error) {}
func (o *observer) RecordBacklog(n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.maxRecords = max(o.maxRecords, n)
}
func (o *observer) RecordBacklogBytes(n int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.maxBytes = max(o.maxBytes, n)
}
func (o *observer) RecordsQuarantined(n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.quarantined += n
}

func TestAdmitWaitsAtTheBacklogByteBound(t *testing.T) {
	e := newEnv(t)
	const size = 64 << 10
	q := recordq.New(e.pool, e.table, recordq.Config{MaxBacklog: 1000, MaxBacklogBytes: 3 * size})
	recs := []events.Record{bigRecord(t, size), bigRecord(t, size), bigRecord(t, size)}
	commit(t, e, q, recs...)
	q.Hand(recs[:2]) // no writer runs yet
	require.NoError(t, q.Admit(context.Background()), "two records, under the byte bound")
	q.Hand(recs[2:])
	assert.GreaterOrEqual(t, q.BacklogBytes(), int64(3*size))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := q.Admit(ctx)
	assert.ErrorIs(t, err, recordq.ErrUnavailable, "3 records of 64 KiB fill a 192 KiB bound though the record bound is 1,000")
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	run(t, q)
	flush(t, q)
	require.NoError(t, q.Admit(context.Background()))
	assert.Zero(t, q.BacklogBytes())
}

// TestTheQueueHoldsNoPayload: the writers write the payload of the
// committed row, read when they write, not a copy handed over: the table
// gets the row's payload, and handing 400 records of 64 KiB keeps no
// payload memory alive.
func TestTheQueueHoldsNoPayload(t *testing.T) {
	e := newEnv(t)
	q := recordq.New(e.pool, e.table, recordq.Config{MaxBacklog: 100000, MaxBacklogBytes: 1 << 40})
	ctx := context.Background()
	r := record(t)
	commit(t, e, q, r)
	handed := r
	handed.Payload = []byte(`{"id":"` + r.ID + `","object":"event","not":"the committed row"}`)
	q.Hand([]events.Record{handed})

	const n, size = 400, 64 << 10
	recs := make([]events.Record, n)
	for i := range recs {
		recs[i] = bigRecord(t, size)
	}
	commit(t, e, q, recs...)
	ids := make([]string, n)
	for i, r := range recs {
		ids[i] = r.ID
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before) // the payloads are alive (recs)
	q.Hand(recs)
	recs = nil //nolint:ineffassign,staticcheck // let the payloads go: only the queue could keep them
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	freed := int64(before.HeapAlloc) - int64(after.HeapAlloc)
	t.Logf("heap freed once the caller dropped %d handed records of %d KiB: %d KiB (payloads: %d KiB)", n, size>>10, freed>>10, n*size>>10)
	assert.Greater(t, freed, int64(n*size*9/10), "the queue keeps the payloads in memory")
	assert.Equal(t, n+1, q.Backlog())

	run(t, q)
	flush(t, q)
	got, err := e.table.Get(ctx, r.ID)
	require.NoError(t, err)
	assert.JSONEq(t, string(r.Payload), string(got.Payload), "the payload written is the committed row's")
	found, err := e.table.BatchGet(ctx, ids[:25])
	require.NoError(t, err)
	assert.Len(t, found, 25)
	assert.Zero(t, e.pendingRows(t))
}

// TestTheSweepPagesByBytes: rows a dead instance left are taken up in pages
// of at most SweepPageBytes, never all at once.
func TestTheSweepPagesByBytes(t *testing.T) {
	e := newEnv(t)
	const size = 32 << 10
	dead := recordq.New(e.pool, e.table, recordq.Config{})
	left := make([]events.Record, 12)
	for i := range left {
		left[i] = bigRecord(t, size)
	}
	commit(t, e, dead, left...)
	obs := &observer{}
	q := recordq.New(e.pool, e.table, recordq.Config{SweepPageBytes: 3 * size, Observer: obs})
	run(t, q)
	deadline := time.Now().Add(30 * time.Second)
	for e.pendingRows(t) > 0 {
		require.True(t, time.Now().Before(deadline), "%d rows still pending", e.pendingRows(t))
		time.Sleep(20 * time.Millisecond)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	t.Logf("largest backlog during the sweep: %d records, %d KiB", obs.maxRecords, obs.maxBytes>>10)
	assert.LessOrEqual(t, obs.maxRecords, 3, "a page holds at most SweepPageBytes of payload")
	assert.Positive(t, obs.maxRecords)
}

// TestARecordTheTableRefusesIsQuarantined: DynamoDB refuses a record for
// good (here an empty stripe_account, a secondary index key: a
// ValidationException). After QuarantineAfter tries the record moves to
// event_records_quarantined, counted; it stays readable; the records
// written with it and after it reach the table; admission never stops.
func TestARecordTheTableRefusesIsQuarantined(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	obs := &observer{}
	q := recordq.New(e.pool, e.table, recordq.Config{QuarantineAfter: 3, Observer: obs})
	poison := record(t)
	poison.StripeAccount = ""
	good := make([]events.Record, 30)
	for i := range good {
		good[i] = record(t)
	}
	batch := append([]events.Record{poison}, good...)
	commit(t, e, q, batch...)
	q.Hand(batch)
	run(t, q)
	stop := make(chan struct{})
	refused := make(chan error, 1)
	go func() { // admission goes on the whole time
		for {
			select {
			case <-stop:
				refused <- nil
				return
			default:
			}
			actx, cancel := context.WithTimeout(ctx, time.Second)
			err := q.Admit(actx)
			cancel()
			if err != nil {
				refused <- err
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	flush(t, q)
	close(stop)
	require.NoError(t, <-refused, "Admit refused because of one bad record")

	ids := make([]string, len(good))
	for i, r := range good {
		ids[i] = r.ID
	}
	found, err := e.table.BatchGet(ctx, ids)
	require.NoError(t, err)
	assert.Len(t, found, len(good), "the records batched with the refused one are written")
	assert.Zero(t, e.pendingRows(t))
	var tries int
	var reason string
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT tries, error FROM event_records_quarantined WHERE event_id = $1`, poison.ID).Scan(&tries, &reason))
	assert.Equal(t, 3, tries)
	assert.Contains(t, reason, "ValidationException")
	obs.mu.Lock()
	assert.Equal(t, 1, obs.quarantined)
	obs.mu.Unlock()
	got, err := e.table.WithPending(q).Get(ctx, poison.ID)
	require.NoError(t, err, "a quarantined record stays readable")
	assert.Equal(t, events.StatusProcessed, got.Status)

	// Later records go on being written.
	later := record(t)
	commit(t, e, q, later)
	q.Hand([]events.Record{later})
	flush(t, q)
	_, err = e.table.Get(ctx, later.ID)
	require.NoError(t, err)
}
