package recordq_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/recordq"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// commitClaimed enqueues recs as the handler does for events its batch
// claims (fresh rows), in a committed transaction.
func commitClaimed(t *testing.T, e *env, q *recordq.Queue, recs ...events.Record) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
		return q.EnqueueClaimed(context.Background(), tx, recs)
	}))
}

// racingTable is the events table where something else happens first
// when the writer first writes (after it loaded its rows): before is run
// once, before the first PutProcessed goes through.
type racingTable struct {
	*events.Store
	once   *sync.Once
	before func(ctx context.Context)
}

func (r racingTable) PutProcessed(ctx context.Context, recs []events.Record) error {
	r.once.Do(func() { r.before(ctx) })
	return r.Store.PutProcessed(ctx, recs)
}

// docs/design.md §5 (bookkeeping): a processed record the
// write-behind writes for an event its own claim inserted (a fresh row)
// never overwrites an earlier failed or rejected record without keeping
// its bookkeeping (first received_at and source, attempts + 1), even when
// nothing marked that record (Postgres was down when the failure was
// recorded, an older replica recorded it) or it was written after the
// writer loaded its row; and nothing is lost: the pending row leaves
// Postgres only once the record is in the table.
func TestAFreshRecordNeverOverwritesAnEarlierVersionUnread(t *testing.T) {
	earlier := time.Now().Add(-time.Minute).UTC()
	for _, tc := range []struct {
		name string
		// prior writes what the table holds of the event (unmarked) before
		// the writer runs; race writes it once the writer has loaded the row.
		prior, race func(t *testing.T, ctx context.Context, e *env, q *recordq.Queue, first events.Record)
		kept        bool // the earlier attempt's bookkeeping must be kept
		attempts    int
	}{
		{name: "nothing before", attempts: 1},
		{
			name: "failure recorded while Postgres was down (no mark)",
			prior: func(t *testing.T, ctx context.Context, e *env, _ *recordq.Queue, first events.Record) {
				// The table alone: RecordFailure has no marker to tell.
				require.NoError(t, e.table.RecordFailure(ctx, first, errors.New("transition refused")))
			},
			kept: true, attempts: 2,
		},
		{
			name: "rejection written by an older replica (no mark)",
			prior: func(t *testing.T, ctx context.Context, e *env, _ *recordq.Queue, first events.Record) {
				first.Status, first.ProcessedAt, first.LastError = events.StatusProcessed, earlier, "rejected: unknown price"
				require.NoError(t, e.table.PutProcessed(ctx, []events.Record{first}))
			},
			kept: true, attempts: 2,
		},
		{
			name: "failure marked and written between the writer's load and its put",
			race: func(t *testing.T, ctx context.Context, e *env, q *recordq.Queue, first events.Record) {
				require.NoError(t, e.table.WithMarker(q).RecordFailure(ctx, first, errors.New("transition refused")))
			},
			kept: true, attempts: 2,
		},
		{
			name: "expired record still in the table (read as absent)",
			prior: func(t *testing.T, ctx context.Context, e *env, _ *recordq.Queue, first events.Record) {
				first.Expiration = time.Now().Add(-time.Hour)
				require.NoError(t, e.table.RecordFailure(ctx, first, errors.New("long ago")))
			},
			attempts: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			rec := record(t)
			rec.Source = stripeevent.SourcePoller
			first := rec // the earlier delivery, as received
			first.Status, first.ProcessedAt, first.ReceivedAt, first.Source = events.StatusReceived, time.Time{}, earlier, stripeevent.SourceWebhook

			var q *recordq.Queue
			race := func(ctx context.Context) {}
			if tc.race != nil {
				race = func(ctx context.Context) { tc.race(t, ctx, e, q, first) }
			}
			q = recordq.New(e.pool, racingTable{Store: e.table, once: &sync.Once{}, before: race}, recordq.Config{})
			if tc.prior != nil {
				tc.prior(t, ctx, e, q, first)
			}
			commitClaimed(t, e, q, rec)
			q.Hand([]events.Record{rec})
			run(t, q)
			flush(t, q)

			got, err := e.table.Get(ctx, rec.ID)
			require.NoError(t, err)
			assert.Equal(t, events.StatusProcessed, got.Status)
			assert.Empty(t, got.LastError, "the success is the record's outcome")
			assert.Equal(t, tc.attempts, got.Attempts, "attempts")
			if tc.kept {
				assert.True(t, earlier.Equal(got.ReceivedAt), "first received_at kept: got %s, want %s", got.ReceivedAt, earlier)
				assert.Equal(t, stripeevent.SourceWebhook, got.Source, "first source kept")
			} else {
				assert.True(t, rec.ReceivedAt.Equal(got.ReceivedAt), "received_at: got %s, want %s", got.ReceivedAt, rec.ReceivedAt)
				assert.Equal(t, stripeevent.SourcePoller, got.Source)
			}
			assert.JSONEq(t, string(rec.Payload), string(got.Payload))
			assert.Zero(t, e.pendingRows(t), "the row leaves once its record is written")
		})
	}
}

// A fresh row written twice (a lost delete of its pending row, a sweep of
// another replica) leaves the record as written the first time: the
// conditional put refuses, the read finds the record itself.
func TestAFreshRecordWrittenTwiceIsLeftAlone(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rec := record(t)
	q := recordq.New(e.pool, e.table, recordq.Config{})
	run(t, q)
	for range 2 {
		commitClaimed(t, e, q, rec)
		q.Hand([]events.Record{rec})
		flush(t, q)
		got, err := e.table.Get(ctx, rec.ID)
		require.NoError(t, err)
		assert.Equal(t, 1, got.Attempts)
		assert.True(t, rec.ReceivedAt.Equal(got.ReceivedAt))
		assert.True(t, rec.ProcessedAt.Equal(got.ProcessedAt))
		assert.Zero(t, e.pendingRows(t))
	}
}
