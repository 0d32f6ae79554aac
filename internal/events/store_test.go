package events_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

const platform = "acct_platform_test"

type fixture struct {
	client *dynamodb.Client
	table  string
	store  *events.Store
	now    time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	client := testenv.Dynamo(t)
	table := testenv.TableName("events")
	testenv.CreateTables(t, client, dynamo.EventsTable(table))
	f := &fixture{client: client, table: table, now: time.Now().UTC()}
	f.store = events.NewStore(client, table, 720*time.Hour, func() time.Time { return f.now })
	return f
}

func (f *fixture) record(t *testing.T, e stripetest.Event) events.Record {
	t.Helper()
	payload := e.Build(t)
	ev, err := stripeevent.Parse(payload)
	require.NoError(t, err)
	rec := events.NewRecord(ev, payload, platform, 720*time.Hour, stripeevent.SourceWebhook, f.now)
	require.NoError(t, f.store.Put(context.Background(), rec))
	return rec
}

func TestRecordStoresEveryAttribute(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	created := f.now.Truncate(24 * time.Hour).Add(-time.Second - 24*time.Hour)
	rec := f.record(t, stripetest.Event{Fixture: "customer.subscription.created", Created: created})

	out, err := f.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(f.table), Key: map[string]typesAV{"id": avS(rec.ID)}})
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, attributevalue.UnmarshalMap(out.Item, &raw))

	assert.Equal(t, rec.ID, raw["id"])
	assert.Equal(t, "customer.subscription.created", raw["type"])
	assert.Equal(t, "acct_1Nv0FGQ9RKHgCVdK", raw["stripe_account"])
	day := created.Format("2006-01-02")
	assert.Equal(t, day+" 23:59:59.000", raw["timestamp"])
	assert.Equal(t, day, raw["date"])
	assert.Equal(t, "23:59:59.000", raw["time"])
	assert.EqualValues(t, created.Add(720*time.Hour).Unix(), raw["expiration"])
	assert.Equal(t, "sub_1OqDdJ2eZvKYlo2CxYzAbCdE", raw["subscription"])
	assert.Equal(t, "received", raw["status"])
	assert.Equal(t, "webhook", raw["source"])
	assert.EqualValues(t, 1, raw["attempts"])
	assert.Equal(t, "2023-10-16", raw["api_version"])
	assert.NotEmpty(t, raw["received_at"])
	assert.NotContains(t, raw, "processed_at")
	// The payload is stored gzipped and comes back byte for byte.
	_, isBinary := out.Item["payload"].(*typesB)
	require.True(t, isBinary, "payload must be binary")
	got, err := f.store.Get(ctx, rec.ID)
	require.NoError(t, err)
	assert.JSONEq(t, string(rec.Payload), string(got.Payload))
	assert.Less(t, len(out.Item["payload"].(*typesB).Value), len(rec.Payload))
}

func TestPlatformEventsAndSubscriptionExtraction(t *testing.T) {
	tests := []struct {
		name             string
		event            stripetest.Event
		wantAccount      string
		wantSubscription string
	}{
		{"platform event without account", stripetest.Event{Fixture: "customer.created"}, platform, ""},
		{"subscription object", stripetest.Event{Fixture: "customer.subscription.created"}, "acct_1Nv0FGQ9RKHgCVdK", "sub_1OqDdJ2eZvKYlo2CxYzAbCdE"},
		{"invoice references its subscription", stripetest.Event{Fixture: "invoice.paid"}, "acct_1Nv0FGQ9RKHgCVdK", "sub_1OqDdJ2eZvKYlo2CxYzAbCdE"},
		{"expanded subscription reference", stripetest.Event{Fixture: "invoice.paid",
			Object: map[string]any{"subscription": map[string]any{"id": "sub_expanded", "object": "subscription"}}}, "acct_1Nv0FGQ9RKHgCVdK", "sub_expanded"},
		{"payment intent has none", stripetest.Event{Fixture: "payment_intent.succeeded"}, "acct_1Nv0FGQ9RKHgCVdK", ""},
		{"schedule references one", stripetest.Event{Fixture: "customer.created", Type: "subscription_schedule.canceled",
			Object: map[string]any{"object": "subscription_schedule", "id": "sub_sched_1", "subscription": "sub_from_schedule"}}, platform, "sub_from_schedule"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			payload := tc.event.Build(t)
			ev, err := stripeevent.Parse(payload)
			require.NoError(t, err)
			rec := events.NewRecord(ev, payload, platform, time.Hour, stripeevent.SourceWebhook, time.Now())
			assert.Equal(t, tc.wantAccount, rec.StripeAccount)
			assert.Equal(t, tc.wantSubscription, rec.Subscription)
		})
	}
}

