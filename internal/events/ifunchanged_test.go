package events_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// PutProcessed with IfUnchanged: the write-behind
// supersedes a record it read on condition that the table still holds it
// as read. Any write since (a failure recorded: one more attempt; a
// processed or rejected record) refuses the put, names it in a
// *NotWrittenError and leaves the table as it was; an unchanged record,
// however long its last_error, is superseded. Both ways of writing
// (INGEST_RECORD_FRESH_WRITE) answer the same.
func TestPutProcessedIfUnchangedWritesOnlyOverTheRecordRead(t *testing.T) {
	for _, mode := range writeModes {
		for _, tc := range []struct {
			name  string
			cause string
			// since is what another replica writes between the read and the put.
			since   func(t *testing.T, s *events.Store, r events.Record)
			written bool
			want    func(t *testing.T, got events.Record)
		}{
			{
				name: "unchanged", cause: "transition refused", written: true,
				want: func(t *testing.T, got events.Record) {
					assert.Equal(t, events.StatusProcessed, got.Status)
					assert.Equal(t, 2, got.Attempts)
					assert.Equal(t, stripeevent.SourceWebhook, got.Source, "the failure's source kept")
				},
			},
			{
				name: "unchanged, its last_error truncated", cause: strings.Repeat("x", 3*events.MaxLastError), written: true,
				want: func(t *testing.T, got events.Record) {
					assert.Equal(t, events.StatusProcessed, got.Status)
					assert.Empty(t, got.LastError)
				},
			},
			{
				name: "a failure recorded since", cause: "transition refused",
				since: func(t *testing.T, s *events.Store, r events.Record) {
					require.NoError(t, s.RecordFailure(context.Background(), r, errors.New("transition refused")))
				},
				want: func(t *testing.T, got events.Record) {
					assert.Equal(t, events.StatusFailed, got.Status)
					assert.Equal(t, 2, got.Attempts, "the second failure is left to be superseded")
				},
			},
			{
				name: "processed since", cause: "transition refused",
				since: func(t *testing.T, s *events.Store, r events.Record) {
					r.Status, r.ProcessedAt, r.Attempts = events.StatusProcessed, time.Now(), 1
					require.NoError(t, s.PutProcessed(context.Background(), []events.Record{r}))
				},
				want: func(t *testing.T, got events.Record) {
					assert.Equal(t, events.StatusProcessed, got.Status)
					assert.Equal(t, 1, got.Attempts, "the other processed record is left alone")
				},
			},
			{
				name: "rejected since", cause: "transition refused",
				since: func(t *testing.T, s *events.Store, r events.Record) {
					r.Status, r.ProcessedAt, r.LastError = events.StatusProcessed, time.Now(), "rejected: unknown price"
					require.NoError(t, s.PutProcessed(context.Background(), []events.Record{r}))
				},
				want: func(t *testing.T, got events.Record) {
					assert.Equal(t, "rejected: unknown price", got.LastError, "the rejection is left alone")
				},
			},
		} {
			t.Run(mode.name+"/"+tc.name, func(t *testing.T) {
				f := newFixture(t)
				s := mode.store(f.store)
				ctx := context.Background()
				payload := stripetest.Event{Fixture: "customer.subscription.updated"}.Build(t)
				ev, err := stripeevent.Parse(payload)
				require.NoError(t, err)
				failed := events.NewRecord(ev, payload, platform, 720*time.Hour, stripeevent.SourceWebhook, f.now)
				require.NoError(t, s.RecordFailure(ctx, failed, errors.New(tc.cause)))
				// An untouched event in the same call is written either way.
				other := stripetest.Event{Fixture: "customer.subscription.updated"}.Build(t)
				oev, err := stripeevent.Parse(other)
				require.NoError(t, err)

				read, err := s.BatchGet(ctx, []string{ev.ID})
				require.NoError(t, err)
				prev, ok := read[ev.ID]
				require.True(t, ok)
				if tc.since != nil {
					tc.since(t, s, failed)
				}
				next := events.NewRecord(ev, payload, platform, 720*time.Hour, stripeevent.SourcePoller, f.now.Add(time.Second))
				next.Status, next.ProcessedAt = events.StatusProcessed, f.now.Add(time.Second)
				next = events.Supersede(prev, next)
				next.IfUnchanged = &prev
				fresh := events.NewRecord(oev, other, platform, 720*time.Hour, stripeevent.SourcePoller, f.now)
				fresh.Status, fresh.ProcessedAt, fresh.IfAbsent = events.StatusProcessed, f.now, true

				err = s.PutProcessed(ctx, []events.Record{next, fresh})
				if tc.written {
					require.NoError(t, err)
				} else {
					var nw *events.NotWrittenError
					require.ErrorAs(t, err, &nw)
					assert.Equal(t, []string{ev.ID}, nw.IDs)
				}
				got, err := s.Get(ctx, ev.ID)
				require.NoError(t, err)
				tc.want(t, got)
				got, err = s.Get(ctx, oev.ID)
				require.NoError(t, err)
				assert.Equal(t, events.StatusProcessed, got.Status, "the other record is written")
			})
		}
	}
}
