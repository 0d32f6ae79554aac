package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/thin"
)

// TestThinIntakeIsOneCommitFindableAtOnce: a thin notification is accepted
// on one Postgres commit (its hydration job), with no events-table write
// before the answer; the events store finds it at once all the same
// (received, thin, its source and account), an index listing shows it
// (the listing writes the queued record first), a redelivery queues nothing
// twice, one already hydrated is a duplicate, and a record the table holds
// processed is never written back to received. No serve runs here: nothing
// writes the record behind the test's back.
func TestThinIntakeIsOneCommitFindableAtOnce(t *testing.T) {
	a := apptest.New(t, apptest.Options{})
	ctx := context.Background()
	raw := events.NewStore(a.Dynamo, a.Config.EventsTable, a.Config.EventTTL, nil) // the table alone
	id := stripetest.NewThinID()
	body := stripetest.Thin{Fixture: "v1.payment_intent.succeeded", ID: id, Context: stripetest.Ptr(merchant)}.Build(t)
	ingest := func(want stripeevent.Outcome) {
		t.Helper()
		res, err := a.Ingest.Ingest(ctx, body, stripeevent.SourceEventBridge)
		require.NoError(t, err)
		assert.Equal(t, want, res.Outcome)
		assert.Equal(t, stripeevent.KindThin, res.Kind)
	}
	queued := func() int {
		t.Helper()
		var n int
		require.NoError(t, a.Pool.QueryRow(ctx, `SELECT count(*) FROM thin_hydrations WHERE event_id = $1`, id).Scan(&n))
		return n
	}

	ingest(stripeevent.Received)
	_, err := raw.Get(ctx, id)
	require.ErrorIs(t, err, apperr.ErrNotFound, "the answer did not wait for an events-table write")
	rec, err := a.Events.Get(ctx, id)
	require.NoError(t, err, "findable at once")
	assert.Equal(t, events.StatusReceived, rec.Status)
	assert.Equal(t, stripeevent.KindThin, rec.PayloadKind)
	assert.Equal(t, stripeevent.SourceEventBridge, rec.Source)
	assert.Equal(t, merchant, rec.StripeAccount)
	assert.Equal(t, body, rec.Payload)
	got, err := a.Events.BatchGet(ctx, []string{id})
	require.NoError(t, err)
	assert.Contains(t, got, id, "BatchGet (the poller's diff) finds it too")

	ingest(stripeevent.Received)
	assert.Equal(t, 1, queued(), "a redelivery queues nothing twice")

	page, err := a.Events.ByAccount(ctx, merchant, events.Range{}, 100, "")
	require.NoError(t, err)
	var listed bool
	for _, r := range page.Records {
		listed = listed || r.ID == id
	}
	assert.True(t, listed, "an index listing after the answer shows it")
	rec, err = raw.Get(ctx, id)
	require.NoError(t, err, "written to the table")
	assert.Equal(t, events.StatusReceived, rec.Status)

	// Hydrated: the record processed, the job done.
	require.NoError(t, raw.ThinDone(ctx, id, events.ThinHydrated{Type: rec.Type, StripeAccount: rec.StripeAccount,
		Created: rec.Created, SnapshotEvent: stripetest.NewID(), Hydration: events.HydrationHydrated}, time.Now()))
	require.NoError(t, a.Thin.Queue.Done(ctx, id))
	ingest(stripeevent.Duplicate)
	assert.Zero(t, queued(), "a duplicate queues nothing")

	// Past thin.DoneRetention a redelivery is queued again; its record
	// stays processed (the hydrator then finds the snapshot a duplicate).
	_, err = a.Pool.Exec(ctx, `UPDATE thin_done SET done_at = now() - $1::interval WHERE event_id = $2`, (thin.DoneRetention + time.Hour).String(), id)
	require.NoError(t, err)
	require.NoError(t, a.Thin.Queue.Purge(ctx))
	ingest(stripeevent.Received)
	assert.Equal(t, 1, queued())
	require.NoError(t, a.ThinRecords.Settled(ctx))
	rec, err = a.Events.Get(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, events.StatusProcessed, rec.Status, "never written back to received")
}

// TestEveryThinFixtureIsAcceptedSigned: each thin fixture under
// internal/stripetest/testdata/thin (v1 payment intent, subscription and
// invoice; v2.core.account.*; the health event), signed as Stripe signs, is
// answered 200 received at /webhooks/stripe and findable at once as a thin
// record of its type and account.
func TestEveryThinFixtureIsAcceptedSigned(t *testing.T) {
	fake, sink := stripetest.New(t, stripetest.Options{}), newActionSink(t)
	fake.DelayV2(time.Minute) // keep them received: this is about the intake
	e := startThinApp(t, fake, sink, nil)
	names := stripetest.ThinFixtureNames()
	for _, want := range []string{"v1.payment_intent.succeeded", "v1.customer.subscription.updated", "v1.invoice.paid",
		"v2.core.account.created", "v2.core.account.closed", "v2.core.health.event_generation_failure.resolved"} {
		require.Contains(t, names, want)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			id := stripetest.NewThinID()
			body := stripetest.Thin{Fixture: name, ID: id}.Build(t)
			var doc struct {
				Context string `json:"context"`
			}
			require.NoError(t, json.Unmarshal(body, &doc))
			status, ans := e.deliver(t, body)
			require.Equal(t, http.StatusOK, status, ans)
			assert.Equal(t, "received", ans["outcome"])
			assert.Equal(t, "thin", ans["payload_kind"])
			rec := e.event(t, id)
			require.NotNil(t, rec, "findable at once")
			assert.Equal(t, name, rec["type"])
			assert.Equal(t, "thin", rec["payload_kind"])
			assert.Equal(t, "received", rec["status"])
			if doc.Context != "" {
				assert.Equal(t, doc.Context, rec["stripe_account"])
			}
		})
	}
}