func TestFailureAndProcessedWrites(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	payload := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
	ev, err := stripeevent.Parse(payload)
	require.NoError(t, err)
	rec := events.NewRecord(ev, payload, platform, 720*time.Hour, stripeevent.SourceWebhook, f.now)

	// A first failure creates the record, failed; a second one counts.
	require.NoError(t, f.store.RecordFailure(ctx, rec, fmt.Errorf("postgres down")))
	got, err := f.store.Get(ctx, rec.ID)
	require.NoError(t, err)
	assert.Equal(t, events.StatusFailed, got.Status)
	assert.Equal(t, "postgres down", got.LastError)
	assert.Equal(t, 1, got.Attempts)
	require.NoError(t, f.store.RecordFailure(ctx, rec, fmt.Errorf("still down")))
	got, err = f.store.Get(ctx, rec.ID)
	require.NoError(t, err)
	assert.Equal(t, 2, got.Attempts)
	assert.Equal(t, "still down", got.LastError)

	processed := rec
	processed.Status, processed.ProcessedAt, processed.Attempts = events.StatusProcessed, f.now, 3
	require.NoError(t, f.store.PutProcessed(ctx, []events.Record{processed}))
	got, err = f.store.Get(ctx, rec.ID)
	require.NoError(t, err)
	assert.Equal(t, events.StatusProcessed, got.Status)
	assert.Empty(t, got.LastError)
	assert.False(t, got.ProcessedAt.IsZero())
	assert.Equal(t, 3, got.Attempts)

	// A late failure never undoes a processed record.
	require.NoError(t, f.store.RecordFailure(ctx, rec, fmt.Errorf("late")))
	got, err = f.store.Get(ctx, rec.ID)
	require.NoError(t, err)
	assert.Equal(t, events.StatusProcessed, got.Status)
	assert.Empty(t, got.LastError)

	_, err = f.store.Get(ctx, "evt_unknown")
	assert.ErrorIs(t, err, apperr.ErrNotFound)
}

func TestPutProcessedWritesManyBatches(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var recs []events.Record
	var ids []string
	for range 60 { // three BatchWriteItem requests
		payload := stripetest.Event{Fixture: "invoice.paid"}.Build(t)
		ev, err := stripeevent.Parse(payload)
		require.NoError(t, err)
		rec := events.NewRecord(ev, payload, platform, 720*time.Hour, stripeevent.SourceWebhook, f.now)
		rec.Status, rec.ProcessedAt = events.StatusProcessed, f.now
		recs = append(recs, rec)
		ids = append(ids, rec.ID)
	}
	require.NoError(t, f.store.PutProcessed(ctx, recs))
	got, err := f.store.BatchGet(ctx, ids)
	require.NoError(t, err)
	assert.Len(t, got, 60)
	for _, r := range got {
		assert.Equal(t, events.StatusProcessed, r.Status)
	}
}

