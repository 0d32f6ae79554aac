package billing_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
)

// docs/design.md §8 "Reactivation", the cases the oracle found (seed 3, 36
// months): "one term after the last charged period" is a term of the rule
// that period was charged under (a MONTHLY period charged before a change
// to YEARLY: a month, not a year); and a later period of the new schedule
// whose record the cancel ended is scheduled again, not left CANCELLED.
func TestReactivationTermOfTheChargedPeriod(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	e.Clock.SetDate(d("2027-08-01"))
	sub, err := e.Service.CreateSubscription(ctx, "acc-r", billingtest.Input("gold", 28))
	require.NoError(t, err)
	collect(t, e, "2027-08-28")
	require.Equal(t, billing.Completed, period(t, e, sub, "2027-08-28").Status)
	e.Clock.SetDate(d("2027-10-15"))
	yearly, day := dates.Yearly, 30
	_, err = e.Service.UpdateSubscription(ctx, "acc-r", sub.SubscriptionID, billing.Change{Term: &yearly, PaymentDay: &day})
	require.NoError(t, err)
	_, err = e.Service.UpdateSubscription(ctx, "acc-r", sub.SubscriptionID, billing.Change{Action: "cancel"})
	require.NoError(t, err)
	// YEARLY on Oct 30 now (a new term takes the month of its first
	// date); the Oct 30 period was CANCELLED with the subscription.
	require.Equal(t, billing.Cancelled, period(t, e, sub, "2027-10-30").Status)
	e.Clock.SetDate(d("2027-10-20"))
	got, err := e.Service.Reactivate(ctx, "acc-r", sub.SubscriptionID, billing.Reactivation{})
	require.NoError(t, err)
	assert.Equal(t, "2027-10-30", got.NextPaymentDate.String(), "a month after Aug 28 (not a year): the rule's first date")
	p := period(t, e, sub, "2027-10-30")
	assert.Equal(t, billing.Scheduled, p.Status)
	assert.Equal(t, billing.ProcReactivation, p.Process)
	assert.Equal(t, billing.UpdatedEventReactivated, p.UpdatedEvent)
	_, err = e.Service.Reactivate(ctx, "acc-r", sub.SubscriptionID, billing.Reactivation{})
	assert.ErrorIs(t, err, billing.ErrNotCancelled)
}
