package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/actions"
	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

const (
	merchant      = "acct_1Nv0FGQ9RKHgCVdK" // the fixtures' connected account
	actionsSecret = "test-actions-secret"
)

// newActionSink is an ACTIONS_URL receiver that verifies signatures.
func newActionSink(t *testing.T) *testenv.ActionReceiver {
	return testenv.NewActionReceiver(t, actionsSecret)
}

// received are the actions r accepted, in order.
func received(t *testing.T, r *testenv.ActionReceiver) []actions.Action {
	t.Helper()
	var out []actions.Action
	for _, d := range r.Deliveries() {
		if !d.Accepted() {
			continue
		}
		var a actions.Action
		require.NoError(t, json.Unmarshal(d.Body, &a))
		out = append(out, a)
	}
	return out
}

// waitActions returns the actions r received once there are n of them.
func waitActions(t *testing.T, r *testenv.ActionReceiver, n int) []actions.Action {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := received(t, r)
		if len(got) >= n || time.Now().After(deadline) {
			require.Len(t, got, n, "actions delivered")
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// purchaseEnv is the real program with Stripe faked at the HTTP level and an
// actions receiver.
type purchaseEnv struct {
	app    *apptest.App
	url    string
	stripe *stripetest.Stripe
	sink   *testenv.ActionReceiver
}

func startPurchaseApp(t *testing.T) *purchaseEnv {
	t.Helper()
	e := &purchaseEnv{stripe: stripetest.New(t, stripetest.Options{}), sink: newActionSink(t)}
	a := startApp(t, nil, map[string]string{
		"STRIPE_API_KEY":  "sk_test_fake_purchases",
		"STRIPE_API_BASE": e.stripe.URL,
		"ACTIONS_URL":     e.sink.URL,
		"ACTIONS_SECRET":  actionsSecret,
	})
	e.app, e.url = a, a.Admin.URL() // the purchase and internal APIs
	return e
}

// purchase POSTs /v1/purchases.
func (e *purchaseEnv) purchase(t *testing.T, body any, idempotencyKey string) (int, map[string]any, http.Header) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, e.url+"/v1/purchases", bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), string(raw))
	return resp.StatusCode, out, resp.Header
}

// webhook signs and posts an event built from a fixture.
func (e *purchaseEnv) webhook(t *testing.T, ev stripetest.Event) {
	t.Helper()
	status, body := e.app.Deliver(t, ev.Build(t))
	require.Equal(t, http.StatusOK, status, string(body))
}

func (e *purchaseEnv) get(t *testing.T, path string) map[string]any {
	t.Helper()
	status, body := get(t, e.url+path, token)
	require.Equal(t, http.StatusOK, status, body)
	return body
}

// stripeCalls returns the fake's requests other than GETs.
func (e *purchaseEnv) stripeCalls() []stripetest.Request {
	var out []stripetest.Request
	for _, r := range e.stripe.Requests() {
		if r.Method != http.MethodGet {
			out = append(out, r)
		}
	}
	return out
}

func assertStripeCall(t *testing.T, r stripetest.Request, path, purchaseID, step string, account string, metadata bool) {
	t.Helper()
	assert.Equal(t, path, r.Path)
	assert.Equal(t, merchant, r.StripeAccount, "%s on the connected account", path)
	assert.Equal(t, purchaseID+":"+step, r.IdempotencyKey, path)
	if metadata {
		assert.Equal(t, purchaseID, r.Form.Get("metadata[purchase_id]"), path)
		assert.Equal(t, account, r.Form.Get("metadata[account]"), path)
	}
}

