package localstripe_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/localstripe"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/webhook"
)

const secret = "whsec_local_test"

// receiver is the service's /webhooks/stripe: it verifies each delivery
// as the service does and answers what answer says for the attempt.
type receiver struct {
	mu       sync.Mutex
	attempts map[string]int // event id -> deliveries
	types    []string       // types of the verified deliveries, in order
	bad      []string
	answer   func(typ string, attempt int) int
}

func newReceiver(t *testing.T, answer func(typ string, attempt int) int) (*receiver, string) {
	r := &receiver{attempts: map[string]int{}, answer: answer}
	v := webhook.NewVerifier([]string{secret}, 5*time.Minute, time.Now)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		if err := v.Verify(body, req.Header.Get("Stripe-Signature")); err != nil {
			r.bad = append(r.bad, err.Error())
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var ev struct{ ID, Type string }
		_ = json.Unmarshal(body, &ev)
		r.attempts[ev.ID]++
		r.types = append(r.types, ev.Type)
		code := http.StatusOK
		if r.answer != nil {
			code = r.answer(ev.Type, r.attempts[ev.ID])
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(srv.Close)
	return r, srv.URL
}

func (r *receiver) seen() ([]string, map[string]int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at := map[string]int{}
	for k, v := range r.attempts {
		at[k] = v
	}
	return append([]string(nil), r.types...), at, append([]string(nil), r.bad...)
}

type client struct {
	t    *testing.T
	base string
}

// call sends a form request with a test key; headers are name, value pairs.
func (c client) call(method, path string, form url.Values, headers ...string) (int, http.Header, map[string]any) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(form.Encode()))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer sk_test_local")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(c.t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, resp.Header, out
}

func start(t *testing.T, cfg localstripe.Config) (*localstripe.Server, client) {
	cfg.WebhookSecret = secret
	if cfg.RetryBase == 0 {
		cfg.RetryBase = 20 * time.Millisecond
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 4
	}
	s := localstripe.New(cfg)
	srv := httptest.NewServer(s.LocalHandler(nil))
	t.Cleanup(func() { srv.Close(); s.Close() })
	return s, client{t: t, base: srv.URL}
}

func charge(pm string) url.Values {
	return url.Values{"amount": {"2500"}, "currency": {"usd"}, "customer": {"cus_1"}, "payment_method": {pm},
		"confirm": {"true"}, "off_session": {"true"}, "metadata[billing_date]": {"2027-01-31"}}
}

func TestKeys(t *testing.T) {
	_, c := start(t, localstripe.Config{})
	tests := []struct {
		name, auth string
		want       int
		says       string
	}{
		{"a test key", "Bearer sk_test_anything", http.StatusOK, ""},
		{"a restricted test key", "Bearer rk_test_anything", http.StatusOK, ""},
		{"a live key", "Bearer sk_" + "live_" + "not_a_real_key", http.StatusUnauthorized, "live keys are refused"},
		{"a restricted live key", "Bearer rk_" + "live_" + "not_a_real_key", http.StatusUnauthorized, "live keys are refused"},
		{"no key", "", http.StatusUnauthorized, "any sk_test_ key"},
		{"not a key", "Bearer hello", http.StatusUnauthorized, "any sk_test_ key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, c.base+"/v1/customers", strings.NewReader("email=a%40b.c"))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			assert.Equal(t, tc.want, resp.StatusCode, "%s", body)
			assert.Contains(t, string(body), tc.says)
		})
	}
	// curl -u sk_test_…: works as with Stripe.
	req, _ := http.NewRequest(http.MethodGet, c.base+"/v1/accounts/acct_none", nil)
	req.SetBasicAuth("sk_test_x", "")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "authenticated, and the account does not exist")
}

