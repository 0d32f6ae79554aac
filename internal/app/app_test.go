package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/app"
	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

const (
	secret = "whsec_fake_test_e2e_secret"
	token  = "test-internal-token"
)

// startApp runs the real program (internal/apptest) with this package's
// webhook secret, behind one rotated out, and token; env overrides the
// environment, opts are app.New's.
func startApp(t testing.TB, logs io.Writer, env map[string]string, opts ...app.Option) *apptest.App {
	t.Helper()
	o := apptest.Options{Logs: logs, App: opts, Env: map[string]string{
		"STRIPE_WEBHOOK_SECRET": "whsec_fake_test_rotated_out," + secret,
		"STRIPE_API_KEY":        "sk_test_fake_e2e",
		"INTERNAL_API_TOKEN":    token,
	}}
	maps.Copy(o.Env, env)
	return apptest.Start(t, o)
}

func post(t *testing.T, url string, body []byte, header string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/webhooks/stripe", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if header != "" {
		req.Header.Set("Stripe-Signature", header)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (int, map[string]any) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if len(raw) > 0 {
		require.NoError(t, json.Unmarshal(raw, &body), string(raw))
	}
	return resp.StatusCode, body
}

func get(t *testing.T, url, bearer string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	return do(t, req)
}

func errorCode(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

func countItems(t *testing.T, a *apptest.App) int32 {
	t.Helper()
	out, err := a.Dynamo.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(a.Config.EventsTable), Select: "COUNT", ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	return out.Count
}

func TestWebhookEndToEnd(t *testing.T) {
	var logs bytes.Buffer
	a := startApp(t, &logs, nil)
	url, admin := a.Server.URL(), a.Admin.URL()

	payload := stripetest.Event{Fixture: "customer.subscription.created"}.Build(t)
	var id string
	{
		var ev struct{ ID string }
		require.NoError(t, json.Unmarshal(payload, &ev))
		id = ev.ID
	}
	status, body := post(t, url, payload, stripetest.Sign(payload, secret, time.Now()))
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "applied", body["outcome"])

	status, body = post(t, url, payload, stripetest.Sign(payload, secret, time.Now()))
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "duplicate", body["outcome"])

	status, rec := get(t, admin+"/internal/v1/events/"+id, token)
	require.Equal(t, http.StatusOK, status, rec)
	for _, k := range []string{"id", "type", "stripe_account", "timestamp", "date", "time", "expiration",
		"subscription", "status", "received_at", "processed_at", "source", "attempts"} {
		assert.Contains(t, rec, k)
	}
	assert.Equal(t, "processed", rec["status"])
	assert.Equal(t, "webhook", rec["source"])
	assert.Equal(t, "sub_1OqDdJ2eZvKYlo2CxYzAbCdE", rec["subscription"])
	assert.Equal(t, "acct_1Nv0FGQ9RKHgCVdK", rec["stripe_account"])

	t.Run("internal API auth", func(t *testing.T) {
		status, body := get(t, admin+"/internal/v1/events/"+id, "")
		assert.Equal(t, http.StatusUnauthorized, status)
		assert.Equal(t, "unauthorized", errorCode(body))
		status, body = get(t, admin+"/internal/v1/events/"+id, "wrong-token")
		assert.Equal(t, http.StatusUnauthorized, status)
		assert.Equal(t, "unauthorized", errorCode(body))
		status, body = get(t, admin+"/internal/v1/events/evt_missing", token)
		assert.Equal(t, http.StatusNotFound, status)
		assert.Equal(t, "not_found", errorCode(body))
	})
	t.Run("health", func(t *testing.T) {
		for _, base := range []string{url, admin} {
			status, _ := get(t, base+"/healthz", "")
			assert.Equal(t, http.StatusOK, status, base)
		}
		status, body := get(t, admin+"/readyz", "")
		assert.Equal(t, http.StatusOK, status)
		assert.Equal(t, map[string]any{"dynamodb": "ok", "postgres": "ok", "ingest": "ok"}, body)
		resp, err := http.Get(admin + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		text, _ := io.ReadAll(resp.Body)
		assert.Contains(t, string(text), `stripe_payments_events_handled_total{outcome="applied"} 1`)
		assert.Contains(t, string(text), `stripe_payments_events_handled_total{outcome="duplicate"} 1`)
	})
	assert.NotContains(t, logs.String(), secret, "a webhook secret leaked into the logs")
	assert.NotContains(t, logs.String(), token, "the API token leaked into the logs")
}

