package billing_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// Bad selections of a batch (docs/design.md §4; a batch with no selection
// and no time range would charge every account): refused as invalid input
// before anything is read.
func TestBatchSelectionValidate(t *testing.T) {
	d := dates.MustParse
	many := make([]string, billing.MaxBatchAccounts+1)
	for i := range many {
		many[i] = "acc-" + dates.New(2024, 1, 1).AddDays(i).String()
	}
	tests := []struct {
		name string
		sel  billing.BatchSelection
		ok   bool
	}{
		{"nothing", billing.BatchSelection{}, false},
		{"an account", billing.BatchSelection{AccountIDs: []string{"acc-1"}}, true},
		{"a start date alone", billing.BatchSelection{Since: d("2024-01-01")}, true},
		{"an end date alone", billing.BatchSelection{Until: d("2024-01-01")}, true},
		{"a range", billing.BatchSelection{Since: d("2024-01-01"), Until: d("2024-12-31")}, true},
		{"until before since", billing.BatchSelection{Since: d("2024-02-01"), Until: d("2024-01-31")}, false},
		{"one day", billing.BatchSelection{Since: d("2024-02-01"), Until: d("2024-02-01")}, true},
		{"over 366 days without accounts", billing.BatchSelection{Since: d("2024-01-01"), Until: d("2025-01-02")}, false},
		{"366 days", billing.BatchSelection{Since: d("2024-01-01"), Until: d("2025-01-01")}, true},
		{"a long range with accounts", billing.BatchSelection{AccountIDs: []string{"acc-1"}, Since: d("2020-01-01"), Until: d("2025-01-01")}, true},
		{"an account named twice", billing.BatchSelection{AccountIDs: []string{"acc-1", "acc-1"}}, false},
		{"a bad account id", billing.BatchSelection{AccountIDs: []string{"acc#1"}}, false},
		{"an empty account id", billing.BatchSelection{AccountIDs: []string{""}}, false},
		{"too many accounts", billing.BatchSelection{AccountIDs: many}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.sel.Validate()
			if tc.ok {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, apperr.ErrInvalid)
			}
		})
	}
}

// BatchCharge charges only the period the batch selected while it is the
// subscription's oldest ERROR period: paid since (by the day's retry), it
// reports nothing_to_pay and sends nothing to Stripe; a hard-declined
// period is collected, process BATCH.
func TestBatchChargeOnlyTheSelectedOldestErrorPeriod(t *testing.T) {
	ctx := context.Background()
	e := billingtest.NewEnv(t, billingtest.Options{})
	var paid atomic.Bool
	e.Stripe.Decide = func(p stripetest.PI) stripetest.Behavior {
		if !paid.Load() {
			return stripetest.Decline
		}
		return stripetest.Succeed
	}
	e.Stripe.DeclineAs = func(stripetest.PI) string { return "stolen_card" }
	sub, err := e.Service.CreateSubscription(ctx, "acc-sel", billingtest.Input("gold", 10))
	require.NoError(t, err)
	day := dates.MustParse("2024-01-10")
	e.Clock.SetDate(day)
	_, err = e.Service.Collect(ctx, day)
	require.NoError(t, err)
	p, err := e.Store.GetPeriod(ctx, "acc-sel", sub.SubscriptionID, day)
	require.NoError(t, err)
	require.True(t, p.NotRetried)

	cands, err := e.Service.SelectBatch(ctx, billing.BatchSelection{AccountIDs: []string{"acc-sel"}})
	require.NoError(t, err)
	require.Len(t, cands, 1)
	assert.Equal(t, day, cands[0].BillingDate)
	assert.True(t, cands[0].NotRetried)
	assert.Equal(t, "stolen_card", cands[0].DeclineCode)

	n := len(e.Stripe.PIs())
	res, err := e.Service.BatchCharge(ctx, "acc-sel", sub.SubscriptionID, day.AddDays(-31), nil, func(billing.BatchAttempt) error { return nil })
	require.NoError(t, err)
	assert.Equal(t, billing.BatchNothing, res.Outcome, "not the period selected")
	assert.Len(t, e.Stripe.PIs(), n, "nothing sent")

	paid.Store(true)
	var begun []billing.BatchAttempt
	res, err = e.Service.BatchCharge(ctx, "acc-sel", sub.SubscriptionID, day, nil, func(a billing.BatchAttempt) error {
		begun = append(begun, a)
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, billing.BatchPaid, res.Outcome)
	assert.Equal(t, []billing.BatchAttempt{{BillingDate: day, AttemptNo: 2}}, begun, "the attempt is told before it is claimed")
	p, err = e.Store.GetPeriod(ctx, "acc-sel", sub.SubscriptionID, day)
	require.NoError(t, err)
	assert.Equal(t, billing.Completed, p.Status)
	assert.Equal(t, billing.ProcBatch, p.Process)

	res, err = e.Service.BatchCharge(ctx, "acc-sel", sub.SubscriptionID, day, nil, func(billing.BatchAttempt) error { return nil })
	require.NoError(t, err)
	assert.Equal(t, billing.BatchNothing, res.Outcome, "charged once")
	assert.Len(t, e.Stripe.Successful()[stripetest.PeriodKey("acc-sel", sub.SubscriptionID, "2024-01-10")], 1)
	_, err = e.Service.SelectBatch(ctx, billing.BatchSelection{AccountIDs: []string{"acc-sel"}})
	require.NoError(t, err)
}