// Stripe's documented test payment methods decide off-session charges,
// with Stripe's error codes.
func TestTestPaymentMethods(t *testing.T) {
	_, c := start(t, localstripe.Config{ACHDelay: time.Hour})
	tests := []struct {
		pm                string
		status            int
		piStatus          string
		code, declineCode string
	}{
		{"pm_card_visa", 200, "succeeded", "", ""},
		{"pm_card_mastercard", 200, "succeeded", "", ""},
		{"pm_card_amex", 200, "succeeded", "", ""},
		{"pm_card_chargeDeclined", 402, "requires_payment_method", "card_declined", "generic_decline"},
		{"pm_card_chargeDeclinedInsufficientFunds", 402, "requires_payment_method", "card_declined", "insufficient_funds"},
		{"pm_card_chargeDeclinedLostCard", 402, "requires_payment_method", "card_declined", "lost_card"},
		{"pm_card_authenticationRequired", 402, "requires_payment_method", "authentication_required", "authentication_required"},
		{"pm_usBankAccount", 200, "processing", "", ""},
		{stripetest.ACHFailingPaymentMethod, 200, "processing", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.pm, func(t *testing.T) {
			status, _, body := c.call(http.MethodPost, "/v1/payment_intents", charge(tc.pm))
			require.Equal(t, tc.status, status, "%v", body)
			pi := body
			if status == 402 {
				e := body["error"].(map[string]any)
				assert.Equal(t, "card_error", e["type"])
				assert.Equal(t, tc.code, e["code"])
				assert.Equal(t, tc.declineCode, e["decline_code"])
				assert.NotEmpty(t, e["message"])
				pi = e["payment_intent"].(map[string]any)
				lpe := pi["last_payment_error"].(map[string]any)
				assert.Equal(t, tc.code, lpe["code"])
				assert.NotEmpty(t, lpe["message"], "a decline always has a message")
			}
			assert.Equal(t, tc.piStatus, pi["status"])
		})
	}
}

// A bank debit is processing, then settles after ACHDelay: succeeded for
// pm_usBankAccount, failed for the failing one; each step is an event,
// delivered signed.
func TestBankDebitsSettleAndSendWebhooks(t *testing.T) {
	rcv, url := newReceiver(t, nil)
	s, c := start(t, localstripe.Config{WebhookURL: url, ACHDelay: 200 * time.Millisecond})
	_, _, ok := c.call(http.MethodPost, "/v1/payment_intents", charge("pm_usBankAccount"))
	_, _, bad := c.call(http.MethodPost, "/v1/payment_intents", charge(stripetest.ACHFailingPaymentMethod))
	require.Eventually(t, func() bool {
		p1, _ := s.Fake().Get(ok["id"].(string))
		p2, _ := s.Fake().Get(bad["id"].(string))
		return p1.Status == "succeeded" && p2.Status == "requires_payment_method"
	}, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		types, _, _ := rcv.seen()
		return len(types) == 6
	}, 10*time.Second, 20*time.Millisecond)
	types, _, badSig := rcv.seen()
	assert.Empty(t, badSig)
	assert.ElementsMatch(t, []string{"payment_intent.created", "payment_intent.processing", "payment_intent.succeeded",
		"payment_intent.created", "payment_intent.processing", "payment_intent.payment_failed"}, types)
}

