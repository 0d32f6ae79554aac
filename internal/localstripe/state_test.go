package localstripe_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/dispatch"
	"github.com/stripe-payments/stripe-payments/internal/localstripe"
)

// open is start with a state file: the local Stripe of one run of
// `make run`; stop ends the run as SIGTERM does (listener, then Close).
func open(t *testing.T, cfg localstripe.Config) (s *localstripe.Server, c client, stop func()) {
	t.Helper()
	cfg.WebhookSecret = secret
	s, err := localstripe.Open(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(s.LocalHandler(cfg.Actions))
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			srv.Close()
			s.Close()
		}
	}
	t.Cleanup(stop)
	return s, client{t: t, base: srv.URL}, stop
}

// A restart finds the local Stripe as it was: its objects, charges,
// idempotency keys, events (v1 and v2), the actions received; what was
// under way goes on: a delivery the service had not taken is sent again,
// a bank debit settles when due; a legacy PaymentIntent made before can be
// confirmed after; new ids do not collide with old ones.
func TestStateSurvivesARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stripe-local", "state.json")
	down, downURL := newReceiver(t, func(string, int) int { return http.StatusServiceUnavailable })
	actions := localstripe.NewActions("actions-secret")
	cfg := localstripe.Config{StatePath: path, WebhookURL: downURL, Account: "acct_local_demo", ACHDelay: 700 * time.Millisecond,
		RetryBase: time.Hour, MaxAttempts: 5, ThinTypes: []string{"v1.payment_intent.succeeded"}, Actions: actions}
	s1, c, stop := open(t, cfg)
	demo := []string{"Stripe-Account", "acct_local_demo"}
	_, _, cus := c.call(http.MethodPost, "/v1/customers", form("email", "a@b.c"), append(demo, "Idempotency-Key", "k-cus")...)
	_, _, legacy := c.call(http.MethodPost, "/v1/payment_intents", url.Values{"amount": {"2000"}, "currency": {"usd"},
		"metadata[purchase_id]": {"p1"}}, demo...)
	_, _, card := c.call(http.MethodPost, "/v1/payment_intents", charge("pm_card_visa"), demo...)
	_, _, ach := c.call(http.MethodPost, "/v1/payment_intents", charge("pm_usBankAccount"), demo...)
	require.Equal(t, "processing", ach["status"])
	body := []byte(`{"type":"purchase.fulfilled","purchase_id":"p0"}`)
	req, _ := http.NewRequest(http.MethodPost, c.base+"/_local/actions", bytes.NewReader(body))
	req.Header.Set("X-Signature", dispatch.Sign("actions-secret", body, time.Now()))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Eventually(t, func() bool { _, at, _ := down.seen(); return len(at) == len(s1.Deliveries())-1 }, 5*time.Second, 10*time.Millisecond,
		"every delivery but the thin-only snapshot was tried once")
	_, _, events := c.call(http.MethodGet, "/v1/events?limit=100", nil, demo...)
	_, _, thin := c.call(http.MethodGet, "/v2/core/events", nil, "Stripe-Context", "acct_local_demo")
	before := s1.Deliveries()
	stop() // before the bank debit is due

	up, upURL := newReceiver(t, nil)
	cfg.WebhookURL, cfg.RetryBase, cfg.Actions = upURL, 20*time.Millisecond, localstripe.NewActions("actions-secret")
	s2, c, _ := open(t, cfg)
	status, _, got := c.call(http.MethodGet, "/v1/customers/"+cus["id"].(string), nil, demo...)
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, cus, got, "the customer")
	_, h, again := c.call(http.MethodPost, "/v1/customers", form("email", "a@b.c"), append(demo, "Idempotency-Key", "k-cus")...)
	assert.Equal(t, "true", h.Get("Idempotent-Replayed"), "the idempotency key")
	assert.Equal(t, cus["id"], again["id"])
	_, _, gotCard := c.call(http.MethodGet, "/v1/payment_intents/"+card["id"].(string), nil, demo...)
	assert.Equal(t, "succeeded", gotCard["status"], "the charge")
	_, _, list := c.call(http.MethodGet, "/v1/events?limit=100", nil, demo...)
	assert.Subset(t, ids(list), ids(events), "the Events API")
	_, _, thinAfter := c.call(http.MethodGet, "/v2/core/events", nil, "Stripe-Context", "acct_local_demo")
	assert.Equal(t, thin, thinAfter, "the Events API v2")
	_, _, acts := c.call(http.MethodGet, "/_local/actions", nil)
	assert.Len(t, acts["data"], 1, "the actions received")

	status, _, confirmed := c.call(http.MethodPost, "/v1/payment_intents/"+legacy["id"].(string)+"/confirm", form("payment_method", "pm_card_visa"), demo...)
	assert.Equal(t, http.StatusOK, status, "a PaymentIntent made before the restart is confirmed after it")
	assert.Equal(t, "succeeded", confirmed["status"])
	_, _, next := c.call(http.MethodPost, "/v1/payment_intents", charge("pm_card_visa"), demo...)
	assert.NotContains(t, []any{card["id"], ach["id"]}, next["id"], "new ids do not reuse old ones")

	require.Eventually(t, func() bool {
		_, _, pi := c.call(http.MethodGet, "/v1/payment_intents/"+ach["id"].(string), nil, demo...)
		return pi["status"] == "succeeded"
	}, 5*time.Second, 20*time.Millisecond, "the bank debit settles when due, after the restart")

	// Every delivery pending at the stop arrives once at the service now.
	require.Eventually(t, func() bool {
		for _, d := range before {
			if d.Status == "pending" && delivery(s2, d.Type).Status != "delivered" {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond)
	_, attempts, bad := up.seen()
	assert.Empty(t, bad)
	for _, d := range before {
		if d.Status == "pending" {
			assert.Equal(t, 1, attempts[d.EventID], "%s %s delivered once after the restart", d.EventID, d.Type)
		}
	}
}

// A state file that cannot be read is refused, naming the way out, rather
// than starting an empty Stripe beside stores that remember it.
func TestUnreadableStateIsRefused(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"garbage": "{not json", "other version": `{"version":99}`} {
		path := filepath.Join(dir, name+".json")
		require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
		_, err := localstripe.Open(localstripe.Config{StatePath: path})
		assert.ErrorContains(t, err, "make reset", name)
	}
}

func ids(page map[string]any) []string {
	var out []string
	for _, e := range page["data"].([]any) {
		out = append(out, e.(map[string]any)["id"].(string))
	}
	return out
}

// Which deliveries succeeded survives a restart: the Events API's
// delivery_success filter lists the same events after it.
func TestDeliverySuccessSurvivesARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stripe-local", "state.json")
	_, upURL := newReceiver(t, nil)
	cfg := localstripe.Config{StatePath: path, WebhookURL: upURL, Account: "acct_local_demo", RetryBase: time.Hour, MaxAttempts: 5}
	s1, c, stop := open(t, cfg)
	demo := []string{"Stripe-Account", "acct_local_demo"}
	c.call(http.MethodPost, "/v1/customers", form("email", "a@b.c"), demo...)
	require.Eventually(t, func() bool { return delivery(s1, "customer.created").Status == "delivered" }, 5*time.Second, 10*time.Millisecond)
	_, _, ok := c.call(http.MethodGet, "/v1/events?delivery_success=true", nil, demo...)
	require.Len(t, ok["data"], 1)
	stop()

	_, downURL := newReceiver(t, func(string, int) int { return http.StatusServiceUnavailable })
	cfg.WebhookURL = downURL
	_, c, _ = open(t, cfg)
	_, _, failed := c.call(http.MethodGet, "/v1/events?delivery_success=false", nil, demo...)
	assert.Empty(t, failed["data"], "delivered before the restart")
	_, _, ok2 := c.call(http.MethodGet, "/v1/events?delivery_success=true", nil, demo...)
	assert.Equal(t, ids(ok), ids(ok2))
}