func TestPurchaseLegacyEndToEnd(t *testing.T) {
	e := startPurchaseApp(t)
	account := uuid.NewString()
	body := map[string]any{"account": account, "stripe_account": merchant, "mode": "legacy", "amount": 2000, "currency": "usd"}
	status, p, _ := e.purchase(t, body, "legacy-1")
	require.Equal(t, http.StatusCreated, status, p)
	id := p["id"].(string)
	assert.Equal(t, "new", p["status"])
	assert.Equal(t, "legacy", p["kind"])
	assert.Equal(t, "new", p["payment_status"], "the incomplete payment is stored before the answer")
	assert.NotEmpty(t, p["client_secret"])
	pi := p["payment_intent"].(string)

	calls := e.stripeCalls()
	require.Len(t, calls, 1)
	assertStripeCall(t, calls[0], "/v1/payment_intents", id, "payment_intent", account, true)
	assert.Equal(t, "2000", calls[0].Form.Get("amount"))
	assert.Equal(t, "usd", calls[0].Form.Get("currency"))

	// The client retries (lost answer): same purchase, same PaymentIntent,
	// no second Stripe object.
	status, again, hdr := e.purchase(t, body, "legacy-1")
	require.Equal(t, http.StatusCreated, status, again)
	assert.Equal(t, "true", hdr.Get("Idempotent-Replayed"))
	assert.Equal(t, id, again["id"])
	assert.Equal(t, pi, again["payment_intent"])
	assert.Equal(t, p["client_secret"], again["client_secret"])
	assert.Equal(t, 1, e.stripe.Created("payment_intent"))

	// Stripe reports the success: payment paid, purchase fulfilled, one
	// action delivered, signed, to ACTIONS_URL.
	ev := stripetest.Event{Fixture: "payment_intent.succeeded", Object: map[string]any{"id": pi,
		"metadata": map[string]any{"purchase_id": id, "account": account}}}
	e.webhook(t, ev)
	e.webhook(t, ev) // redelivered: nothing more
	got := e.get(t, "/v1/purchases/"+id)
	assert.Equal(t, "fulfilled", got["status"])
	assert.Equal(t, "paid", got["payment_status"])
	assert.NotNil(t, got["fulfilled_at"])
	pay := e.get(t, "/internal/v1/payments/"+pi)
	assert.Equal(t, "paid", pay["status"])
	assert.Equal(t, id, pay["purchase"])
	internal := e.get(t, "/internal/v1/purchases/"+id)
	assert.Equal(t, "fulfilled", internal["status"])

	acts := waitActions(t, e.sink, 1)
	assert.Equal(t, "purchase.fulfilled", acts[0].Type)
	assert.Equal(t, id, *acts[0].PurchaseID)
	assert.Equal(t, account, acts[0].Account)
	assert.Equal(t, merchant, acts[0].StripeAccount)
	assert.Nil(t, acts[0].SubscriptionID)
}

