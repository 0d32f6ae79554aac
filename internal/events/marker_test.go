package events_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// tableMarker records the ids it is told about and whether the table held
// their records at that moment.
type tableMarker struct {
	store   *events.Store // the table alone
	marked  []string
	present []bool
	fail    error
}

func (m *tableMarker) Mark(ctx context.Context, ids []string) error {
	for _, id := range ids {
		_, err := m.store.Get(ctx, id)
		m.marked = append(m.marked, id)
		m.present = append(m.present, err == nil)
	}
	return m.fail
}

// Every record written to the table outside the write-behind
// that a later claim could find (a failure, a rejection, a tool's Put) is
// marked before it is written, so the write-behind reads it; a processed
// record written by the write-behind's own path is not (its event is
// claimed: no later claim can meet it).
func TestFailuresRejectionsAndPutsAreMarkedBeforeTheyAreWritten(t *testing.T) {
	for _, tc := range []struct {
		name   string
		write  func(ctx context.Context, s *events.Store, r events.Record) error
		marked bool
	}{
		{"failure", func(ctx context.Context, s *events.Store, r events.Record) error {
			return s.RecordFailure(ctx, r, errors.New("postgres down"))
		}, true},
		{"rejection", func(ctx context.Context, s *events.Store, r events.Record) error {
			r.Status, r.LastError = events.StatusProcessed, "event object cannot be processed: bad metadata"
			return s.PutProcessed(ctx, []events.Record{r})
		}, true},
		{"put", func(ctx context.Context, s *events.Store, r events.Record) error { return s.Put(ctx, r) }, true},
		{"processed", func(ctx context.Context, s *events.Store, r events.Record) error {
			r.Status = events.StatusProcessed
			return s.PutProcessed(ctx, []events.Record{r})
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			payload := stripetest.Event{Fixture: "customer.subscription.updated"}.Build(t)
			ev, err := stripeevent.Parse(payload)
			require.NoError(t, err)
			r := events.NewRecord(ev, payload, platform, 720*time.Hour, stripeevent.SourceWebhook, f.now)
			m := &tableMarker{store: f.store}
			require.NoError(t, tc.write(ctx, f.store.WithMarker(m), r))
			if !tc.marked {
				assert.Empty(t, m.marked)
				return
			}
			assert.Equal(t, []string{r.ID}, m.marked)
			assert.Equal(t, []bool{false}, m.present, "marked before the record is in the table")
			_, err = f.store.Get(ctx, r.ID)
			require.NoError(t, err, "written")
		})
	}
}

// A failure is recorded even when it cannot be marked (Postgres failing
// too: the API and the console show it), with an error saying so; a
// rejection that cannot be marked is not written (its delivery fails and
// comes again).
func TestAFailedMarkIsReported(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	m := &tableMarker{store: f.store, fail: errors.New("postgres down")}
	s := f.store.WithMarker(m)
	for _, tc := range []struct {
		name    string
		write   func(r events.Record) error
		written bool
	}{
		{"failure", func(r events.Record) error { return s.RecordFailure(ctx, r, errors.New("boom")) }, true},
		{"rejection", func(r events.Record) error {
			r.Status, r.LastError = events.StatusProcessed, "cannot be processed"
			return s.PutProcessed(ctx, []events.Record{r})
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			payload := stripetest.Event{Fixture: "customer.subscription.updated"}.Build(t)
			ev, err := stripeevent.Parse(payload)
			require.NoError(t, err)
			r := events.NewRecord(ev, payload, platform, 720*time.Hour, stripeevent.SourceWebhook, f.now)
			require.ErrorContains(t, tc.write(r), "postgres down")
			_, err = f.store.Get(ctx, r.ID)
			if tc.written {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, apperr.ErrNotFound)
			}
		})
	}
}
