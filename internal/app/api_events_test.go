package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// deliver posts a signed event and returns its id.
func deliver(t *testing.T, a *apptest.App, e stripetest.Event) string {
	t.Helper()
	payload := e.Build(t)
	status, body := post(t, a.Server.URL(), payload, stripetest.Sign(payload, secret, time.Now()))
	require.Equal(t, http.StatusOK, status, body)
	return body["event_id"].(string)
}

func listAll(t *testing.T, a *apptest.App, query url.Values) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 50)
		q := url.Values{}
		for k, v := range query {
			q[k] = v
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		status, body := get(t, a.Admin.URL()+"/internal/v1/events?"+q.Encode(), token)
		require.Equal(t, http.StatusOK, status, body)
		for _, e := range body["data"].([]any) {
			ids = append(ids, e.(map[string]any)["id"].(string))
		}
		cursor, _ = body["next_cursor"].(string)
		if cursor == "" {
			return ids
		}
	}
}

func TestEventListings(t *testing.T) {
	a := startApp(t, nil, nil)
	day := time.Now().UTC().Truncate(24 * time.Hour).Add(-24 * time.Hour)
	var want []string
	for i := range 7 {
		want = append(want, deliver(t, a, stripetest.Event{
			Fixture: "customer.subscription.created",
			Account: stripetest.Ptr("acct_listing"),
			Created: day.Add(time.Duration(i)*time.Hour + 30*time.Minute),
			Object:  map[string]any{"id": "sub_listing"},
		}))
	}
	deliver(t, a, stripetest.Event{Fixture: "customer.created", Created: day.Add(-time.Minute)}) // previous day, platform

	tests := []struct {
		name  string
		query url.Values
		want  []string
	}{
		{"by date, 3 per page", url.Values{"date": {day.Format("2006-01-02")}, "limit": {"3"}}, want},
		{"by date and time range", url.Values{"date": {day.Format("2006-01-02")}, "from": {"01:00:00"}, "to": {"03:30:00"}}, want[1:4]},
		{"by account, 2 per page", url.Values{"stripe_account": {"acct_listing"}, "limit": {"2"}}, want},
		{"by subscription since/until", url.Values{"subscription": {"sub_listing"},
			"since": {day.Add(2 * time.Hour).Format(time.RFC3339)}, "until": {day.Add(5 * time.Hour).Format(time.RFC3339)}}, want[2:5]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, listAll(t, a, tc.query), "every event once, oldest first")
		})
	}
}

func TestEventListingRefusesBadParameters(t *testing.T) {
	a := startApp(t, nil, nil)
	deliver(t, a, stripetest.Event{Fixture: "customer.subscription.created", Account: stripetest.Ptr("acct_bad")})
	// A real cursor of another listing.
	status, body := get(t, a.Admin.URL()+"/internal/v1/events?stripe_account=acct_bad&limit=1", token)
	require.Equal(t, http.StatusOK, status, body)
	foreignCursor := body["next_cursor"].(string)
	require.NotEmpty(t, foreignCursor)

	for _, q := range []string{
		"",
		"date=2026-13-01",
		"date=yesterday",
		"date=2026-01-01&from=25:00:00",
		"date=2026-01-01&from=10:00&to=11:00",
		"date=2026-01-01&from=12:00:00&to=11:00:00",
		"date=2026-01-01&since=2026-01-01T00:00:00Z",
		"date=2026-01-01&stripe_account=acct_x",
		"stripe_account=cus_123",
		"stripe_account=acct_x&since=last-week",
		"stripe_account=acct_x&since=2026-02-01T00:00:00Z&until=2026-01-01T00:00:00Z",
		"stripe_account=acct_x&from=10:00:00",
		"subscription=in_123",
		"subscription=sub_x&limit=0",
		"subscription=sub_x&limit=1001",
		"subscription=sub_x&limit=ten",
		"subscription=sub_x&cursor=not-a-cursor",
		"stripe_account=acct_other&cursor=" + foreignCursor,
		"subscription=sub_x&colour=blue",
		"subscription=sub_x&subscription=sub_y",
	} {
		t.Run(q, func(t *testing.T) {
			status, body := get(t, a.Admin.URL()+"/internal/v1/events?"+q, token)
			assert.Equal(t, http.StatusBadRequest, status, body)
			assert.Equal(t, "invalid_parameter", errorCode(body))
		})
	}
	for _, path := range []string{"/internal/v1/events/not-an-event", "/internal/v1/events/" + strings.Repeat("x", 300)} {
		status, body := get(t, a.Admin.URL()+path, token)
		assert.Equal(t, http.StatusBadRequest, status, body)
	}
}