// A 5xx is retried with backoff until a 2xx, as Stripe does; after
// MaxAttempts the delivery has failed. The Events API keeps every event,
// and delivery_success tells the delivered from the others.
func TestWebhookRetriesAndDeliverySuccess(t *testing.T) {
	rcv, url := newReceiver(t, func(typ string, attempt int) int {
		switch {
		case typ == "account.updated":
			return http.StatusServiceUnavailable // never recovers
		case attempt < 3:
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	s, c := start(t, localstripe.Config{WebhookURL: url, MaxAttempts: 4})
	c.call(http.MethodPost, "/v1/customers", form("email", "a@b.c"))
	_, _, acct := c.call(http.MethodPost, "/v1/accounts", form("type", "express"))
	assert.Equal(t, "express", acct["type"])
	require.Eventually(t, func() bool {
		return delivery(s, "customer.created").Status == "delivered" && delivery(s, "account.updated").Status == "failed"
	}, 10*time.Second, 10*time.Millisecond)
	ok, failed := delivery(s, "customer.created"), delivery(s, "account.updated")
	assert.Equal(t, 3, ok.Attempts, "two 500s, then a 200")
	assert.Equal(t, 4, failed.Attempts, "MaxAttempts")
	assert.Equal(t, http.StatusServiceUnavailable, failed.LastStatus)
	_, attempts, bad := rcv.seen()
	assert.Empty(t, bad, "every delivery is signed with the secret")
	assert.Equal(t, 3, attempts[ok.EventID])
	assert.Equal(t, 4, attempts[failed.EventID])

	ids := func(query string) []string {
		_, _, page := c.call(http.MethodGet, "/v1/events?"+query, nil)
		var out []string
		for _, e := range page["data"].([]any) {
			out = append(out, e.(map[string]any)["id"].(string))
		}
		return out
	}
	assert.ElementsMatch(t, []string{ok.EventID, failed.EventID}, ids("limit=100"))
	assert.Equal(t, []string{ok.EventID}, ids("delivery_success=true"))
	assert.Equal(t, []string{failed.EventID}, ids("delivery_success=false"))
}

// DropRate 1 delivers nothing; the Events API still lists every event, so
// the poller finds them.
func TestDroppedDeliveriesAreListed(t *testing.T) {
	rcv, url := newReceiver(t, nil)
	s, c := start(t, localstripe.Config{WebhookURL: url, DropRate: 1})
	c.call(http.MethodPost, "/v1/payment_intents", charge("pm_card_visa"), "Stripe-Account", "acct_1")
	require.Len(t, s.Deliveries(), 2)
	for _, d := range s.Deliveries() {
		assert.Equal(t, "dropped", d.Status)
	}
	time.Sleep(100 * time.Millisecond)
	types, _, _ := rcv.seen()
	assert.Empty(t, types)
	_, _, page := c.call(http.MethodGet, "/v1/events?delivery_success=false", nil, "Stripe-Account", "acct_1")
	assert.Len(t, page["data"], 2)
	_, _, platform := c.call(http.MethodGet, "/v1/events", nil)
	assert.Empty(t, platform["data"], "the connected account's events are not the platform's")
}

// An idempotent replay answers the first response with
// Idempotent-Replayed: true and makes no second event; Stripe-Context
// selects the account as Stripe-Account does.
func TestIdempotencyAndStripeContext(t *testing.T) {
	s, c := start(t, localstripe.Config{Account: "acct_local_demo"})
	_, _, acct := c.call(http.MethodGet, "/v1/accounts/acct_local_demo", nil)
	assert.Equal(t, "account", acct["object"], "the account that exists from the start")

	status, h, first := c.call(http.MethodPost, "/v1/payment_intents", charge("pm_card_chargeDeclined"), "Idempotency-Key", "k1", "Stripe-Context", "acct_local_demo")
	require.Equal(t, http.StatusPaymentRequired, status)
	assert.Empty(t, h.Get("Idempotent-Replayed"))
	status, h, again := c.call(http.MethodPost, "/v1/payment_intents", charge("pm_card_chargeDeclined"), "Idempotency-Key", "k1", "Stripe-Context", "acct_local_demo")
	assert.Equal(t, http.StatusPaymentRequired, status)
	assert.Equal(t, "true", h.Get("Idempotent-Replayed"))
	assert.Equal(t, first, again)

	_, h, cus := c.call(http.MethodPost, "/v1/customers", form("email", "a@b.c"), "Idempotency-Key", "k2", "Stripe-Account", "acct_local_demo")
	assert.Empty(t, h.Get("Idempotent-Replayed"))
	_, h, cus2 := c.call(http.MethodPost, "/v1/customers", form("email", "a@b.c"), "Idempotency-Key", "k2", "Stripe-Account", "acct_local_demo")
	assert.Equal(t, "true", h.Get("Idempotent-Replayed"))
	assert.Equal(t, cus["id"], cus2["id"])
	status, _, _ = c.call(http.MethodGet, "/v1/customers/"+cus["id"].(string), nil)
	assert.Equal(t, http.StatusNotFound, status, "another account's customer does not exist on the platform")

	var types []string
	for _, d := range s.Deliveries() {
		assert.Equal(t, "acct_local_demo", d.Account)
		types = append(types, d.Type)
	}
	assert.Equal(t, []string{"payment_intent.created", "payment_intent.payment_failed", "customer.created"}, types, "replays make no events")
}

// A legacy purchase's PaymentIntent is confirmed by the client (Stripe.js)
// on the local Stripe.
func TestConfirm(t *testing.T) {
	_, c := start(t, localstripe.Config{})
	create := func() string {
		_, _, pi := c.call(http.MethodPost, "/v1/payment_intents", url.Values{"amount": {"2000"}, "currency": {"usd"}, "metadata[purchase_id]": {"p1"}}, "Stripe-Account", "acct_1")
		require.Equal(t, "requires_payment_method", pi["status"])
		return pi["id"].(string)
	}
	id := create()
	status, _, pi := c.call(http.MethodPost, "/v1/payment_intents/"+id+"/confirm", form("payment_method", "pm_card_visa"), "Stripe-Account", "acct_1")
	require.Equal(t, http.StatusOK, status, "%v", pi)
	assert.Equal(t, "succeeded", pi["status"])
	assert.Equal(t, map[string]any{"purchase_id": "p1"}, pi["metadata"])
	status, _, again := c.call(http.MethodPost, "/v1/payment_intents/"+id+"/confirm", form("payment_method", "pm_card_visa"), "Stripe-Account", "acct_1")
	assert.Equal(t, http.StatusBadRequest, status, "a succeeded PaymentIntent cannot be confirmed again")
	assert.Equal(t, "payment_intent_unexpected_state", again["error"].(map[string]any)["code"])

	id = create()
	status, _, declined := c.call(http.MethodPost, "/v1/payment_intents/"+id+"/confirm", form("payment_method", "pm_card_chargeDeclinedInsufficientFunds"), "Stripe-Account", "acct_1")
	assert.Equal(t, http.StatusPaymentRequired, status)
	assert.Equal(t, "insufficient_funds", declined["error"].(map[string]any)["decline_code"])
	status, _, _ = c.call(http.MethodPost, "/v1/payment_intents/"+id+"/confirm", form("payment_method", "pm_card_visa"))
	assert.Equal(t, http.StatusNotFound, status, "on another account it does not exist")
}

func form(k, v string) url.Values { return url.Values{k: {v}} }

func delivery(s *localstripe.Server, typ string) localstripe.Delivery {
	for _, d := range s.Deliveries() {
		if d.Type == typ {
			return d
		}
	}
	return localstripe.Delivery{}
}

// A billing charge's refund and a declined charge's cancel are events too.
func TestRefundAndCancelEvents(t *testing.T) {
	s, c := start(t, localstripe.Config{})
	_, _, ok := c.call(http.MethodPost, "/v1/payment_intents", charge("pm_card_visa"), "Stripe-Account", "acct_1")
	status, _, refund := c.call(http.MethodPost, "/v1/refunds", form("payment_intent", ok["id"].(string)), "Stripe-Account", "acct_1")
	require.Equal(t, http.StatusOK, status, "%v", refund)
	_, _, declined := c.call(http.MethodPost, "/v1/payment_intents", charge("pm_card_chargeDeclined"), "Stripe-Account", "acct_1")
	id := declined["error"].(map[string]any)["payment_intent"].(map[string]any)["id"].(string)
	status, _, canceled := c.call(http.MethodPost, "/v1/payment_intents/"+id+"/cancel", nil, "Stripe-Account", "acct_1")
	require.Equal(t, http.StatusOK, status, "%v", canceled)
	_, _, page := c.call(http.MethodGet, "/v1/events?limit=100", nil, "Stripe-Account", "acct_1")
	byType := map[string]map[string]any{}
	for _, e := range page["data"].([]any) {
		e := e.(map[string]any)
		byType[e["type"].(string)] = e["data"].(map[string]any)["object"].(map[string]any)
	}
	require.Contains(t, byType, "charge.refunded")
	assert.Equal(t, ok["id"], byType["charge.refunded"]["payment_intent"])
	assert.Equal(t, true, byType["charge.refunded"]["refunded"])
	require.Contains(t, byType, "payment_intent.canceled")
	assert.Equal(t, "canceled", byType["payment_intent.canceled"]["status"])
	assert.Len(t, s.Deliveries(), 6, "created+succeeded, refunded, created+failed, canceled")
}
