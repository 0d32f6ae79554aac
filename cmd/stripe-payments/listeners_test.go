package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// The real binary keeps the operator's door off the public listener (docs/design.md
// §3 "Two listeners"): serve on two random loopback ports, the
// public one answers only the webhook and /healthz, and 404 to the console,
// the internal API, the purchase API, /metrics and /readyz; the admin one
// serves those and not the webhook.
func TestPublicListenerServesOnlyTheWebhook(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	const token = "listeners-test-internal-token"
	vars := stackVars(t, stripetest.New(t, stripetest.Options{}), map[string]string{
		"STRIPE_WEBHOOK_SECRET": "whsec_fake_listeners", "STRIPE_API_KEY": "sk_test_fake_listeners",
		"INTERNAL_API_TOKEN": token,
	})
	migrateStack(t, bin, vars)
	addr := freeAddr(t)
	srv := newServer(t, bin, with(vars, addr), addr)
	srv.start()
	public, admin := srv.url(), srv.adminURL()
	require.NotEqual(t, public, admin)

	client := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	ask := func(method, url, bearer string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	for _, r := range []struct {
		method, path, bearer string
		admin                int // the admin listener's answer (the public one's is 404)
	}{
		{http.MethodGet, "/ops/", "", http.StatusSeeOther}, // to the login page
		{http.MethodGet, "/ops/login", "", http.StatusOK},
		{http.MethodGet, "/internal/v1/events/x", "", http.StatusUnauthorized},
		{http.MethodGet, "/internal/v1/events/evt_x", token, http.StatusNotFound},
		{http.MethodGet, "/internal/v1/openapi.json", token, http.StatusOK},
		{http.MethodPost, "/v1/purchases", "", http.StatusUnauthorized},
		{http.MethodPost, "/v1/purchases", token, http.StatusBadRequest},
		{http.MethodGet, "/metrics", "", http.StatusOK},
		{http.MethodGet, "/readyz", "", http.StatusOK},
	} {
		status, body := ask(r.method, public+r.path, r.bearer)
		assert.Equal(t, http.StatusNotFound, status, "public %s %s: %s", r.method, r.path, body)
		assert.NotContains(t, body, "stripe_payments_", "public %s", r.path)
		status, body = ask(r.method, admin+r.path, r.bearer)
		assert.Equal(t, r.admin, status, "admin %s %s: %s", r.method, r.path, body)
	}
	status, body := ask(http.MethodGet, admin+"/metrics", "")
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, "stripe_payments_http_requests_total", "the admin listener serves the metrics")

	for _, base := range []string{public, admin} {
		status, _ := ask(http.MethodGet, base+"/healthz", "")
		assert.Equal(t, http.StatusOK, status, base+"/healthz")
	}
	status, body = ask(http.MethodPost, public+"/webhooks/stripe", "")
	assert.Equal(t, http.StatusBadRequest, status, "the public listener serves the webhook (unsigned: refused)")
	assert.Contains(t, body, "missing_signature")
	status, _ = ask(http.MethodPost, admin+"/webhooks/stripe", "")
	assert.Equal(t, http.StatusNotFound, status, "the admin listener does not serve the webhook")

	require.NoError(t, srv.stop(30*time.Second))
	assert.Contains(t, srv.allLogs(), `"admin_addr":"`+strings.TrimPrefix(admin, "http://")+`"`, "serve logs where each listener is")
}
