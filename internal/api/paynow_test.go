package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// docs/design.md §4 pay now: POST …/subscriptions/{id}/pay charges the oldest
// unpaid ERROR period at once, process MANUAL_REPAYMENT, with the job's
// lock, idempotency key, history, receipt and action; 409 when there is
// none or an attempt is in flight.
func TestPayNowThroughHTTP(t *testing.T) {
	t.Parallel()
	c, e := newAPI(t)
	create := validCreate()
	create["payment_day"] = 10
	create["stripe_account"] = "acct_1"
	status, sub := c.do(http.MethodPost, "/accounts/acc-pay/subscriptions", create)
	require.Equal(t, http.StatusCreated, status, sub)
	id := sub["subscription_id"].(string)
	path := "/accounts/acc-pay/subscriptions/" + id + "/pay"

	status, body := c.do(http.MethodPost, path, nil)
	assert.Equal(t, http.StatusConflict, status, "nothing to pay yet: %v", body)
	assert.Equal(t, "conflict", errCode(body))

	// Jan is paid; Feb is declined (and its retry on day 1); on Mar 10 the
	// Feb period's missed retry (read back by the sweep) and Mar are
	// declined too: two ERROR periods.
	e.Stripe.Decide = billingtest.Behaviors(stripetest.Succeed, stripetest.Decline, stripetest.Decline, stripetest.Decline,
		stripetest.Decline, stripetest.Decline)
	e.Collect(t, "2024-01-10")
	e.Collect(t, "2024-02-10")
	e.Collect(t, "2024-02-11")
	e.Collect(t, "2024-03-10")
	require.Len(t, e.Stripe.PIs(), 5)

	// A declined pay now: 200, the period stays ERROR with Stripe's reason.
	status, body = c.do(http.MethodPost, path, nil)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "2024-02-10", body["billing_date"], "the oldest ERROR period")
	assert.Equal(t, "ERROR", body["billing_status"])
	assert.Equal(t, "MANUAL_REPAYMENT", body["process"])
	assert.NotNil(t, body["error"])

	// Paid: COMPLETED with a receipt, a history entry, a new attempt key.
	status, body = c.do(http.MethodPost, path, map[string]any{})
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "2024-02-10", body["billing_date"])
	assert.Equal(t, "COMPLETED", body["billing_status"])
	assert.Equal(t, "MANUAL_REPAYMENT", body["process"])
	assert.Equal(t, float64(5), body["attempts"], "declined on Feb 10, 11 and Mar 10, then pay now twice")
	pis := e.Stripe.PIs()
	require.Len(t, pis, 7)
	last := pis[6]
	assert.Equal(t, "billing:acc-pay:"+id+":2024-02-10:5", last.IdempotencyKey, "the job's key scheme, attempt n+1")
	assert.Equal(t, "acct_1", last.Account)
	assert.Equal(t, last.ID, body["transaction_id"])
	status, list := c.do(http.MethodGet, "/accounts/acc-pay/receipts", nil)
	require.Equal(t, http.StatusOK, status)
	require.Len(t, list["data"].([]any), 2, "Jan's and the pay now's")
	assert.Equal(t, last.ID, list["data"].([]any)[0].(map[string]any)["payment_intent"], "newest first")
	status, hist := c.do(http.MethodGet, "/accounts/acc-pay/subscriptions/"+id+"/history?limit=1000", nil)
	require.Equal(t, http.StatusOK, status)
	found := false
	for _, raw := range hist["data"].([]any) {
		h := raw.(map[string]any)
		if h["billing_date"] == "2024-02-10" && h["billing_status"] == "COMPLETED" && h["process"] == "MANUAL_REPAYMENT" {
			found = true
		}
	}
	assert.True(t, found, "the history has the pay-now entry")
	var completed int
	for _, a := range e.Notifier.Actions() {
		if a.Type == billing.ActionPaymentCompleted {
			completed++
		}
	}
	assert.Equal(t, 2, completed, "Jan's and the pay now's payment_completed action, as a job sends it")

	// The next oldest ERROR period comes next; then nothing is left.
	status, body = c.do(http.MethodPost, path, nil)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "2024-03-10", body["billing_date"])
	assert.Equal(t, "COMPLETED", body["billing_status"])
	status, body = c.do(http.MethodPost, path, nil)
	assert.Equal(t, http.StatusConflict, status, body)

	// The retry days find nothing left to charge.
	e.Collect(t, "2024-03-11")
	e.Collect(t, "2024-03-13")
	assert.Len(t, e.Stripe.PIs(), 8, "no charge after pay now")

	t.Run("bad requests", func(t *testing.T) {
		status, body := c.do(http.MethodPost, "/accounts/acc-pay/subscriptions/nope/pay", nil)
		assert.Equal(t, http.StatusNotFound, status, body)
		status, body = c.do(http.MethodPost, path, map[string]any{"amount": 5})
		assert.Equal(t, http.StatusBadRequest, status, body)
		status, body = c.do(http.MethodPost, path+"?x=1", nil)
		assert.Equal(t, http.StatusBadRequest, status, body)
	})
}

func TestPayNowRefusesWhileAnAttemptIsInFlightOrTheAccountIsLocked(t *testing.T) {
	t.Parallel()
	c, e := newAPI(t)
	create := validCreate()
	create["payment_day"] = 10
	status, sub := c.do(http.MethodPost, "/accounts/acc-busy/subscriptions", create)
	require.Equal(t, http.StatusCreated, status, sub)
	id := sub["subscription_id"].(string)
	path := "/accounts/acc-busy/subscriptions/" + id + "/pay"

	// Jan declined (ERROR), then its retry gets no answer: in flight.
	e.Stripe.Decide = billingtest.Behaviors(stripetest.Decline, stripetest.Fail500, stripetest.Decline)
	e.Collect(t, "2024-01-10")
	rep := e.Collect(t, "2024-01-11")
	require.Equal(t, 1, rep.Unknown)
	n := len(e.Stripe.PIs())

	status, body := c.do(http.MethodPost, path, nil)
	assert.Equal(t, http.StatusConflict, status, body)
	assert.Contains(t, body["error"].(map[string]any)["message"], "in flight")
	assert.Len(t, e.Stripe.PIs(), n, "no charge")

	// Resolved by the next run (nothing at Stripe: a new attempt, declined).
	e.Collect(t, "2024-01-12")
	l, err := e.Lock.Acquire(t.Context(), billing.LockKey("acc-busy"), true)
	require.NoError(t, err)
	status, body = c.do(http.MethodPost, path, nil)
	assert.Equal(t, http.StatusConflict, status, "a job holds the account: %v", body)
	require.NoError(t, l.Release(t.Context()))

	status, body = c.do(http.MethodPost, path, nil)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "2024-01-10", body["billing_date"])
	assert.Equal(t, "COMPLETED", body["billing_status"])
}
