package app_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/localstripe"
)

// The purchase API against the local Stripe of `make run` (the tests' fake
// with Stripe's test payment methods deciding and its own signed webhooks,
// nothing sent by the test): each way a purchase goes, from the request
// to the tracked state the local Stripe's events leave.
func TestPurchasesAgainstTheLocalStripe(t *testing.T) {
	t.Parallel()
	ls := localstripe.New(localstripe.Config{WebhookSecret: apptest.Secret, ACHDelay: 300 * time.Millisecond,
		RetryBase: 50 * time.Millisecond, MaxAttempts: 5, Account: "acct_local_demo"})
	srv := httptest.NewServer(ls.LocalHandler(nil))
	t.Cleanup(func() { srv.Close(); ls.Close() })
	ls.Fake().URL = srv.URL
	a := apptest.Start(t, apptest.Options{Stripe: ls.Fake(), Env: map[string]string{"STRIPE_API_KEY": "sk_test_local"}})
	ls.SetWebhookURL(a.URL + "/webhooks/stripe")

	call := func(method, path string, body any) (int, map[string]any) {
		t.Helper()
		b, _ := json.Marshal(body)
		req, err := http.NewRequest(method, a.AdminURL+path, bytes.NewReader(b))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+apptest.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out map[string]any
		require.NoError(t, json.Unmarshal(raw, &out), string(raw))
		return resp.StatusCode, out
	}
	confirm := func(pi, pm string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/payment_intents/"+pi+"/confirm",
			strings.NewReader(url.Values{"payment_method": {pm}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer sk_test_client")
		req.Header.Set("Stripe-Account", "acct_local_demo")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	product := func(pm string, recurring bool) map[string]any {
		b := map[string]any{"account": uuid.NewString(), "stripe_account": "acct_local_demo", "mode": "product",
			"customer": "cus_local_1", "payment_method": pm}
		if recurring {
			b["recurring_price"] = "price_monthly"
		} else {
			b["items"] = []map[string]any{{"price": "price_basic", "quantity": 2}}
		}
		return b
	}
	legacy := map[string]any{"stripe_account": "acct_local_demo", "mode": "legacy", "amount": 2000, "currency": "usd"}

	tests := []struct {
		name string
		body map[string]any
		// confirmWith confirms a legacy purchase's PaymentIntent (the client).
		confirmWith   string
		status        int    // of POST /v1/purchases
		confirmStatus int    // of the confirm
		code          string // of a refused purchase
		// what the local Stripe's webhooks leave
		final, payment, subscription string
	}{
		{name: "legacy, card", body: legacy, confirmWith: "pm_card_visa", status: 201, confirmStatus: 200, final: "fulfilled", payment: "paid"},
		{name: "legacy, declined card", body: legacy, confirmWith: "pm_card_chargeDeclined", status: 201, confirmStatus: 402, final: "new", payment: "failed"},
		{name: "legacy, bank debit", body: legacy, confirmWith: "pm_usBankAccount", status: 201, confirmStatus: 200, final: "fulfilled", payment: "paid"},
		{name: "one-off, card", body: product("pm_card_visa", false), status: 201, final: "fulfilled", payment: "paid"},
		{name: "one-off, lost card", body: product("pm_card_chargeDeclinedLostCard", false), status: 402, code: "payment_failed"},
		{name: "one-off, bank debit", body: product("pm_usBankAccount", false), status: 201, final: "fulfilled", payment: "paid"},
		{name: "one-off, failing bank debit", body: product("pm_usBankAccount_insufficientFunds", false), status: 201, final: "new", payment: "failed"},
		{name: "recurring, card", body: product("pm_card_visa", true), status: 201, final: "fulfilled", subscription: "active"},
		{name: "recurring, declined card", body: product("pm_card_chargeDeclinedInsufficientFunds", true), status: 402, code: "payment_failed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{}
			for k, v := range tc.body {
				body[k] = v
			}
			if body["account"] == nil {
				body["account"] = uuid.NewString()
			}
			status, p := call(http.MethodPost, "/v1/purchases", body)
			require.Equal(t, tc.status, status, "%v", p)
			if tc.code != "" {
				assert.Equal(t, tc.code, p["error"].(map[string]any)["code"])
				return
			}
			if tc.confirmWith != "" {
				assert.Equal(t, tc.confirmStatus, confirm(p["payment_intent"].(string), tc.confirmWith))
			}
			id := p["id"].(string)
			require.Eventually(t, func() bool {
				_, got := call(http.MethodGet, "/v1/purchases/"+id, nil)
				p = got
				return got["status"] == tc.final && (tc.payment == "" || got["payment_status"] == tc.payment) &&
					(tc.subscription == "" || got["subscription_status"] == tc.subscription)
			}, 20*time.Second, 50*time.Millisecond, "the local Stripe's webhooks lead to %s/%s/%s", tc.final, tc.payment, tc.subscription)
		})
	}
	for _, d := range ls.Deliveries() {
		assert.Equal(t, "delivered", d.Status, "%s %s: %s", d.EventID, d.Type, d.LastError)
	}
}

// With every delivery dropped (LOCAL_STRIPE_DROP_RATE=1), the poller finds
// the local Stripe's events in its Events API and the purchase is
// fulfilled all the same: the poller's job, seen under make run.
func TestDroppedWebhooksAreFoundByThePoller(t *testing.T) {
	t.Parallel()
	ls := localstripe.New(localstripe.Config{WebhookSecret: apptest.Secret, DropRate: 1, Account: "acct_local_demo"})
	srv := httptest.NewServer(ls.LocalHandler(nil))
	t.Cleanup(func() { srv.Close(); ls.Close() })
	ls.Fake().URL = srv.URL
	a := apptest.Start(t, apptest.Options{Stripe: ls.Fake(), Env: map[string]string{"STRIPE_API_KEY": "sk_test_local", "POLL_EVERY": "1s"}})
	ls.SetWebhookURL(a.URL + "/webhooks/stripe")

	b, _ := json.Marshal(map[string]any{"account": uuid.NewString(), "stripe_account": "acct_local_demo", "mode": "product",
		"customer": "cus_local_1", "payment_method": "pm_card_visa", "items": []map[string]any{{"price": "price_basic", "quantity": 1}}})
	get := func(method, path string, body []byte) map[string]any {
		req, err := http.NewRequest(method, a.AdminURL+path, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+apptest.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return out
	}
	p := get(http.MethodPost, "/v1/purchases", b)
	require.NotEmpty(t, p["id"], "%v", p)
	require.Eventually(t, func() bool {
		return get(http.MethodGet, "/v1/purchases/"+p["id"].(string), nil)["status"] == "fulfilled"
	}, time.Minute, 200*time.Millisecond, "the poller replayed the dropped events")
	dropped := 0
	for _, d := range ls.Deliveries() {
		if d.Status == "dropped" {
			dropped++
			rec := get(http.MethodGet, "/internal/v1/events/"+d.EventID, nil)
			if d.Type == "invoice.paid" {
				assert.Equal(t, "poller", rec["source"], "%v", rec)
			}
		}
	}
	assert.Equal(t, len(ls.Deliveries()), dropped, "nothing was delivered")
}

// With a thin event destination on the local Stripe (LOCAL_STRIPE_THIN_EVENTS),
// the purchase is fulfilled from thin events: the service records each
// notification, hydrates it through the local Stripe's /v2/core/events and
// /v1/events, and applies the snapshot event it names. With both
// destinations (migrating) the same change arrives twice and applies once.
func TestThinEventsFromTheLocalStripe(t *testing.T) {
	t.Parallel()
	for _, snapshotToo := range []bool{false, true} {
		name := map[bool]string{false: "thin only", true: "thin and snapshot"}[snapshotToo]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ls := localstripe.New(localstripe.Config{WebhookSecret: apptest.Secret, Account: "acct_local_demo",
				RetryBase: 50 * time.Millisecond, MaxAttempts: 5, ThinTypes: []string{"v1.*"}, SnapshotToo: snapshotToo})
			srv := httptest.NewServer(ls.LocalHandler(nil))
			t.Cleanup(func() { srv.Close(); ls.Close() })
			ls.Fake().URL = srv.URL
			sink := httptest.NewServer(localstripe.NewActions("thin-actions-secret"))
			t.Cleanup(sink.Close)
			a := apptest.Start(t, apptest.Options{Stripe: ls.Fake(), Env: map[string]string{"STRIPE_API_KEY": "sk_test_local",
				"ACTIONS_URL": sink.URL, "ACTIONS_SECRET": "thin-actions-secret"}})
			ls.SetWebhookURL(a.URL + "/webhooks/stripe")
			call := func(method, path string, body any) map[string]any {
				t.Helper()
				b, _ := json.Marshal(body)
				req, err := http.NewRequest(method, a.AdminURL+path, bytes.NewReader(b))
				require.NoError(t, err)
				req.Header.Set("Authorization", "Bearer "+apptest.Token)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				var out map[string]any
				require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
				return out
			}
			p := call(http.MethodPost, "/v1/purchases", map[string]any{"account": uuid.NewString(), "stripe_account": "acct_local_demo",
				"mode": "product", "customer": "cus_local_1", "payment_method": "pm_card_visa",
				"items": []map[string]any{{"price": "price_basic", "quantity": 1}}})
			require.NotEmpty(t, p["id"], "%v", p)
			require.Eventually(t, func() bool {
				got := call(http.MethodGet, "/v1/purchases/"+p["id"].(string), nil)
				return got["status"] == "fulfilled" && got["payment_status"] == "paid"
			}, 30*time.Second, 100*time.Millisecond, "fulfilled from the local Stripe's thin events")

			thin, snapshots := 0, 0
			for _, d := range ls.Deliveries() {
				switch {
				case d.Kind == "thin":
					thin++
					require.Eventually(t, func() bool {
						rec := call(http.MethodGet, "/internal/v1/events/"+d.EventID, nil)
						return rec["payload_kind"] == "thin" && rec["hydration"] == "hydrated" && rec["status"] == "processed" &&
							rec["snapshot_event"] == d.Snapshot
					}, 30*time.Second, 100*time.Millisecond, "thin event %s %s recorded and hydrated", d.EventID, d.Type)
				case snapshotToo:
					snapshots++
					// The thin path may fulfil the purchase while the
					// snapshot's delivery is still on its way (or retried).
					require.Eventually(t, func() bool {
						for _, x := range ls.Deliveries() {
							if x.EventID == d.EventID {
								return x.Status == "delivered"
							}
						}
						return false
					}, 30*time.Second, 50*time.Millisecond, "%s %s delivered", d.EventID, d.Type)
				default:
					assert.Equal(t, "thin_only", d.Status, "%s %s: no destination asks for the snapshot", d.EventID, d.Type)
				}
			}
			assert.Positive(t, thin)
			if snapshotToo {
				assert.Equal(t, thin, snapshots, "each change both ways")
			}
			// One fulfil action, however many times the change arrived.
			fulfils := func() int {
				resp, err := http.Get(sink.URL + "?type=purchase.fulfilled")
				require.NoError(t, err)
				defer resp.Body.Close()
				var page struct{ Data []any }
				require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
				return len(page.Data)
			}
			require.Eventually(t, func() bool { return fulfils() > 0 }, 30*time.Second, 100*time.Millisecond)
			time.Sleep(time.Second) // a second one would be on its way
			assert.Equal(t, 1, fulfils(), "the change applied once")
		})
	}
}
