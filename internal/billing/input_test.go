package billing_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
)

// stored is what the table holds for a subscription id of an account: its
// subscriptions (every SKU) and period records.
func stored(t *testing.T, e *billingtest.Env, account, subID string) (subs []billing.Subscription, periods []billing.Period) {
	t.Helper()
	page, err := e.Service.ListSubscriptions(ctx, account, 1000, "")
	require.NoError(t, err)
	for _, s := range page.Items {
		if s.SubscriptionID == subID {
			subs = append(subs, s)
		}
	}
	periods, err = e.Store.ListPeriods(ctx, account, subID)
	require.NoError(t, err)
	return subs, periods
}

// docs/design.md "Choices made where the contract is silent": start_date is at most
// 24 months after today (the test clock's date on a test clock); docs/design.md §8
// "Periods": Friday billing is the billing_week-th Friday of each month, so
// YEARLY with billing_week is refused. Bad input: a clear 400 (ErrInvalid)
// and nothing written.
func TestCreateRefusesBadInputAndChangesNothing(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{Start: time.Date(2024, 3, 10, 9, 0, 0, 0, time.UTC)})
	clock, err := e.Clocks.CreateClock(ctx, time.Date(2030, 6, 15, 12, 0, 0, 0, time.UTC), "far")
	require.NoError(t, err)
	tests := []struct {
		name      string
		edit      func(in *billing.CreateInput)
		wantFirst string // "" = refused
	}{
		{"start_date 9999-12-31", func(in *billing.CreateInput) { in.StartDate = d("9999-12-31") }, ""},
		{"start_date one day past 24 months", func(in *billing.CreateInput) { in.StartDate = d("2026-03-11") }, ""},
		{"start_date exactly 24 months ahead", func(in *billing.CreateInput) { in.StartDate = d("2026-03-10") }, "2026-03-15"},
		{"start_date in the past: the first day after today", func(in *billing.CreateInput) { in.StartDate = d("2020-01-01") }, "2024-03-15"},
		{"on a test clock: 24 months after the clock's date", func(in *billing.CreateInput) {
			in.TestClock, in.StartDate = clock.ID, d("2032-06-15")
		}, "2032-06-15"},
		{"on a test clock: one day more", func(in *billing.CreateInput) { in.TestClock, in.StartDate = clock.ID, d("2032-06-16") }, ""},
		{"no test clock: the clock's bound does not apply", func(in *billing.CreateInput) { in.StartDate = d("2032-06-15") }, ""},
		{"YEARLY with billing_week", func(in *billing.CreateInput) { in.Term, in.PaymentDay, in.BillingWeek = dates.Yearly, 0, 2 }, ""},
		{"MONTHLY with billing_week", func(in *billing.CreateInput) { in.PaymentDay, in.BillingWeek = 0, 2 }, "2024-04-12"},
		{"YEARLY with payment_day", func(in *billing.CreateInput) { in.Term = dates.Yearly }, "2024-03-15"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			account, id := fmt.Sprintf("acc-in-%d", i), fmt.Sprintf("sub-in-%d", i)
			in := billingtest.Input("gold", 15)
			in.SubscriptionID = id
			tc.edit(&in)
			sub, err := e.Service.CreateSubscription(ctx, account, in)
			if tc.wantFirst != "" {
				require.NoError(t, err)
				assert.Equal(t, tc.wantFirst, sub.NextPaymentDate.String())
				return
			}
			require.ErrorIs(t, err, apperr.ErrInvalid)
			subs, periods := stored(t, e, account, id)
			assert.Empty(t, subs, "a refused create writes no subscription")
			assert.Empty(t, periods, "a refused create writes no period")
			// The id is still free: the same request with valid input is created.
			ok := billingtest.Input("gold", 15)
			ok.SubscriptionID = id
			_, err = e.Service.CreateSubscription(ctx, account, ok)
			require.NoError(t, err)
		})
	}
}

// docs/design.md §8: Friday billing is monthly. A change that would make a YEARLY
// subscription bill on a Friday week is refused and changes nothing.
func TestChangeRefusesFridayBillingOnYearly(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{Start: time.Date(2024, 3, 10, 9, 0, 0, 0, time.UTC)})
	in := billingtest.Input("gold", 15)
	in.Term = dates.Yearly
	sub, err := e.Service.CreateSubscription(ctx, "acc-y", in)
	require.NoError(t, err)
	_, before := stored(t, e, "acc-y", sub.SubscriptionID)
	week := 2
	_, err = e.Service.UpdateSubscription(ctx, "acc-y", sub.SubscriptionID, billing.Change{BillingWeek: &week})
	require.ErrorIs(t, err, apperr.ErrInvalid)
	assert.Contains(t, err.Error(), "Friday billing is monthly")
	got, err := e.Service.GetSubscription(ctx, "acc-y", sub.SubscriptionID)
	require.NoError(t, err)
	assert.Equal(t, sub, got, "nothing changed")
	_, after := stored(t, e, "acc-y", sub.SubscriptionID)
	assert.Equal(t, before, after)
}