func TestPurchaseOneOffEndToEnd(t *testing.T) {
	e := startPurchaseApp(t)
	account := uuid.NewString()
	body := map[string]any{"account": account, "stripe_account": merchant, "mode": "product",
		"customer": "cus_PfYl2mB3cD4eF5", "payment_method": "pm_1OqDcI2eZvKYlo2CkLmNoPqR",
		"items": []map[string]any{{"price": "price_A1", "quantity": 2}, {"price": "price_B2", "quantity": 1}}}
	status, p, _ := e.purchase(t, body, "one-off-1")
	require.Equal(t, http.StatusCreated, status, p)
	id := p["id"].(string)
	assert.Equal(t, "one_off", p["kind"])
	assert.Equal(t, "paid", p["payment_status"], "Stripe answered paid: the completed payment is stored")
	assert.Equal(t, "new", p["status"], "fulfilment waits for Stripe's event")
	assert.Equal(t, "paid", p["stripe_status"])
	inv, pi := p["invoice"].(string), p["payment_intent"].(string)
	require.NotEmpty(t, inv)
	require.NotEmpty(t, pi)

	calls := e.stripeCalls()
	require.Len(t, calls, 6)
	assertStripeCall(t, calls[0], "/v1/payment_methods/pm_1OqDcI2eZvKYlo2CkLmNoPqR/attach", id, "attach_payment_method", account, false)
	assert.Equal(t, "cus_PfYl2mB3cD4eF5", calls[0].Form.Get("customer"))
	assertStripeCall(t, calls[1], "/v1/invoices", id, "invoice", account, true)
	assert.Equal(t, "exclude", calls[1].Form.Get("pending_invoice_items_behavior"))
	assert.Equal(t, "false", calls[1].Form.Get("auto_advance"))
	assertStripeCall(t, calls[2], "/v1/invoiceitems", id, "invoice_item:0", account, true)
	assert.Equal(t, inv, calls[2].Form.Get("invoice"))
	assert.Equal(t, "price_A1", calls[2].Form.Get("price"))
	assert.Equal(t, "2", calls[2].Form.Get("quantity"))
	assertStripeCall(t, calls[3], "/v1/invoiceitems", id, "invoice_item:1", account, true)
	assertStripeCall(t, calls[4], "/v1/invoices/"+inv+"/finalize", id, "invoice_finalize", account, false)
	assertStripeCall(t, calls[5], "/v1/invoices/"+inv+"/pay", id, "invoice_pay", account, false)
	assert.Equal(t, "pm_1OqDcI2eZvKYlo2CkLmNoPqR", calls[5].Form.Get("payment_method"))

	status, again, _ := e.purchase(t, body, "one-off-1")
	require.Equal(t, http.StatusCreated, status, again)
	assert.Equal(t, id, again["id"])
	assert.Len(t, e.stripeCalls(), 6, "a finished purchase is answered from the database")
	assert.Equal(t, 1, e.stripe.Created("invoice"))
	assert.Equal(t, 2, e.stripe.Created("invoiceitem"))

	// payment_intent.succeeded names the invoice only: the service looks it
	// up in Stripe, finds it non-recurring, and fulfils.
	e.webhook(t, stripetest.Event{Fixture: "payment_intent.succeeded",
		Object: map[string]any{"id": pi, "invoice": inv, "metadata": map[string]any{}}})
	got := e.get(t, "/v1/purchases/"+id)
	assert.Equal(t, "fulfilled", got["status"])
	acts := waitActions(t, e.sink, 1)
	assert.Equal(t, "purchase.fulfilled", acts[0].Type)
}

func TestPurchaseRecurringEndToEnd(t *testing.T) {
	e := startPurchaseApp(t)
	account := uuid.NewString()
	body := map[string]any{"account": account, "stripe_account": merchant, "mode": "product",
		"customer": "cus_PfYl2mB3cD4eF5", "payment_method": "pm_1OqDcI2eZvKYlo2CkLmNoPqR", "recurring_price": "price_M1"}
	status, p, _ := e.purchase(t, body, "")
	require.Equal(t, http.StatusCreated, status, p)
	id, sub := p["id"].(string), p["subscription"].(string)
	assert.Equal(t, "recurring", p["kind"])
	assert.Equal(t, "new", p["subscription_status"])
	assert.Equal(t, "active", p["stripe_status"])
	calls := e.stripeCalls()
	require.Len(t, calls, 2)
	assertStripeCall(t, calls[1], "/v1/subscriptions", id, "subscription", account, true)
	assert.Equal(t, "price_M1", calls[1].Form.Get("items[0][price]"))
	assert.Equal(t, "error_if_incomplete", calls[1].Form.Get("payment_behavior"))
	assert.Equal(t, "pm_1OqDcI2eZvKYlo2CkLmNoPqR", calls[1].Form.Get("default_payment_method"))

	md := map[string]any{"purchase_id": id, "account": account}
	e.webhook(t, stripetest.Event{Fixture: "customer.subscription.created", Object: map[string]any{"id": sub, "status": "active", "metadata": md}})
	assert.Equal(t, "active", e.get(t, "/internal/v1/subscriptions/"+sub)["status"])
	assert.Equal(t, "fulfilled", e.get(t, "/v1/purchases/"+id)["status"])
	e.webhook(t, stripetest.Event{Fixture: "customer.subscription.deleted", Created: time.Now().Add(time.Second),
		Object: map[string]any{"id": sub, "metadata": md}})
	assert.Equal(t, "terminated", e.get(t, "/internal/v1/subscriptions/"+sub)["status"])

	acts := waitActions(t, e.sink, 2)
	types := []string{acts[0].Type, acts[1].Type}
	assert.ElementsMatch(t, []string{"purchase.fulfilled", "subscription.terminated"}, types)
	for _, a := range acts {
		assert.Equal(t, sub, *a.SubscriptionID)
		assert.Equal(t, id, *a.PurchaseID)
	}
}

