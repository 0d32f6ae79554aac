package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/actions"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

func send(t *testing.T, method, url string, body any) (int, map[string]any) {
	t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(method, url, bytes.NewReader(raw))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	return do(t, req)
}

// The billing core through the real program: the API creates a
// subscription, Stripe's webhooks about its charge reach the billing feed
// through the one handler (exactly once, however often delivered), and the
// API shows the receipt and the history.
func TestBillingEndToEnd(t *testing.T) {
	a := startApp(t, nil, nil)
	url := a.Server.URL()
	ctx := context.Background()

	status, sub := send(t, http.MethodPost, a.Admin.URL()+"/internal/v1/accounts/acct_e2e/subscriptions", map[string]any{
		"sku": "gold", "email": "e2e@example.com", "payment_day": 28, "amount": 1500, "currency": "usd",
		"term": "MONTHLY", "customer": "cus_e2e", "payment_method": "pm_e2e", "stripe_account": "acct_e2e"})
	require.Equal(t, http.StatusCreated, status, sub)
	subID := sub["subscription_id"].(string)
	date := sub["next_payment_date"].(string)

	// A collection charged pi_e2e and crashed before recording it: the
	// period has its attempt in flight, and the webhook settles it (the
	// feed trusts a PaymentIntent the service did not record only then).
	p, err := a.Billing.Store().GetPeriod(ctx, "acct_e2e", subID, dates.MustParse(date))
	require.NoError(t, err)
	p.InFlightKey, p.InFlightAt = billing.IdempotencyKey(p, 1), time.Now()
	claim := billing.NewTx("claim", time.Now())
	claim.PutPeriod(&p, true)
	require.NoError(t, a.Billing.Store().Commit(ctx, claim))

	fake := stripetest.New(t, stripetest.Options{})
	pi := stripetest.PI{ID: "pi_e2e", Account: "acct_e2e", Amount: 1500, Currency: "usd", Status: "succeeded",
		Metadata: map[string]string{billing.MetaAccount: "acct_e2e", billing.MetaSubscription: subID, billing.MetaDate: date,
			billing.MetaAttempt: "1"}}
	// The feed's messages, and how many of them the feed worker (running
	// as in serve) has applied.
	feed := func() (messages, delivered int) {
		t.Helper()
		require.NoError(t, a.Pool.QueryRow(ctx, `SELECT count(*), count(delivered_at) FROM outbox WHERE topic = $1`,
			billing.FeedTopic).Scan(&messages, &delivered))
		return messages, delivered
	}
	deliver := func(payload []byte) {
		t.Helper()
		before, _ := feed()
		for range 2 { // Stripe delivers twice
			status, body := post(t, url, payload, stripetest.Sign(payload, secret, time.Now()))
			require.Equal(t, http.StatusOK, status, body)
		}
		after, _ := feed()
		assert.Equal(t, 1, after-before, "one feed message per event")
		require.Eventually(t, func() bool { n, done := feed(); return done == n }, 30*time.Second, 20*time.Millisecond,
			"the billing feed applies the message")
	}
	deliver(fake.Event(pi, "payment_intent.succeeded", time.Now()))
	pi.Refunded = true
	deliver(fake.Event(pi, "charge.refunded", time.Now()))

	status, list := get(t, a.Admin.URL()+"/internal/v1/accounts/acct_e2e/receipts", token)
	require.Equal(t, http.StatusOK, status, list)
	require.Len(t, list["data"], 1)
	assert.Equal(t, "pi_e2e", list["data"].([]any)[0].(map[string]any)["payment_intent"])

	status, list = get(t, a.Admin.URL()+"/internal/v1/accounts/acct_e2e/subscriptions/"+subID+"/history", token)
	require.Equal(t, http.StatusOK, status, list)
	var got []string
	for _, e := range list["data"].([]any) {
		if e.(map[string]any)["billing_date"] == date {
			got = append(got, e.(map[string]any)["billing_status"].(string))
		}
	}
	assert.Equal(t, []string{"SCHEDULED", "COMPLETED", "REFUNDED"}, got)

	status, list = get(t, a.Admin.URL()+"/internal/v1/accounts/acct_e2e/subscriptions", token)
	require.Equal(t, http.StatusOK, status, list)
	s := list["data"].([]any)[0].(map[string]any)
	assert.Equal(t, date, s["last_payment_date"])
	assert.NotEqual(t, date, s["next_payment_date"], "the subscription moved on")

	// Delivered or not: the actions dispatcher runs in the background.
	var n int
	require.NoError(t, a.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE topic = $1 AND type = $2`,
		actions.Topic, billing.ActionPaymentCompleted).Scan(&n))
	assert.Equal(t, 1, n, "one billing.payment_completed action")
}
