package app_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/app"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	billingstore "github.com/stripe-payments/stripe-payments/internal/billing/store"
	"github.com/stripe-payments/stripe-payments/poller"
)

// The poller lists events for every Stripe account the billing table
// charges on, even one that no event, ledger row or purchase ever named: a
// billing account whose webhooks were all missed still has its settlements
// and refunds replayed.
func TestPollerListsTheAccountsBillingChargesOn(t *testing.T) {
	a := startApp(t, nil, nil)

	in := billing.CreateInput{SKU: "gold", Email: "payer@example.com", PaymentDay: 10, Amount: 1999, Currency: "usd",
		Term: dates.Monthly, Customer: "cus_1", PaymentMethod: "pm_1", StripeAccount: "acct_billing_only"}
	_, err := a.Billing.CreateSubscription(t.Context(), "merchant-1", in)
	require.NoError(t, err)
	in.StripeAccount = "" // on the platform: polled as the platform, no registry entry
	_, err = a.Billing.CreateSubscription(t.Context(), "merchant-2", in)
	require.NoError(t, err)

	accounts, err := billingstore.ChargedAccounts{Store: a.BillingStore}.Accounts(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []string{"acct_billing_only"}, accounts)

	p, err := a.NewPoller(app.PollerOptions{InProcess: true})
	require.NoError(t, err)
	_, err = p.Run(t.Context(), poller.Window{})
	require.NoError(t, err)
	listed := map[string]bool{} // the Stripe-Account of every listing ("" the platform)
	for _, r := range a.Fake.Requests() {
		if r.Path == "/v1/events" {
			listed[r.StripeAccount] = true
		}
	}
	assert.True(t, listed["acct_billing_only"], "the billing account is polled: %v", listed)
	assert.True(t, listed[""], "the platform is polled (no Stripe-Account header): %v", listed)
}