func TestPurchaseStripeErrors(t *testing.T) {
	e := startPurchaseApp(t)
	product := func() map[string]any {
		return map[string]any{"account": uuid.NewString(), "stripe_account": merchant, "mode": "product",
			"customer": "cus_PfYl2mB3cD4eF5", "payment_method": "pm_card", "items": []map[string]any{{"price": "price_A1", "quantity": 1}}}
	}

	t.Run("card declined is 402 and a retry replays it without a second invoice", func(t *testing.T) {
		e.stripe.Fail(http.MethodPost, "/v1/invoices/*", 402, "card_error", "card_declined", "Your card was declined.", 1)
		body := product()
		status, p, _ := e.purchase(t, body, "declined-1")
		assert.Equal(t, http.StatusPaymentRequired, status, p)
		assert.Equal(t, "payment_failed", errorCode(p))
		assert.Contains(t, p["error"].(map[string]any)["message"], "Your card was declined.")
		before := e.stripe.Created("invoice")
		status, p, _ = e.purchase(t, body, "declined-1")
		assert.Equal(t, http.StatusPaymentRequired, status, p)
		assert.Equal(t, before, e.stripe.Created("invoice"))
	})
	t.Run("Stripe 500 is 502; a retry after Stripe recovers creates one object", func(t *testing.T) {
		// stripe-go does not retry a POST that answered 500 (Stripe caches it
		// under the idempotency key); this fake lets the next attempt through.
		e.stripe.Fail(http.MethodPost, "/v1/payment_intents", 500, "api_error", "", "Stripe had a problem", 1)
		body := map[string]any{"account": uuid.NewString(), "stripe_account": merchant, "mode": "legacy", "amount": 500, "currency": "eur"}
		before := e.stripe.Created("payment_intent")
		status, p, _ := e.purchase(t, body, "five-hundred-1")
		assert.Equal(t, http.StatusBadGateway, status, p)
		assert.Equal(t, "upstream_error", errorCode(p))
		status, p, _ = e.purchase(t, body, "five-hundred-1")
		require.Equal(t, http.StatusCreated, status, p)
		assert.Equal(t, before+1, e.stripe.Created("payment_intent"))
		status, again, _ := e.purchase(t, body, "five-hundred-1")
		require.Equal(t, http.StatusCreated, status)
		assert.Equal(t, p["payment_intent"], again["payment_intent"])
		assert.Equal(t, before+1, e.stripe.Created("payment_intent"))
	})
	t.Run("unknown price is 400 from Stripe", func(t *testing.T) {
		e.stripe.Fail(http.MethodPost, "/v1/invoiceitems", 400, "invalid_request_error", "resource_missing", "No such price: 'price_A1'", 1)
		status, p, _ := e.purchase(t, product(), "")
		assert.Equal(t, http.StatusBadRequest, status, p)
		assert.Equal(t, "invalid_parameter", errorCode(p))
	})
	t.Run("an Idempotency-Key reused with another request is 409", func(t *testing.T) {
		body := product()
		status, p, _ := e.purchase(t, body, "reuse-1")
		require.Equal(t, http.StatusCreated, status, p)
		body["items"] = []map[string]any{{"price": "price_A1", "quantity": 5}}
		status, p, _ = e.purchase(t, body, "reuse-1")
		assert.Equal(t, http.StatusConflict, status, p)
		assert.Equal(t, "conflict", errorCode(p))
	})
}

