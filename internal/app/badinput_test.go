package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// request is one row of the bad input catalogue.
type request struct {
	name    string
	method  string
	path    string
	header  map[string]string // Authorization is the valid bearer token unless set here ("" removes it)
	body    []byte
	chunked bool // send the body without Content-Length
	status  int
	code    string // the JSON error code; "" for a 2xx
	// stripe lists the Stripe API calls the row may make (a read of an
	// event the table does not hold); anything else is a failure.
	stripe []string
}

// storedRows counts every row and item the service writes: the events
// table, and the tracking, ledger, outbox and poller tables.
func storedRows(t *testing.T, a *apptest.App) map[string]int {
	t.Helper()
	counts := map[string]int{"events table": int(countItems(t, a))}
	for _, table := range []string{"purchases", "payments", "subscriptions", "outbox", "processed_events", "poller_checkpoints"} {
		var n int
		require.NoError(t, a.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&n))
		counts[table] = n
	}
	return counts
}

func signedEvent(t *testing.T, raw string) ([]byte, map[string]string) {
	t.Helper()
	return []byte(raw), map[string]string{"Stripe-Signature": stripetest.Sign([]byte(raw), secret, time.Now())}
}

func pad(n int) []byte { return bytes.Repeat([]byte("x"), n) }

// TestBadInputCatalogue sends every kind of refused request to every route
// of the real server (webhook, purchase API, internal API) and checks, for
// each: the status, the JSON error code, that nothing at all was written
// (events table, purchases, payments, subscriptions, outbox, ledger,
// checkpoints), and that Stripe was not called.
func TestBadInputCatalogue(t *testing.T) {
	fake := stripetest.New(t, stripetest.Options{})
	a := startApp(t, nil, map[string]string{"STRIPE_API_BASE": fake.URL})
	public, admin := a.Server.URL(), a.Admin.URL()
	now := time.Now()

	event := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
	sig := func(at time.Time) map[string]string {
		return map[string]string{"Stripe-Signature": stripetest.Sign(event, secret, at)}
	}
	hugeEvent := append(append([]byte(`{"id":"evt_huge","object":"event","pad":"`), pad(1<<20)...), `"}`...)
	envelope := func(fields string) string {
		return `{"object":"event","api_version":"2023-10-16","livemode":false,"type":"payment_intent.succeeded",` + fields + `}`
	}
	livemode := stripetest.Event{Fixture: "payment_intent.succeeded", Livemode: stripetest.Ptr(true)}.Build(t)

	legacy := map[string]any{"account": uuid.NewString(), "stripe_account": merchant, "mode": "legacy", "amount": 2000, "currency": "usd"}
	purchaseBody := func(change map[string]any) []byte {
		body := map[string]any{}
		for k, v := range legacy {
			body[k] = v
		}
		for k, v := range change {
			if v == nil {
				delete(body, k)
				continue
			}
			body[k] = v
		}
		b, err := json.Marshal(body)
		require.NoError(t, err)
		return b
	}
	items := make([]map[string]any, 51)
	for i := range items {
		items[i] = map[string]any{"price": "price_1", "quantity": 1}
	}
	bigPurchase := append(purchaseBody(nil)[:len(purchaseBody(nil))-1], []byte(`,"pad":"`+string(pad(64<<10))+`"}`)...)
	noAuth := map[string]string{"Authorization": ""}

	var rows []request
	add := func(r ...request) { rows = append(rows, r...) }

	// Webhook: POST /webhooks/stripe.
	wh := func(name string, body []byte, header map[string]string, status int, code string) request {
		return request{name: "webhook: " + name, method: http.MethodPost, path: "/webhooks/stripe", body: body, header: header, status: status, code: code}
	}
	signed := func(name, raw string) request {
		body, h := signedEvent(t, raw)
		return wh(name, body, h, 400, "invalid_event")
	}
	add(
		wh("missing signature", event, nil, 400, "missing_signature"),
		wh("empty signature", event, map[string]string{"Stripe-Signature": " "}, 400, "missing_signature"),
		wh("wrong secret", event, map[string]string{"Stripe-Signature": stripetest.Sign(event, "whsec_fake_test_other", now)}, 400, "invalid_signature"),
		wh("malformed header", event, map[string]string{"Stripe-Signature": "t=abc,v1=def"}, 400, "invalid_signature"),
		wh("no v1 signature", event, map[string]string{"Stripe-Signature": "t=" + nowUnix(now)}, 400, "invalid_signature"),
		wh("signature of another body", []byte(strings.Replace(string(event), "2000", "2001", 1)), sig(now), 400, "invalid_signature"),
		wh("stale timestamp", event, sig(now.Add(-10*time.Minute)), 400, "timestamp_out_of_tolerance"),
		wh("future timestamp", event, sig(now.Add(10*time.Minute)), 400, "timestamp_out_of_tolerance"),
		signed("signed body that is not JSON", "not json"),
		signed("signed empty body", ""),
		signed("signed JSON array", "[]"),
		signed("signed JSON that is not an event", `{"id":"pi_1","object":"payment_intent"}`),
		signed("signed event without data", envelope(`"id":"evt_nodata","created":1709856000`)),
		signed("signed event with null data.object", envelope(`"id":"evt_nullobj","created":1709856000,"data":{"object":null}`)),
		signed("signed event with a NUL in its id", envelope(`"id":"evt_a\u0000b","created":1709856000,"data":{"object":{}}`)),
		signed("signed event with a slash in its id", envelope(`"id":"evt_a/b","created":1709856000,"data":{"object":{}}`)),
		signed("signed event with a 300-character id", envelope(`"id":"evt_`+string(pad(300))+`","created":1709856000,"data":{"object":{}}`)),
		signed("signed event with created beyond year 9999", envelope(`"id":"evt_future","created":99999999999999,"data":{"object":{}}`)),
		signed("signed event with created 0", envelope(`"id":"evt_zero","created":0,"data":{"object":{}}`)),
		signed("signed event with a type of the wrong type", `{"object":"event","id":"evt_t","type":7,"created":1709856000,"data":{"object":{}}}`),
		signed("signed event with an account that is not one", envelope(`"id":"evt_acct","account":"cus_1","created":1709856000,"data":{"object":{}}`)),
		signed("signed event with a NUL in its account", envelope(`"id":"evt_acct0","account":"acct_\u0000","created":1709856000,"data":{"object":{}}`)),
		wh("unknown Stripe-Payments-Source", event, map[string]string{"Stripe-Signature": stripetest.Sign(event, secret, now),
			"Stripe-Payments-Source": "carrier-pigeon"}, 400, "invalid_parameter"),
		wh("body over 1 MiB", hugeEvent, map[string]string{"Stripe-Signature": stripetest.Sign(hugeEvent, secret, now)}, 413, "payload_too_large"),
		// livemode differs from the key: answered 200 and ignored, not recorded.
		wh("livemode event with a test key (ignored)", livemode, map[string]string{"Stripe-Signature": stripetest.Sign(livemode, secret, now)}, 200, ""),
		request{name: "webhook: wrong method", method: http.MethodGet, path: "/webhooks/stripe", status: 405, code: "method_not_allowed"},
	)
	chunked := wh("chunked body over 1 MiB", hugeEvent, map[string]string{"Stripe-Signature": stripetest.Sign(hugeEvent, secret, now)}, 413, "payload_too_large")
	chunked.chunked = true
	add(chunked)

	// Purchase API: POST /v1/purchases, GET /v1/purchases/{id}.
	pu := func(name string, body []byte, status int, code string) request {
		return request{name: "purchase: " + name, method: http.MethodPost, path: "/v1/purchases", body: body, status: status, code: code}
	}
	add(
		request{name: "purchase: no token", method: http.MethodPost, path: "/v1/purchases", body: purchaseBody(nil), header: noAuth, status: 401, code: "unauthorized"},
		request{name: "purchase: wrong token", method: http.MethodPost, path: "/v1/purchases", body: purchaseBody(nil),
			header: map[string]string{"Authorization": "Bearer " + token + "x"}, status: 401, code: "unauthorized"},
		request{name: "purchase: token as Basic", method: http.MethodPost, path: "/v1/purchases", body: purchaseBody(nil),
			header: map[string]string{"Authorization": "Basic " + token}, status: 401, code: "unauthorized"},
		pu("empty body", nil, 400, "invalid_parameter"),
		pu("malformed JSON", []byte(`{"account":`), 400, "invalid_parameter"),
		pu("JSON array", []byte(`[]`), 400, "invalid_parameter"),
		pu("trailing data", append(purchaseBody(nil), []byte(`{}`)...), 400, "invalid_parameter"),
		pu("unknown field", purchaseBody(map[string]any{"discount": 100}), 400, "invalid_parameter"),
		pu("amount of the wrong type", purchaseBody(map[string]any{"amount": "2000"}), 400, "invalid_parameter"),
		pu("fractional amount", purchaseBody(map[string]any{"amount": 20.5}), 400, "invalid_parameter"),
		pu("amount overflowing int64", []byte(strings.Replace(string(purchaseBody(nil)), `"amount":2000`, `"amount":99999999999999999999999`, 1)), 400, "invalid_parameter"),
		pu("account that is not a UUID", purchaseBody(map[string]any{"account": "acme"}), 400, "invalid_parameter"),
		pu("missing account", purchaseBody(map[string]any{"account": nil}), 400, "invalid_parameter"),
		pu("stripe_account that is not one", purchaseBody(map[string]any{"stripe_account": "acct_1/../x"}), 400, "invalid_parameter"),
		pu("unknown mode", purchaseBody(map[string]any{"mode": "barter"}), 400, "invalid_parameter"),
		pu("zero amount", purchaseBody(map[string]any{"amount": 0}), 400, "invalid_parameter"),
		pu("negative amount", purchaseBody(map[string]any{"amount": -5}), 400, "invalid_parameter"),
		pu("amount over the maximum", purchaseBody(map[string]any{"amount": 100_000_000}), 400, "invalid_parameter"),
		pu("uppercase currency", purchaseBody(map[string]any{"currency": "USD"}), 400, "invalid_parameter"),
		pu("legacy with a customer", purchaseBody(map[string]any{"customer": "cus_1"}), 400, "invalid_parameter"),
		pu("product without a customer", purchaseBody(map[string]any{"mode": "product", "amount": nil, "currency": nil,
			"payment_method": "pm_1", "recurring_price": "price_1"}), 400, "invalid_parameter"),
		pu("product with items and a recurring price", purchaseBody(map[string]any{"mode": "product", "amount": nil, "currency": nil,
			"customer": "cus_1", "payment_method": "pm_1", "recurring_price": "price_1", "items": items[:1]}), 400, "invalid_parameter"),
		pu("product with 51 items", purchaseBody(map[string]any{"mode": "product", "amount": nil, "currency": nil,
			"customer": "cus_1", "payment_method": "pm_1", "items": items}), 400, "invalid_parameter"),
		pu("product item of quantity 0", purchaseBody(map[string]any{"mode": "product", "amount": nil, "currency": nil,
			"customer": "cus_1", "payment_method": "pm_1", "items": []map[string]any{{"price": "price_1", "quantity": 0}}}), 400, "invalid_parameter"),
		pu("product price that is not one", purchaseBody(map[string]any{"mode": "product", "amount": nil, "currency": nil,
			"customer": "cus_1", "payment_method": "pm_1", "recurring_price": "prod_1"}), 400, "invalid_parameter"),
		pu("body over 64 KiB", bigPurchase, 413, "payload_too_large"),
		request{name: "purchase: Idempotency-Key with a control character", method: http.MethodPost, path: "/v1/purchases", body: purchaseBody(nil),
			header: map[string]string{"Idempotency-Key": "order\t1"}, status: 400, code: "invalid_parameter"},
		request{name: "purchase: Idempotency-Key over 255 characters", method: http.MethodPost, path: "/v1/purchases", body: purchaseBody(nil),
			header: map[string]string{"Idempotency-Key": string(pad(256))}, status: 400, code: "invalid_parameter"},
		request{name: "purchase: GET of an id that is not a UUID", method: http.MethodGet, path: "/v1/purchases/order-1", status: 400, code: "invalid_parameter"},
		request{name: "purchase: GET of an unknown purchase", method: http.MethodGet, path: "/v1/purchases/" + uuid.NewString(), status: 404, code: "not_found"},
		request{name: "purchase: GET without a token", method: http.MethodGet, path: "/v1/purchases/" + uuid.NewString(), header: noAuth, status: 401, code: "unauthorized"},
		request{name: "purchase: wrong method", method: http.MethodPut, path: "/v1/purchases", body: purchaseBody(nil), status: 405, code: "method_not_allowed"},
		request{name: "purchase: GET with a body over 64 KiB", method: http.MethodGet, path: "/v1/purchases/" + uuid.NewString(), body: pad(64<<10 + 1), status: 413, code: "payload_too_large"},
	)
	chunkedPurchase := pu("chunked body over 64 KiB", bigPurchase, 413, "payload_too_large")
	chunkedPurchase.chunked = true
	add(chunkedPurchase)

	// Internal API.
	in := func(name, method, path string, status int, code string) request {
		return request{name: "internal: " + name, method: method, path: "/internal/v1" + path, status: status, code: code}
	}
	get := http.MethodGet
	replayMissing := in("replay of an event neither the table nor Stripe knows", http.MethodPost, "/events/evt_missing/replay", 404, "not_found")
	replayMissing.stripe = []string{"GET /v1/events/evt_missing"}
	add(
		request{name: "internal: no token", method: get, path: "/internal/v1/events/evt_1", header: noAuth, status: 401, code: "unauthorized"},
		request{name: "internal: wrong token", method: get, path: "/internal/v1/events/evt_1",
			header: map[string]string{"Authorization": "Bearer wrong"}, status: 401, code: "unauthorized"},
		request{name: "internal: token with a suffix", method: get, path: "/internal/v1/events/evt_1",
			header: map[string]string{"Authorization": "Bearer " + token + token}, status: 401, code: "unauthorized"},
		request{name: "internal: empty bearer", method: get, path: "/internal/v1/events/evt_1",
			header: map[string]string{"Authorization": "Bearer "}, status: 401, code: "unauthorized"},
		request{name: "internal: replay without a token", method: http.MethodPost, path: "/internal/v1/events/evt_1/replay", header: noAuth, status: 401, code: "unauthorized"},
		in("event id that is not one", get, "/events/not-an-event", 400, "invalid_parameter"),
		in("event id of 300 characters", get, "/events/evt_"+string(pad(300)), 400, "invalid_parameter"),
		in("event id with an escaped slash", get, "/events/evt_1%2F..%2Fx", 400, "invalid_parameter"),
		in("unknown event", get, "/events/evt_missing", 404, "not_found"),
		in("list without a selector", get, "/events", 400, "invalid_parameter"),
		in("list with two selectors", get, "/events?date=2024-03-08&stripe_account=acct_1", 400, "invalid_parameter"),
		in("list by an impossible date", get, "/events?date=2024-13-01", 400, "invalid_parameter"),
		in("list by date with since", get, "/events?date=2024-03-08&since=2024-03-08T00:00:00Z", 400, "invalid_parameter"),
		in("list by date with a bad from", get, "/events?date=2024-03-08&from=25:00:00", 400, "invalid_parameter"),
		in("list by date with from after to", get, "/events?date=2024-03-08&from=10:00:00&to=09:00:00", 400, "invalid_parameter"),
		in("list by account with from", get, "/events?stripe_account=acct_1&from=10:00:00", 400, "invalid_parameter"),
		in("list by an account that is not one", get, "/events?stripe_account=cus_1", 400, "invalid_parameter"),
		in("list by a subscription that is not one", get, "/events?subscription=si_1", 400, "invalid_parameter"),
		in("list with since not RFC 3339", get, "/events?stripe_account=acct_1&since=yesterday", 400, "invalid_parameter"),
		in("list with since after until", get, "/events?stripe_account=acct_1&since=2024-03-09T00:00:00Z&until=2024-03-08T00:00:00Z", 400, "invalid_parameter"),
		in("list with limit 0", get, "/events?date=2024-03-08&limit=0", 400, "invalid_parameter"),
		in("list with limit 1001", get, "/events?date=2024-03-08&limit=1001", 400, "invalid_parameter"),
		in("list with a limit that is not a number", get, "/events?date=2024-03-08&limit=ten", 400, "invalid_parameter"),
		in("list with an unknown parameter", get, "/events?date=2024-03-08&sort=desc", 400, "invalid_parameter"),
		in("list with a repeated parameter", get, "/events?date=2024-03-08&date=2024-03-09", 400, "invalid_parameter"),
		in("list with a forged cursor", get, "/events?date=2024-03-08&cursor=eyJpZCI6ImV2dF8xIn0", 400, "invalid_parameter"),
		in("list with a cursor that is not base64", get, "/events?stripe_account=acct_1&cursor=!!!", 400, "invalid_parameter"),
		in("list with a malformed query string", get, "/events?stripe_account=acct_1&cursor=%%%", 400, "invalid_parameter"),
		in("list with a ';' in the query string", get, "/events?date=2024-03-08;limit=5", 400, "invalid_parameter"),
		in("replay of an id that is not one", http.MethodPost, "/events/not-an-event/replay", 400, "invalid_parameter"),
		in("replay with an unknown parameter", http.MethodPost, "/events/evt_missing/replay?force=1", 400, "invalid_parameter"),
		in("replay with an account that is not one", http.MethodPost, "/events/evt_missing/replay?stripe_account=acct_1/../x", 400, "invalid_parameter"),
		replayMissing,
		in("purchase id that is not a UUID", get, "/purchases/42", 400, "invalid_parameter"),
		in("unknown purchase", get, "/purchases/"+uuid.NewString(), 404, "not_found"),
		in("payment id that is not a PaymentIntent", get, "/payments/ch_1", 400, "invalid_parameter"),
		in("unknown payment", get, "/payments/pi_missing", 404, "not_found"),
		in("subscription id that is not one", get, "/subscriptions/pi_1", 400, "invalid_parameter"),
		in("unknown subscription", get, "/subscriptions/sub_missing", 404, "not_found"),
		in("wrong method", http.MethodDelete, "/events/evt_1", 405, "method_not_allowed"),
		in("unknown route", get, "/nothing-here", 404, "not_found"),
	)
	replayBig := in("replay with a body over 64 KiB", http.MethodPost, "/events/evt_missing/replay", 413, "payload_too_large")
	replayBig.body = pad(64<<10 + 1)
	listBig := in("list with a body over 64 KiB", get, "/events?date=2024-03-08", 413, "payload_too_large")
	listBig.body = pad(64<<10 + 1)
	add(replayBig, listBig)

	client := &http.Client{Timeout: 30 * time.Second}
	var stripeCalls []string
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			var body io.Reader
			if r.body != nil {
				body = bytes.NewReader(r.body)
				if r.chunked {
					body = io.MultiReader(body) // hides the length: Transfer-Encoding: chunked
				}
			}
			base := admin // the APIs are on the admin listener, the webhook on the public one
			if strings.HasPrefix(r.path, "/webhooks/") {
				base = public
			}
			req, err := http.NewRequest(r.method, base+r.path, body)
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+token)
			for k, v := range r.header {
				if v == "" {
					req.Header.Del(k)
					continue
				}
				req.Header.Set(k, v)
			}
			resp, err := client.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, r.status, resp.StatusCode, "%s", raw)
			var answer map[string]any
			require.NoError(t, json.Unmarshal(raw, &answer), "every answer is JSON: %q", raw)
			assert.Equal(t, r.code, errorCode(answer), "%s", raw)
			if r.code != "" {
				msg, _ := answer["error"].(map[string]any)["message"].(string)
				assert.NotEmpty(t, msg, "an error carries a message")
				assert.NotContains(t, msg, "SQLSTATE", "internals leaked")
				assert.NotContains(t, msg, token, "the token leaked")
			}
			assert.Equal(t, map[string]int{"events table": 0, "purchases": 0, "payments": 0, "subscriptions": 0, "outbox": 0,
				"processed_events": 0, "poller_checkpoints": 0}, storedRows(t, a), "a refused request wrote something")
			var calls []string
			for _, c := range fake.Requests() {
				calls = append(calls, c.Method+" "+c.Path)
			}
			if len(r.stripe) == 0 {
				assert.Empty(t, calls[len(stripeCalls):], "Stripe was called")
			} else {
				assert.Equal(t, r.stripe, calls[len(stripeCalls):], "Stripe calls")
			}
			stripeCalls = calls
		})
	}
	t.Logf("%d refusals checked", len(rows))
}

func nowUnix(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }
