package app_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// docs/design.md §4: a receipt records payment_method_type and payment_method_last4
// from the charge Stripe made (payment_method_details): a card charged by
// the collection job, a US bank account debit that settles later by
// webhook. End to end on DynamoDB Local and Postgres, a test clock near
// today (the API lists the receipts of the last 13 months of real time).
// Fails without the change: the receipts carry neither.
func TestReceiptsSayHowTheyWerePaid(t *testing.T) {
	a := startApp(t, nil, nil)
	base := a.Admin.URL() + "/internal/v1"
	a.Fake.Decide = func(p stripetest.PI) stripetest.Behavior {
		if strings.Contains(p.PaymentMethod, "Bank") {
			return stripetest.Process
		}
		return stripetest.Succeed
	}
	day := time.Now().UTC().AddDate(0, 0, -20)
	status, clock := send(t, http.MethodPost, base+"/test_clocks", map[string]any{"frozen_time": day.Format("2006-01-02") + "T12:00:00Z"})
	require.Equal(t, http.StatusCreated, status, clock)
	clockID := clock["id"].(string)
	payDay := day.AddDate(0, 0, 2)
	create := func(account, pm string) string {
		status, sub := send(t, http.MethodPost, base+"/accounts/"+account+"/subscriptions", map[string]any{
			"sku": "gold", "email": "r@example.com", "payment_day": payDay.Day(), "amount": 1200, "currency": "usd",
			"term": "MONTHLY", "customer": "cus_receipts", "payment_method": pm, "stripe_account": "acct_receipts",
			"test_clock": clockID})
		require.Equal(t, http.StatusCreated, status, sub)
		return sub["subscription_id"].(string)
	}
	create("acc-card", "pm_card_visa")
	bankSub := create("acc-bank", "pm_usBankAccount_success")
	status, body := send(t, http.MethodPost, base+"/test_clocks/"+clockID+"/advance",
		map[string]any{"frozen_time": payDay.Format("2006-01-02") + "T12:00:00Z"})
	require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, status, body)
	require.Eventually(t, func() bool {
		_, c := get(t, base+"/test_clocks/"+clockID, token)
		return c["status"] == "ready"
	}, 2*time.Minute, 50*time.Millisecond)

	// The bank debit settles; Stripe's event carries the charge's id only.
	var debit stripetest.PI
	for _, p := range a.Fake.PIs() {
		if p.Metadata[billing.MetaSubscription] == bankSub {
			debit = p
		}
	}
	require.Equal(t, "processing", debit.Status)
	settled, err := a.Fake.Settle(debit.ID, true)
	require.NoError(t, err)
	ctx := context.Background()
	payload := a.Fake.Event(settled, "payment_intent.succeeded", time.Now())
	status, raw := a.Deliver(t, payload)
	require.Equal(t, http.StatusOK, status, string(raw))
	require.Eventually(t, func() bool {
		var pending int
		require.NoError(t, a.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE topic = $1 AND delivered_at IS NULL`,
			billing.FeedTopic).Scan(&pending))
		return pending == 0
	}, 30*time.Second, 20*time.Millisecond)

	for _, tc := range []struct{ account, typ, last4 string }{
		{"acc-card", "card", "4242"},
		{"acc-bank", "us_bank_account", "6789"},
	} {
		status, list := get(t, base+"/accounts/"+tc.account+"/receipts", token)
		require.Equal(t, http.StatusOK, status, list)
		data := list["data"].([]any)
		require.Len(t, data, 1, tc.account)
		r := data[0].(map[string]any)
		assert.Equal(t, tc.typ, r["payment_method_type"], tc.account)
		assert.Equal(t, tc.last4, r["payment_method_last4"], tc.account)
		var typ, last4 string
		require.NoError(t, a.Pool.QueryRow(ctx, `SELECT coalesce(payload->>'payment_method_type',''), coalesce(payload->>'payment_method_last4','')
			FROM outbox WHERE type = $1 AND payload->>'account' = $2`, billing.ActionPaymentCompleted, tc.account).Scan(&typ, &last4))
		assert.Equal(t, tc.typ+" "+tc.last4, typ+" "+last4, "the billing.payment_completed action says it too")
	}
}