func TestExpiredRecordsAreAbsent(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	created := f.now.Add(-721 * time.Hour)
	rec := f.record(t, stripetest.Event{Fixture: "customer.subscription.created", Created: created})

	_, err := f.store.Get(ctx, rec.ID)
	assert.ErrorIs(t, err, apperr.ErrNotFound)
	page, err := f.store.ByDate(ctx, rec.Date(), events.Range{}, 100, "")
	require.NoError(t, err)
	assert.Empty(t, page.Records)
	page, err = f.store.BySubscription(ctx, rec.Subscription, events.Range{}, 100, "")
	require.NoError(t, err)
	assert.Empty(t, page.Records)
	got, err := f.store.BatchGet(ctx, []string{rec.ID})
	require.NoError(t, err)
	assert.Empty(t, got)

	// A failed redelivery of an expired, not yet deleted event records it
	// anew instead of counting an attempt on the stale item.
	rec.Expiration = f.now.Add(time.Hour)
	require.NoError(t, f.store.RecordFailure(ctx, rec, fmt.Errorf("boom")))
	got2, err := f.store.Get(ctx, rec.ID)
	require.NoError(t, err)
	assert.Equal(t, 1, got2.Attempts)
	assert.Equal(t, events.StatusFailed, got2.Status)
}

func TestIndexQueriesPaginate(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	day := f.now.Truncate(24 * time.Hour).Add(-48 * time.Hour)
	const n = 7
	want := map[string]bool{}
	for i := range n {
		rec := f.record(t, stripetest.Event{
			Fixture: "customer.subscription.created",
			Account: stripetest.Ptr("acct_pagination"),
			Created: day.Add(time.Duration(i) * time.Hour),
			Object:  map[string]any{"id": "sub_pagination"},
		})
		want[rec.ID] = true
	}
	// Noise on the next day, another account and another subscription.
	f.record(t, stripetest.Event{Fixture: "customer.subscription.created", Created: day.Add(25 * time.Hour)})

	collect := func(t *testing.T, list func(cursor string) (events.Page, error)) []events.Record {
		var all []events.Record
		cursor := ""
		for pages := 0; ; pages++ {
			require.Less(t, pages, 10, "pagination does not end")
			page, err := list(cursor)
			require.NoError(t, err)
			all = append(all, page.Records...)
			if page.NextCursor == "" {
				return all
			}
			cursor = page.NextCursor
		}
	}
	check := func(t *testing.T, got []events.Record) {
		ids := map[string]bool{}
		for i, r := range got {
			require.False(t, ids[r.ID], "duplicate %s", r.ID)
			ids[r.ID] = true
			if i > 0 {
				require.True(t, got[i-1].Created.Before(r.Created), "not oldest first")
			}
			assert.Equal(t, events.StatusReceived, r.Status, "enriched from the table")
		}
		assert.Equal(t, want, ids)
	}
	t.Run("by date", func(t *testing.T) {
		check(t, collect(t, func(c string) (events.Page, error) {
			return f.store.ByDate(ctx, day.Format(events.DateLayout), events.Range{}, 3, c)
		}))
	})
	t.Run("by date and time range", func(t *testing.T) {
		page, err := f.store.ByDate(ctx, day.Format(events.DateLayout), events.Range{From: "01:00:00.000", To: "02:59:59.999"}, 100, "")
		require.NoError(t, err)
		require.Len(t, page.Records, 2)
		assert.Equal(t, "01:00:00.000", page.Records[0].Time())
	})
	t.Run("by account", func(t *testing.T) {
		check(t, collect(t, func(c string) (events.Page, error) {
			return f.store.ByAccount(ctx, "acct_pagination", events.Range{}, 2, c)
		}))
	})
	t.Run("by subscription with since and until", func(t *testing.T) {
		check(t, collect(t, func(c string) (events.Page, error) {
			return f.store.BySubscription(ctx, "sub_pagination", events.Range{
				From: day.Format(events.TimestampLayout), To: day.Add(6 * time.Hour).Format(events.TimestampLayout)}, 4, c)
		}))
	})
	t.Run("bad cursor", func(t *testing.T) {
		for _, c := range []string{"!!", "e30", "eyJpZCI6IngifQ"} {
			_, err := f.store.ByAccount(ctx, "acct_pagination", events.Range{}, 2, c)
			assert.ErrorIs(t, err, apperr.ErrInvalid, c)
		}
	})
}