func TestExpiredEventsAreAbsentFromTheAPI(t *testing.T) {
	a := startApp(t, nil, map[string]string{"EVENT_TTL": "1h"})
	created := time.Now().UTC().Add(-2 * time.Hour)
	id := deliver(t, a, stripetest.Event{Fixture: "customer.subscription.created", Created: created,
		Account: stripetest.Ptr("acct_expired"), Object: map[string]any{"id": "sub_expired"}})
	status, _ := get(t, a.Admin.URL()+"/internal/v1/events/"+id, token)
	assert.Equal(t, http.StatusNotFound, status)
	assert.Empty(t, listAll(t, a, url.Values{"date": {created.Format("2006-01-02")}}))
	assert.Empty(t, listAll(t, a, url.Values{"stripe_account": {"acct_expired"}}))
	assert.Empty(t, listAll(t, a, url.Values{"subscription": {"sub_expired"}}))
}

func TestReplay(t *testing.T) {
	// Stripe's Events API holds one event the table never saw.
	missing := stripetest.Event{Fixture: "invoice.paid"}.Build(t)
	var missingID string
	{
		var ev struct{ ID string }
		require.NoError(t, json.Unmarshal(missing, &ev))
		missingID = ev.ID
	}
	a := startApp(t, nil, nil)
	a.Fake.Add("acct_1Nv0FGQ9RKHgCVdK", missing)
	// sawAccount is the Stripe-Account header of the last request to Stripe.
	sawAccount := func() string {
		reqs := a.Fake.Requests()
		if len(reqs) == 0 {
			return ""
		}
		return reqs[len(reqs)-1].StripeAccount
	}
	ctx := context.Background()

	replay := func(t *testing.T, id, query string) (int, map[string]any) {
		req, err := http.NewRequest(http.MethodPost, a.Admin.URL()+"/internal/v1/events/"+id+"/replay"+query, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		return do(t, req)
	}

	t.Run("a failed event becomes processed", func(t *testing.T) {
		payload := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
		ev, err := stripeevent.Parse(payload)
		require.NoError(t, err)
		rec := events.NewRecord(ev, payload, a.Config.PlatformAccount, a.Config.EventTTL, stripeevent.SourceWebhook, time.Now())
		require.NoError(t, a.Events.RecordFailure(ctx, rec, fmt.Errorf("postgres was down")))

		status, body := replay(t, ev.ID, "")
		require.Equal(t, http.StatusOK, status, body)
		assert.Equal(t, "applied", body["outcome"])
		assert.Equal(t, "store", body["payload_source"])
		assert.Equal(t, "processed", body["event"].(map[string]any)["status"])
		sub, present := body["event"].(map[string]any)["subscription"]
		assert.True(t, present, "every contract key is present")
		assert.Nil(t, sub, "a payment event is about no subscription: null")

		status, body = replay(t, ev.ID, "")
		require.Equal(t, http.StatusOK, status, body)
		assert.Equal(t, "duplicate", body["outcome"], "a processed event is not applied again")
	})
	t.Run("an event only Stripe has is fetched and processed", func(t *testing.T) {
		status, body := replay(t, missingID, "?stripe_account=acct_1Nv0FGQ9RKHgCVdK")
		require.Equal(t, http.StatusOK, status, body)
		assert.Equal(t, "stripe", body["payload_source"])
		assert.Equal(t, "applied", body["outcome"])
		assert.Equal(t, "acct_1Nv0FGQ9RKHgCVdK", sawAccount())
		rec, err := a.Events.Get(ctx, missingID)
		require.NoError(t, err)
		assert.Equal(t, stripeevent.SourceReplay, rec.Source)
	})
	t.Run("unknown everywhere", func(t *testing.T) {
		status, body := replay(t, "evt_nowhere", "")
		assert.Equal(t, http.StatusNotFound, status, body)
		assert.Equal(t, "not_found", errorCode(body))
	})
	t.Run("bad parameters", func(t *testing.T) {
		status, _ := replay(t, "evt_x", "?stripe_account=cus_1")
		assert.Equal(t, http.StatusBadRequest, status)
		status, _ = replay(t, "evt_x", "?colour=red")
		assert.Equal(t, http.StatusBadRequest, status)
	})
}
