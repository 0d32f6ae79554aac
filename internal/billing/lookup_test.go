package billing_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
)

// TestFindSubscriptions: an operator finds a subscription by its
// id, its Stripe customer or its email (whatever the case) without knowing
// its account; an erased email finds nothing any more; and the periods of
// an account with an attempt in flight are listed, the others are not.
func TestFindSubscriptions(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	mk := func(account, sku, customer, email string) billing.Subscription {
		t.Helper()
		in := billingtest.Input(sku, 2)
		in.Customer, in.Email = customer, email
		sub, err := e.Service.CreateSubscription(ctx, account, in)
		require.NoError(t, err)
		return sub
	}
	a := mk("acc-find-1", "gold", "cus_find_shared", "Payer.One@Example.com")
	b := mk("acc-find-2", "gold", "cus_find_shared", "payer.two@example.com")
	c := mk("acc-find-2", "silver", "cus_find_other", "payer.two@example.com")
	ids := func(subs []billing.Subscription) []string {
		var out []string
		for _, s := range subs {
			out = append(out, s.AccountID+"/"+s.SubscriptionID)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		by    billing.LookupBy
		value string
		want  []billing.Subscription
	}{
		{"by id", billing.BySubscription, b.SubscriptionID, []billing.Subscription{b}},
		{"by customer, across accounts", billing.ByCustomer, "cus_find_shared", []billing.Subscription{a, b}},
		{"by email, whatever the case", billing.ByEmail, "PAYER.ONE@example.COM", []billing.Subscription{a}},
		{"by email, two subscriptions", billing.ByEmail, "payer.two@example.com", []billing.Subscription{b, c}},
		{"an unknown id", billing.BySubscription, "no-such-sub", nil},
		{"an unknown email", billing.ByEmail, "nobody@example.com", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := e.Service.FindSubscriptions(ctx, tc.by, tc.value, 50)
			require.NoError(t, err)
			assert.ElementsMatch(t, ids(tc.want), ids(got))
		})
	}
	_, err := e.Service.FindSubscriptions(ctx, billing.LookupBy("sku"), "gold", 50)
	assert.ErrorIs(t, err, apperr.ErrInvalid, "an unknown lookup is refused")

	_, err = e.Service.ErasePersonalData(ctx, a.AccountID, a.SubscriptionID)
	require.NoError(t, err)
	got, err := e.Service.FindSubscriptions(ctx, billing.ByEmail, "payer.one@example.com", 50)
	require.NoError(t, err)
	assert.Empty(t, got, "an erased email finds nothing")
	for _, hit := range scanFor(t, e, e.Billing, "LKP#EML#") {
		assert.NotContains(t, hit, a.SubscriptionID, "the erased email's lookup item is deleted")
	}
	assert.Len(t, scanFor(t, e, e.Billing, "LKP#EML#"), 2, "the other subscribers' remain")
	got, err = e.Service.FindSubscriptions(ctx, billing.ByCustomer, "cus_find_shared", 50)
	require.NoError(t, err)
	assert.Len(t, got, 2, "the erasure keeps the other lookups")

	none, err := e.Service.PeriodsToWatch(ctx, "acc-find-2")
	require.NoError(t, err)
	assert.Empty(t, none.InFlight, "no attempt made yet")
	assert.Empty(t, none.Unpaid, "no attempt made yet")
}