func TestPurchaseValidation(t *testing.T) {
	e := startPurchaseApp(t)
	acct := uuid.NewString()
	legacy := func(mod map[string]any) map[string]any {
		b := map[string]any{"account": acct, "stripe_account": merchant, "mode": "legacy", "amount": 100, "currency": "usd"}
		for k, v := range mod {
			if v == nil {
				delete(b, k)
			} else {
				b[k] = v
			}
		}
		return b
	}
	product := func(mod map[string]any) map[string]any {
		b := map[string]any{"account": acct, "stripe_account": merchant, "mode": "product", "customer": "cus_1",
			"payment_method": "pm_1", "items": []map[string]any{{"price": "price_1", "quantity": 1}}}
		for k, v := range mod {
			if v == nil {
				delete(b, k)
			} else {
				b[k] = v
			}
		}
		return b
	}
	tests := []struct {
		name string
		body any
	}{
		{"account not a UUID", legacy(map[string]any{"account": "merchant-1"})},
		{"missing stripe_account", legacy(map[string]any{"stripe_account": nil})},
		{"stripe_account not an account id", legacy(map[string]any{"stripe_account": "cus_1"})},
		{"unknown mode", legacy(map[string]any{"mode": "free"})},
		{"legacy without amount", legacy(map[string]any{"amount": nil})},
		{"legacy negative amount", legacy(map[string]any{"amount": -5})},
		{"legacy amount not an integer", legacy(map[string]any{"amount": 1.5})},
		{"legacy amount as a string", legacy(map[string]any{"amount": "100"})},
		{"legacy bad currency", legacy(map[string]any{"currency": "USD"})},
		{"legacy with product fields", legacy(map[string]any{"customer": "cus_1"})},
		{"unknown field", legacy(map[string]any{"amout": 5})},
		{"product without customer", product(map[string]any{"customer": nil})},
		{"product without payment method", product(map[string]any{"payment_method": nil})},
		{"product with neither items nor recurring_price", product(map[string]any{"items": nil})},
		{"product with both", product(map[string]any{"recurring_price": "price_2"})},
		{"product with an amount", product(map[string]any{"amount": 5})},
		{"item quantity 0", product(map[string]any{"items": []map[string]any{{"price": "price_1", "quantity": 0}}})},
		{"item price not a price", product(map[string]any{"items": []map[string]any{{"price": "prod_1", "quantity": 1}}})},
		{"recurring price not a price", product(map[string]any{"items": nil, "recurring_price": "plan_1"})},
		{"not an object", []int{1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, p, _ := e.purchase(t, tc.body, "")
			assert.Equal(t, http.StatusBadRequest, status, p)
			assert.Equal(t, "invalid_parameter", errorCode(p))
			assert.NotEmpty(t, p["error"].(map[string]any)["message"])
		})
	}
	t.Run("malformed JSON", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, e.url+"/v1/purchases", strings.NewReader(`{"account":`))
		req.Header.Set("Authorization", "Bearer "+token)
		status, p := do(t, req)
		assert.Equal(t, http.StatusBadRequest, status)
		assert.Equal(t, "invalid_parameter", errorCode(p))
	})
	t.Run("bad Idempotency-Key", func(t *testing.T) {
		status, p, _ := e.purchase(t, legacy(nil), strings.Repeat("k", 300))
		assert.Equal(t, http.StatusBadRequest, status, p)
	})
	t.Run("auth", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, e.url+"/v1/purchases", strings.NewReader(`{}`))
		status, p := do(t, req)
		assert.Equal(t, http.StatusUnauthorized, status)
		assert.Equal(t, "unauthorized", errorCode(p))
		status, p = get(t, e.url+"/v1/purchases/"+uuid.NewString(), "")
		assert.Equal(t, http.StatusUnauthorized, status, p)
	})
	t.Run("get", func(t *testing.T) {
		status, p := get(t, e.url+"/v1/purchases/"+uuid.NewString(), token)
		assert.Equal(t, http.StatusNotFound, status, p)
		assert.Equal(t, "not_found", errorCode(p))
		status, p = get(t, e.url+"/v1/purchases/not-a-uuid", token)
		assert.Equal(t, http.StatusBadRequest, status, p)
		status, p = get(t, e.url+"/internal/v1/payments/pi_missing", token)
		assert.Equal(t, http.StatusNotFound, status, p)
		status, p = get(t, e.url+"/internal/v1/subscriptions/in_wrong", token)
		assert.Equal(t, http.StatusBadRequest, status, p)
	})
	assert.Empty(t, e.stripe.Requests(), "an invalid request never reaches Stripe")
	var n int
	require.NoError(t, e.app.Pool.QueryRow(context.Background(), `SELECT count(*) FROM purchases`).Scan(&n))
	assert.Zero(t, n, "an invalid request stores nothing")
}
