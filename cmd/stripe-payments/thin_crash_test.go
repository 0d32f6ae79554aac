package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

const (
	thinSecret   = "whsec_fake_thin_crash_secret"
	thinToken    = "thin-crash-internal-token"
	thinMerchant = "acct_1ThinCrashMerchant0"
)

// TestThinNotificationSurvivesSIGKILL: `serve` records a thin notification
// and answers 200; Stripe's Events API v2 fails, so hydration has not
// happened when the process is killed with SIGKILL. After a restart (Stripe
// back) the notification is hydrated and its purchase fulfilled: nothing a
// 200 acknowledged is lost, since Stripe does not send it again.
func TestThinNotificationSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	fake := stripetest.New(t, stripetest.Options{})
	vars := stackVars(t, fake, map[string]string{
		"STRIPE_WEBHOOK_SECRET": thinSecret,
		"STRIPE_API_KEY":        "sk_test_fake_thin_crash",
		"INTERNAL_API_TOKEN":    thinToken,
		"POLL_EVERY":            "",
	})
	migrateStack(t, bin, vars)
	addr := freeAddr(t)
	srv := newServer(t, bin, with(vars, addr), addr)
	srv.start()
	client := &http.Client{Timeout: 30 * time.Second}
	call := func(method, path string, body []byte, header map[string]string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, srv.urlFor(path)+path, bytes.NewReader(body))
		require.NoError(t, err)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out map[string]any
		_ = json.Unmarshal(raw, &out)
		return resp.StatusCode, out
	}
	bearer := map[string]string{"Authorization": "Bearer " + thinToken, "Content-Type": "application/json"}

	account := uuid.NewString()
	body, _ := json.Marshal(map[string]any{"account": account, "stripe_account": thinMerchant, "mode": "legacy", "amount": 1500, "currency": "usd"})
	status, p := call(http.MethodPost, "/v1/purchases", body, bearer)
	require.Equal(t, http.StatusCreated, status, p)
	purchaseID, pi := p["id"].(string), p["payment_intent"].(string)

	snapID, thinID := stripetest.NewID(), stripetest.NewThinID()
	fake.Add(thinMerchant, stripetest.Event{Fixture: "payment_intent.succeeded", ID: snapID, Account: stripetest.Ptr(thinMerchant),
		Object: map[string]any{"id": pi, "metadata": map[string]any{"purchase_id": purchaseID, "account": account}}}.Build(t))
	thin := stripetest.Thin{Fixture: "v1.payment_intent.succeeded", ID: thinID, Context: stripetest.Ptr(thinMerchant), RelatedID: pi}.Build(t)
	fake.AddV2(thin, snapID)
	fake.Fail(http.MethodGet, "/v2/core/events/*", http.StatusInternalServerError, "api_error", "", "Stripe is down", -1)

	status, ans := call(http.MethodPost, "/webhooks/stripe", thin, map[string]string{"Stripe-Signature": stripetest.Sign(thin, thinSecret, time.Now())})
	require.Equal(t, http.StatusOK, status, ans)
	assert.Equal(t, "received", ans["outcome"])
	tried := func() bool {
		for _, r := range fake.Requests() {
			if r.Path == "/v2/core/events/"+thinID {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(20 * time.Second)
	for !tried() {
		require.True(t, time.Now().Before(deadline), "hydration never tried")
		time.Sleep(20 * time.Millisecond)
	}
	srv.kill()

	fake.Recover()
	srv.start()
	deadline = time.Now().Add(60 * time.Second)
	var rec map[string]any
	for {
		status, rec = call(http.MethodGet, "/internal/v1/events/"+thinID, nil, bearer)
		if status == http.StatusOK && rec["status"] == "processed" {
			break
		}
		require.True(t, time.Now().Before(deadline), "not hydrated after the restart: %d %v\n%s", status, rec, srv.allLogs())
		time.Sleep(100 * time.Millisecond)
	}
	assert.Equal(t, snapID, rec["snapshot_event"])
	assert.Equal(t, "thin", rec["payload_kind"])
	status, got := call(http.MethodGet, "/v1/purchases/"+purchaseID, nil, bearer)
	require.Equal(t, http.StatusOK, status, got)
	assert.Equal(t, "fulfilled", got["status"])
	require.NoError(t, srv.stop(30*time.Second))
}