func TestWebhookRefusesBadInputAndRecordsNothing(t *testing.T) {
	a := startApp(t, nil, nil)
	url := a.Server.URL()
	event := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
	now := time.Now()
	huge := append([]byte(`{"id":"evt_huge","object":"event","pad":"`), bytes.Repeat([]byte("x"), 1<<20)...)
	huge = append(huge, []byte(`"}`)...)

	tests := []struct {
		name   string
		body   []byte
		header string
		status int
		code   string
	}{
		{"missing signature", event, "", 400, "missing_signature"},
		{"wrong secret", event, stripetest.Sign(event, "whsec_fake_test_other", now), 400, "invalid_signature"},
		{"malformed header", event, "t=abc,v1=def", 400, "invalid_signature"},
		{"stale timestamp", event, stripetest.Sign(event, secret, now.Add(-10*time.Minute)), 400, "timestamp_out_of_tolerance"},
		{"future timestamp", event, stripetest.Sign(event, secret, now.Add(10*time.Minute)), 400, "timestamp_out_of_tolerance"},
		{"signed body that is not JSON", []byte("not json"), stripetest.Sign([]byte("not json"), secret, now), 400, "invalid_event"},
		{"signed JSON that is not an event", []byte(`{"id":"pi_1","object":"payment_intent"}`),
			stripetest.Sign([]byte(`{"id":"pi_1","object":"payment_intent"}`), secret, now), 400, "invalid_event"},
		{"signed event without data", []byte(`{"id":"evt_1","object":"event","type":"x","created":1}`),
			stripetest.Sign([]byte(`{"id":"evt_1","object":"event","type":"x","created":1}`), secret, now), 400, "invalid_event"},
		{"body over 1 MiB", huge, stripetest.Sign(huge, secret, now), 413, "payload_too_large"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := post(t, url, tc.body, tc.header)
			assert.Equal(t, tc.status, status, body)
			assert.Equal(t, tc.code, errorCode(body))
			assert.NotEmpty(t, body["error"].(map[string]any)["message"])
		})
	}
	t.Run("chunked body over 1 MiB", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodPost, url+"/webhooks/stripe", io.MultiReader(bytes.NewReader(huge)))
		require.NoError(t, err)
		req.ContentLength = -1
		req.Header.Set("Stripe-Signature", stripetest.Sign(huge, secret, now))
		status, body := do(t, req)
		assert.Equal(t, http.StatusRequestEntityTooLarge, status)
		assert.Equal(t, "payload_too_large", errorCode(body))
	})
	t.Run("wrong method", func(t *testing.T) {
		status, body := get(t, url+"/webhooks/stripe", "")
		assert.Equal(t, http.StatusMethodNotAllowed, status)
		assert.Equal(t, "method_not_allowed", errorCode(body))
	})
	assert.Zero(t, countItems(t, a), "a refused request wrote an event")
}

func TestWebhookAnswers5xxWhenADependencyFails(t *testing.T) {
	a := startApp(t, nil, nil)
	url := a.Server.URL()
	payload := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
	// Postgres goes away: the event is recorded but cannot be processed.
	_, err := a.Pool.Exec(context.Background(), `ALTER TABLE processed_events RENAME TO processed_events_gone`)
	require.NoError(t, err)
	status, body := post(t, url, payload, stripetest.Sign(payload, secret, time.Now()))
	assert.Equal(t, http.StatusServiceUnavailable, status, body)
	assert.Equal(t, "unavailable", errorCode(body))
	assert.False(t, strings.Contains(body["error"].(map[string]any)["message"].(string), "processed_events"), "internals leaked")

	_, err = a.Pool.Exec(context.Background(), `ALTER TABLE processed_events_gone RENAME TO processed_events`)
	require.NoError(t, err)
	status, body = post(t, url, payload, stripetest.Sign(payload, secret, time.Now()))
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "applied", body["outcome"])
}
