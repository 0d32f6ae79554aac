package billing_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
)

// TestAPanicForOneAccountSparesTheOthers: a panic while collecting one
// account fails that account only; the job goes on with the others and the
// process survives. The run's report says so: the panicking account is an
// error with its cause, so the run is not OK (a rerun is needed).
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
	rep, _ := e.Service.Collect(ctx, d("2024-01-02"))
	require.NotNil(t, rep)
	assert.Equal(t, 3, rep.Succeeded)
	assert.Equal(t, 1, rep.Errors, "the panicking account is an error of the run")
	assert.False(t, rep.OK(), "a run with a panicking account is not OK")
	require.Len(t, rep.Causes, 1)
	assert.Contains(t, rep.Causes[0], "acc-panics")
	assert.Contains(t, rep.Causes[0], "injected panic for one account")
	for _, s := range good {
		got, err := e.Service.GetSubscription(ctx, s.AccountID, s.SubscriptionID)
		require.NoError(t, err)
		assert.Equal(t, "2024-01-02", got.LastPaymentDate.String(), s.AccountID)
	}
	got, err := e.Service.GetSubscription(ctx, bad.AccountID, bad.SubscriptionID)
	require.NoError(t, err)
	assert.NotEqual(t, "2024-01-02", got.LastPaymentDate.String())
}
