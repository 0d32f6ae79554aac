package billing_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/billingtest"
)

// TestAPanicForOneAccountSparesTheOthers: a panic while collecting one
// account fails that account only; the job goes on with the others and the
// process survives.
func TestAPanicForOneAccountSparesTheOthers(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{Crash: func(step string, p billing.Period) error {
		if step == "claimed" && p.AccountID == "acc-panics" {
			panic("injected panic for one account")
		}
		return nil
	}})
	bad, err := e.Service.CreateSubscription(ctx, "acc-panics", billingtest.Input("gold", 2))
	require.NoError(t, err)
	var good []billing.Subscription
	for _, acc := range []string{"acc-fine-1", "acc-fine-2", "acc-fine-3"} {
		s, err := e.Service.CreateSubscription(ctx, acc, billingtest.Input("gold", 2))
		require.NoError(t, err)
		good = append(good, s)
	}
	e.Clock.SetDate(d("2024-01-02"))
	_, _ = e.Service.Collect(ctx, d("2024-01-02"))
	for _, s := range good {
		got, err := e.Service.GetSubscription(ctx, s.AccountID, s.SubscriptionID)
		require.NoError(t, err)
		assert.Equal(t, "2024-01-02", got.LastPaymentDate.String(), s.AccountID)
	}
	got, err := e.Service.GetSubscription(ctx, bad.AccountID, bad.SubscriptionID)
	require.NoError(t, err)
	assert.NotEqual(t, "2024-01-02", got.LastPaymentDate.String())
}
