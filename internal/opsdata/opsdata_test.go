package opsdata

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/handler"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

func TestCounterFlushesHourlyCountsByOutcome(t *testing.T) {
	pool := testenv.Postgres(t)
	now := time.Date(2026, 3, 1, 10, 59, 0, 0, time.UTC)
	c := NewCounter(pool, slog.New(slog.NewTextHandler(io.Discard, nil)), func() time.Time { return now })
	ctx := context.Background()

	c.Handled("x", stripeevent.Applied, 0)
	c.Handled("x", stripeevent.Completed, 0) // counted as applied
	c.Handled("x", stripeevent.Failed, 0)
	require.NoError(t, c.Flush(ctx))
	now = now.Add(2 * time.Minute) // next hour
	c.Handled("x", stripeevent.Duplicate, 0)
	c.Handled("x", stripeevent.Applied, 0)
	require.NoError(t, c.Flush(ctx))
	require.NoError(t, c.Flush(ctx), "nothing pending: no-op")

	// A second instance adds to the same rows.
	other := NewCounter(pool, slog.New(slog.NewTextHandler(io.Discard, nil)), func() time.Time { return now })
	other.Handled("x", stripeevent.Applied, 0)
	require.NoError(t, other.Flush(ctx))

	hours, err := c.Hours(ctx, 48)
	require.NoError(t, err)
	require.Len(t, hours, 48)
	assert.Equal(t, time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC), hours[47].Start)
	assert.Equal(t, map[string]int64{"applied": 2, "failed": 1}, hours[46].Counts)
	assert.Equal(t, map[string]int64{"applied": 2, "duplicate": 1}, hours[47].Counts)
	assert.Equal(t, int64(3), hours[47].Total())

	now = now.Add(48 * time.Hour)
	hours, err = c.Hours(ctx, 48)
	require.NoError(t, err)
	for _, h := range hours {
		assert.Zero(t, h.Total(), "older than 48 h: out of the chart")
	}
}

// memStore is the handler's event store in memory, for the tracking
// wrapper (the wrapper's own writes go to the real Postgres).
type memStore struct {
	failWrites bool
	notWritten []string // answered in a *events.NotWrittenError
}

func (m *memStore) BatchGet(context.Context, []string) (map[string]events.Record, error) {
	return nil, nil
}

func (m *memStore) PutProcessed(context.Context, []events.Record) error {
	if m.failWrites {
		return errors.New("dynamodb down")
	}
	if len(m.notWritten) > 0 {
		return &events.NotWrittenError{IDs: m.notWritten}
	}
	return nil
}

func (m *memStore) RecordFailure(context.Context, events.Record, error) error { return nil }

// trackedProblems is a problem list on Postgres fed by an in-memory events
// table through handler.TrackProblems, as the ingest path wires them.
func trackedProblems(t *testing.T) (*Problems, *memStore, handler.EventStore) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p := NewProblems(testenv.Postgres(t), log)
	mem := &memStore{}
	return p, mem, handler.TrackProblems(mem, p, log)
}

// rec is a payment_intent.succeeded record of id.
func rec(id string, attempts int, lastErr string) events.Record {
	return events.Record{ID: id, Type: "payment_intent.succeeded", StripeAccount: "acct_1", Attempts: attempts, LastError: lastErr}
}

// A write of records some of which the table refused (their events hold
// another record than expected: the write-behind reads them again): the
// records written are listed or taken off the list, the refused ones are
// left as they were until their own write.
func TestProblemsFollowTheRecordsWrittenWhenSomeAreRefused(t *testing.T) {
	p, mem, store := trackedProblems(t)
	ctx := context.Background()
	require.NoError(t, store.RecordFailure(ctx, rec("evt_recovers", 1, ""), errors.New("stripe down")))
	require.NoError(t, store.RecordFailure(ctx, rec("evt_refused", 1, ""), errors.New("stripe down")))

	mem.notWritten = []string{"evt_refused", "evt_rejected_refused"}
	err := store.PutProcessed(ctx, []events.Record{rec("evt_recovers", 2, ""), rec("evt_refused", 2, ""),
		rec("evt_rejected", 1, "bad object"), rec("evt_rejected_refused", 1, "bad object")})
	var nw *events.NotWrittenError
	require.ErrorAs(t, err, &nw)
	page, err := p.List(ctx, "", 10, "")
	require.NoError(t, err)
	var listed []string
	for _, pr := range page.Problems {
		listed = append(listed, pr.EventID+" "+pr.Outcome)
	}
	assert.ElementsMatch(t, []string{"evt_refused failed", "evt_rejected rejected"}, listed)
}

func TestProblemsFollowFailuresRejectionsAndRecoveries(t *testing.T) {
	p, mem, store := trackedProblems(t)
	ctx := context.Background()

	require.NoError(t, store.RecordFailure(ctx, rec("evt_failed", 1, ""), errors.New("postgres down")))
	require.NoError(t, store.RecordFailure(ctx, rec("evt_recovers", 1, ""), errors.New("stripe down")))
	require.NoError(t, store.PutProcessed(ctx, []events.Record{rec("evt_rejected", 1, "bad object"), rec("evt_fine", 1, "")}))
	counts, err := p.Counts(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"failed": 2, "rejected": 1}, counts)

	// A redelivery that is processed takes its event off the list; one
	// whose write fails does not.
	mem.failWrites = true
	assert.Error(t, store.PutProcessed(ctx, []events.Record{rec("evt_recovers", 2, "")}))
	mem.failWrites = false
	counts, _ = p.Counts(ctx)
	assert.Equal(t, int64(2), counts["failed"])
	require.NoError(t, store.PutProcessed(ctx, []events.Record{rec("evt_recovers", 2, "")}))
	counts, _ = p.Counts(ctx)
	assert.Equal(t, map[string]int64{"failed": 1, "rejected": 1}, counts)

	page, err := p.List(ctx, "", 1, "")
	require.NoError(t, err)
	require.Len(t, page.Problems, 1)
	require.NotEmpty(t, page.Next)
	second, err := p.List(ctx, "", 1, page.Next)
	require.NoError(t, err)
	require.Len(t, second.Problems, 1)
	assert.Empty(t, second.Next)
	assert.ElementsMatch(t, []string{"evt_failed", "evt_rejected"}, []string{page.Problems[0].EventID, second.Problems[0].EventID})

	only, err := p.List(ctx, "rejected", 10, "")
	require.NoError(t, err)
	require.Len(t, only.Problems, 1)
	assert.Equal(t, "bad object", only.Problems[0].Error)

	_, err = p.List(ctx, "", 10, "not-a-cursor")
	assert.ErrorIs(t, err, apperr.ErrInvalid)
}
