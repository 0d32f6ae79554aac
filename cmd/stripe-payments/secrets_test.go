package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

func randomHex(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rand.IntN(256))
	}
	return hex.EncodeToString(b)
}

// TestSecretsNeverLogged runs the real binary (migrate, serve, poll) at
// LOG_LEVEL=debug with known secrets — both webhook secrets of a rotation,
// the Stripe API key, the internal API token, the actions secret, a
// password in DATABASE_URL and in ACTIONS_URL, the AWS secret key — drives
// success and failure paths (valid and forged webhooks, refused tokens,
// purchases that Stripe declines or fails, an actions receiver that fails,
// Postgres cut away, a poll, shutdown), captures every byte the program
// writes, and fails on any occurrence of any secret. The client_secret a
// legacy purchase answers with is a secret of the buyer's: it must not be
// logged either.
func TestSecretsNeverLogged(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	secrets := map[string]string{
		"old webhook secret":    "whsec_fake_old" + randomHex(16),
		"webhook secret":        "whsec_fake_new" + randomHex(16),
		"Stripe API key":        "sk_test_" + randomHex(16),
		"internal API token":    "tok" + randomHex(16),
		"actions secret":        "act" + randomHex(16),
		"database password":     "dbpw" + randomHex(12),
		"actions URL password":  "hookpw" + randomHex(12),
		"AWS secret access key": "aws" + randomHex(16),
	}
	fake := stripetest.New(t, stripetest.Options{Key: secrets["Stripe API key"]})

	// The actions receiver: its first answer is a dropped connection, the
	// second a 500, then 200s to a signed action.
	receiver := testenv.NewActionReceiver(t, secrets["actions secret"])
	receiver.Answer(func(d testenv.Delivery) int {
		switch d.N {
		case 1:
			return testenv.Drop
		case 2:
			return http.StatusInternalServerError
		}
		if d.Signature != nil || !d.Valid {
			return http.StatusBadRequest
		}
		return http.StatusOK
	})
	actionsURL, err := url.Parse(receiver.URL + "/actions")
	require.NoError(t, err)
	actionsURL.User = url.UserPassword("hooks", secrets["actions URL password"])

	// Postgres behind a proxy that can be cut, with a password in the URL
	// (the local server trusts loopback, so it is sent but not needed).
	dbURL, err := url.Parse(testenv.DatabaseURL(t))
	require.NoError(t, err)
	pg := testenv.NewFaultProxy(t, dbURL.Host)
	dbURL.Host = pg.Addr()
	dbURL.User = url.UserPassword(dbURL.User.Username(), secrets["database password"])
	addr := freeAddr(t)
	env := with(stackVars(t, fake, map[string]string{
		"STRIPE_WEBHOOK_SECRET":   secrets["old webhook secret"] + "," + secrets["webhook secret"],
		"STRIPE_PLATFORM_ACCOUNT": "acct_1SecretsPlatform",
		"DATABASE_URL":            dbURL.String(),
		"AWS_ACCESS_KEY_ID":       "local",
		"AWS_SECRET_ACCESS_KEY":   secrets["AWS secret access key"],
		"INTERNAL_API_TOKEN":      secrets["internal API token"],
		"ACTIONS_URL":             actionsURL.String(),
		"ACTIONS_SECRET":          secrets["actions secret"],
		"LOG_LEVEL":               "debug",
		"POLL_EVERY":              "",
	}), addr)
	var output strings.Builder // everything the program wrote, every run
	_, stderr, err := runCommand(t, bin, env, time.Minute, "migrate")
	output.WriteString(stderr)
	require.NoError(t, err, stderr)
	srv := newServer(t, bin, env, addr)
	srv.start()
	base := srv.url()
	client := &http.Client{Timeout: 30 * time.Second}
	call := func(method, path, bearer string, body []byte, header map[string]string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, srv.urlFor(path)+path, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
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
	token := secrets["internal API token"]
	webhook := func(payload []byte, secret string, at time.Time) int {
		status, _ := call(http.MethodPost, "/webhooks/stripe", "", payload, map[string]string{"Stripe-Signature": stripetest.Sign(payload, secret, at)})
		return status
	}
	merchant := uuid.NewString()
	purchase := func(amount int, key string) (int, map[string]any) {
		body, _ := json.Marshal(map[string]any{"account": merchant, "stripe_account": "acct_1SecretsMerchant", "mode": "legacy", "amount": amount, "currency": "usd"})
		return call(http.MethodPost, "/v1/purchases", token, body, map[string]string{"Idempotency-Key": key})
	}

	// Success paths: a purchase, its payment, the action (delivered on the
	// third attempt), reads.
	status, p := purchase(2000, "secrets-1")
	require.Equal(t, http.StatusCreated, status, p)
	clientSecret, _ := p["client_secret"].(string)
	require.NotEmpty(t, clientSecret)
	secrets["purchase client_secret"] = clientSecret
	status, _ = purchase(2000, "secrets-1") // retried: reads the client secret back from Stripe
	require.Equal(t, http.StatusCreated, status)
	succeeded := stripetest.Event{Fixture: "payment_intent.succeeded", Account: stripetest.Ptr("acct_1SecretsMerchant"),
		Object: map[string]any{"id": p["payment_intent"], "metadata": map[string]any{"purchase_id": p["id"], "account": merchant}}}.Build(t)
	require.Equal(t, http.StatusOK, webhook(succeeded, secrets["webhook secret"], time.Now()))
	rotated := stripetest.Event{Fixture: "customer.created"}.Build(t)
	require.Equal(t, http.StatusOK, webhook(rotated, secrets["old webhook secret"], time.Now()), "the old secret still verifies during a rotation")
	var evID struct{ ID string }
	require.NoError(t, json.Unmarshal(succeeded, &evID))
	status, _ = call(http.MethodGet, "/internal/v1/events/"+evID.ID, token, nil, nil)
	require.Equal(t, http.StatusOK, status)
	status, _ = call(http.MethodPost, "/internal/v1/events/"+evID.ID+"/replay", token, nil, nil)
	require.Equal(t, http.StatusOK, status)
	status, _ = call(http.MethodGet, "/internal/v1/purchases/"+p["id"].(string), token, nil, nil)
	require.Equal(t, http.StatusOK, status)

	// Failure paths.
	assert.Equal(t, http.StatusBadRequest, webhook(succeeded, "whsec_fake_forged"+randomHex(8), time.Now()), "forged signature")
	assert.Equal(t, http.StatusBadRequest, webhook(succeeded, secrets["webhook secret"], time.Now().Add(-time.Hour)), "stale signature")
	notAnEvent := []byte(`{"id":"x","object":"charge"}`)
	assert.Equal(t, http.StatusBadRequest, webhook(notAnEvent, secrets["webhook secret"], time.Now()))
	status, _ = call(http.MethodGet, "/internal/v1/events/"+evID.ID, token+"x", nil, nil)
	assert.Equal(t, http.StatusUnauthorized, status, "a wrong token (that contains the real one)")
	status, _ = call(http.MethodGet, "/internal/v1/events/"+evID.ID, "", nil, map[string]string{"Authorization": "Basic " + token})
	assert.Equal(t, http.StatusUnauthorized, status)
	status, _ = call(http.MethodPost, "/internal/v1/events/evt_unknownToStripe/replay", token, nil, nil)
	assert.Equal(t, http.StatusNotFound, status, "replay of an event Stripe does not know")
	// A decline whose error carries the PaymentIntent, as Stripe's do: its
	// client_secret and the buyer's email must not reach the logs through
	// the error chain.
	declinedSecret := "pi_3Declined" + randomHex(6) + "_secret_" + randomHex(12)
	secrets["client_secret in a Stripe error"] = declinedSecret
	declined, _ := json.Marshal(map[string]any{"error": map[string]any{"type": "card_error", "code": "card_declined",
		"message": "Your card was declined.", "payment_intent": map[string]any{"id": "pi_3Declined", "object": "payment_intent",
			"client_secret": declinedSecret, "status": "requires_payment_method"}}})
	fake.Answer(http.MethodPost, "/v1/payment_intents", http.StatusPaymentRequired, declined, 1)
	status, _ = purchase(3000, "secrets-declined")
	assert.Equal(t, http.StatusPaymentRequired, status)
	fake.Fail(http.MethodPost, "/v1/payment_intents", http.StatusInternalServerError, "api_error", "", "Stripe is down", -1)
	status, _ = purchase(4000, "secrets-stripe-down")
	assert.Equal(t, http.StatusBadGateway, status)
	fake.Fail(http.MethodPost, "/v1/payment_intents", http.StatusUnauthorized, "invalid_request_error", "",
		"Invalid API Key provided: "+secrets["Stripe API key"][:12]+"****", -1)
	status, _ = purchase(5000, "secrets-bad-key")
	assert.Equal(t, http.StatusBadGateway, status, "Stripe refused our key")

	// A dependency failure: Postgres cut away under a webhook and a purchase.
	pg.Cut()
	failing := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
	assert.Equal(t, http.StatusServiceUnavailable, webhook(failing, secrets["webhook secret"], time.Now()))
	status, _ = purchase(6000, "secrets-pg-down")
	assert.Equal(t, http.StatusServiceUnavailable, status)
	status, _ = call(http.MethodGet, "/readyz", "", nil, nil)
	assert.Equal(t, http.StatusServiceUnavailable, status)
	pg.Restore()
	require.Equal(t, http.StatusOK, webhook(failing, secrets["webhook secret"], time.Now()), "after recovery")

	// The action reaches the receiver after a dropped connection and a 500.
	// An attempt whose result was being written while Postgres was cut is
	// taken up again only when its claim's lease (OUTBOX_LEASE, 30 s) ends,
	// so the wait covers a lease and the retries after it (a 20 s wait
	// failed once on a busy CI box with 1 attempt seen).
	deadline := time.Now().Add(75 * time.Second)
	for len(receiver.Accepted()) == 0 {
		require.True(t, time.Now().Before(deadline), "the action was not retried to success (%d attempts)", len(receiver.Deliveries()))
		time.Sleep(100 * time.Millisecond)
	}

	// A poll, replaying an event the webhook never delivered.
	gap := stripetest.Event{Fixture: "customer.created", Account: stripetest.Ptr(""), Created: time.Now().Add(-time.Hour)}.Build(t)
	fake.Add("", gap)
	stdout, stderr, err := runCommand(t, bin, env, time.Minute, "poll", "--once", "--target", base+"/webhooks/stripe")
	output.WriteString(stdout)
	output.WriteString(stderr)
	require.NoError(t, err, stderr)
	assert.Contains(t, stdout, "replayed 1,")

	require.NoError(t, srv.stop(30*time.Second))
	output.WriteString(srv.allLogs())

	logs := output.String()
	for name, secret := range secrets {
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, secret) {
				t.Errorf("the %s appears in the logs:\n%s", name, line)
			}
		}
	}
	// The logs did cover the paths above (so the absence means something).
	for _, want := range []string{`"stripe_api_key":"sk_test_****"`, `:****@`, "event processed", "no valid signature",
		"outbox delivery failed; will retry", "action delivered", "request failed", "purchase failed at Stripe", `"level":"DEBUG"`} {
		assert.Contains(t, logs, want, "the logs never show %q: a path was not exercised", want)
	}
	if !t.Failed() {
		t.Logf("%d secrets, %d bytes of logs, %d lines: none found", len(secrets), len(logs), strings.Count(logs, "\n"))
	}
}
