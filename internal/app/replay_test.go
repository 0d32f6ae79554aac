package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// TestReplayFetchedFromStripe: a replay of an event the table does not hold
// fetches it from Stripe as the account the request names. The answer is
// checked against the request (same id; a connected account's event is that
// account's) and filed under the account it was fetched from when Stripe
// leaves `account` out (docs/design.md §5: the platform only for events with no
// Connect account). A wrong answer is a 502 and records nothing.
func TestReplayFetchedFromStripe(t *testing.T) {
	const platform = "acct_1ReplayPlatform"
	a := startApp(t, nil, map[string]string{"STRIPE_PLATFORM_ACCOUNT": platform})
	ctx := context.Background()

	build := func(account *string) (string, []byte) {
		payload := stripetest.Event{Fixture: "customer.created", Account: account}.Build(t)
		var ev struct{ ID string }
		require.NoError(t, json.Unmarshal(payload, &ev))
		return ev.ID, payload
	}
	// GET /v1/events/{id} answers payload, whoever asks.
	serve := func(id string, payload []byte) {
		a.Fake.Answer(http.MethodGet, "/v1/events/"+id, http.StatusOK, payload, -1)
	}
	// asked is the Stripe-Account header of the last fetch of id.
	asked := func(id string) string {
		var header string
		for _, r := range a.Fake.Requests() {
			if r.Path == "/v1/events/"+id {
				header = r.StripeAccount
			}
		}
		return header
	}
	replay := func(t *testing.T, id string, account string) (int, map[string]any) {
		t.Helper()
		u := a.Admin.URL() + "/internal/v1/events/" + id + "/replay"
		if account != "" {
			u += "?" + url.Values{"stripe_account": {account}}.Encode()
		}
		req, err := http.NewRequest(http.MethodPost, u, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		return do(t, req)
	}
	absent := func(t *testing.T, ids ...string) {
		t.Helper()
		for _, id := range ids {
			_, err := a.Events.Get(ctx, id)
			assert.ErrorIs(t, err, apperr.ErrNotFound, "%s must not be recorded", id)
		}
	}

	tests := []struct {
		name        string
		account     string  // the request's stripe_account
		eventAcct   *string // the fetched event's `account` (nil: the fixture's none)
		servedID    string  // "": the id asked for
		wantStatus  int
		wantAccount string // the record's stripe_account
		wantHeader  string // the Stripe-Account the fetch carried
	}{
		{name: "connected account, Stripe omits account: filed under the account asked",
			account: "acct_1ReplayConnected", eventAcct: stripetest.Ptr(""),
			wantStatus: http.StatusOK, wantAccount: "acct_1ReplayConnected", wantHeader: "acct_1ReplayConnected"},
		{name: "connected account, Stripe names it",
			account: "acct_1ReplayNamed", eventAcct: stripetest.Ptr("acct_1ReplayNamed"),
			wantStatus: http.StatusOK, wantAccount: "acct_1ReplayNamed", wantHeader: "acct_1ReplayNamed"},
		{name: "platform (no stripe_account), no account: the platform",
			eventAcct: stripetest.Ptr(""), wantStatus: http.StatusOK, wantAccount: platform},
		{name: "the platform's own id, no account: the platform, no Stripe-Account header",
			account: platform, eventAcct: stripetest.Ptr(""), wantStatus: http.StatusOK, wantAccount: platform},
		{name: "platform event about a connected account keeps its account",
			eventAcct: stripetest.Ptr("acct_1ReplayAbout"), wantStatus: http.StatusOK, wantAccount: "acct_1ReplayAbout"},
		{name: "Stripe answers another account's event: 502, nothing written",
			account: "acct_1ReplayAsked", eventAcct: stripetest.Ptr("acct_1ReplayOther"), wantStatus: http.StatusBadGateway},
		{name: "Stripe answers another event id: 502, nothing written",
			account: "acct_1ReplayWrongID", eventAcct: stripetest.Ptr(""), servedID: "other", wantStatus: http.StatusBadGateway},
		{name: "platform: another event id: 502, nothing written",
			eventAcct: stripetest.Ptr(""), servedID: "other", wantStatus: http.StatusBadGateway},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, payload := build(tc.eventAcct)
			askedID := id
			if tc.servedID != "" {
				askedID, _ = build(nil) // the id asked for; Stripe answers with event id
			}
			serve(askedID, payload)
			status, body := replay(t, askedID, tc.account)
			require.Equal(t, tc.wantStatus, status, body)
			if tc.wantStatus != http.StatusOK {
				assert.Equal(t, "upstream_error", errorCode(body))
				absent(t, askedID, id)
				return
			}
			assert.Equal(t, "stripe", body["payload_source"])
			assert.Equal(t, tc.wantHeader, asked(askedID))
			rec, err := a.Events.Get(ctx, id)
			require.NoError(t, err)
			assert.Equal(t, tc.wantAccount, rec.StripeAccount)
			assert.Equal(t, events.StatusProcessed, rec.Status)
			// The stored payload says the same, so a re-drive from the
			// table files it the same way.
			stored, err := stripeevent.Parse(rec.Payload)
			require.NoError(t, err)
			if tc.wantAccount != platform {
				assert.Equal(t, tc.wantAccount, stored.Account)
			}
			assert.Contains(t, listAll(t, a, url.Values{"stripe_account": {tc.wantAccount}}), id)
			status, body = replay(t, id, "")
			require.Equal(t, http.StatusOK, status, body)
			assert.Equal(t, "store", body["payload_source"])
			assert.Equal(t, "duplicate", body["outcome"])
		})
	}
}
