package events_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// writeModes are the two ways of writing conditional records
// (INGEST_RECORD_FRESH_WRITE): every conditional-write test runs both.
var writeModes = []struct {
	name  string
	store func(*events.Store) *events.Store
}{
	{"transactions", func(s *events.Store) *events.Store { return s }},
	{"one PutItem each", (*events.Store).WithItemPuts},
}

// PutProcessed with IfAbsent: more records than one transaction
// holds, some of whose events the table already holds. Every record whose
// event has no record, or only an expired one, is written; the others are
// left exactly as they were and named in a *NotWrittenError, so the
// write-behind reads and supersedes them instead of overwriting. Both ways
// of writing them (INGEST_RECORD_FRESH_WRITE) answer the same.
func TestPutProcessedIfAbsentWritesOnlyWhereTheTableHoldsNothing(t *testing.T) {
	for _, tc := range writeModes {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.store = tc.store(f.store)
			putIfAbsent(t, f)
		})
	}
}

func putIfAbsent(t *testing.T, f *fixture) {
	ctx := context.Background()
	build := func() events.Record {
		payload := stripetest.Event{Fixture: "customer.subscription.updated"}.Build(t)
		ev, err := stripeevent.Parse(payload)
		require.NoError(t, err)
		r := events.NewRecord(ev, payload, platform, 720*time.Hour, stripeevent.SourcePoller, f.now)
		r.Status, r.ProcessedAt, r.IfAbsent = events.StatusProcessed, f.now, true
		return r
	}
	recs := make([]events.Record, 130) // over the 100 of one transaction
	for i := range recs {
		recs[i] = build()
	}
	existing := map[string]string{} // id: what the table holds
	failed := recs[3]
	require.NoError(t, f.store.RecordFailure(ctx, failed, errors.New("transition refused")))
	existing[failed.ID] = "failed"
	rejected := recs[101]
	rejected.IfAbsent, rejected.LastError = false, "rejected: unknown price"
	require.NoError(t, f.store.PutProcessed(ctx, []events.Record{rejected}))
	existing[rejected.ID] = "rejected"
	processed := recs[129]
	processed.IfAbsent, processed.Source = false, stripeevent.SourceWebhook
	require.NoError(t, f.store.PutProcessed(ctx, []events.Record{processed}))
	existing[processed.ID] = "processed"
	expired := recs[50]
	expired.Expiration = f.now.Add(-time.Hour)
	require.NoError(t, f.store.RecordFailure(ctx, expired, errors.New("long ago")))

	err := f.store.PutProcessed(ctx, recs)
	var nw *events.NotWrittenError
	require.ErrorAs(t, err, &nw)
	assert.ElementsMatch(t, []string{failed.ID, rejected.ID, processed.ID}, nw.IDs)

	for _, r := range recs {
		got, err := f.store.Get(ctx, r.ID)
		require.NoError(t, err, r.ID)
		switch existing[r.ID] {
		case "failed":
			assert.Equal(t, events.StatusFailed, got.Status, "the failed record is left alone")
		case "rejected":
			assert.Equal(t, "rejected: unknown price", got.LastError, "the rejected record is left alone")
		case "processed":
			assert.Equal(t, stripeevent.SourceWebhook, got.Source, "the processed record is left alone")
		default:
			assert.Equal(t, events.StatusProcessed, got.Status, r.ID)
			assert.Equal(t, stripeevent.SourcePoller, got.Source, r.ID)
			assert.Equal(t, 1, got.Attempts, r.ID)
			assert.Empty(t, got.LastError, r.ID)
		}
	}

	// Written again, every record is refused and none is changed.
	err = f.store.PutProcessed(ctx, recs[:5])
	require.ErrorAs(t, err, &nw)
	assert.Len(t, nw.IDs, 5)
	got, err := f.store.Get(ctx, failed.ID)
	require.NoError(t, err)
	assert.Equal(t, events.StatusFailed, got.Status)
}
