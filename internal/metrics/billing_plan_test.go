package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
)

// The billing collectors count plan changes by direction (billing.PlanObserver).
func TestPlanChangesAreCountedByDirection(t *testing.T) {
	reg := prometheus.NewRegistry()
	var obs billing.Observer = NewBilling(reg)
	po, ok := obs.(billing.PlanObserver)
	require.True(t, ok, "metrics.Billing does not count plan changes (billing.PlanObserver)")
	for _, d := range []string{"down", "down", "up"} {
		po.PlanChanged(d)
	}
	families, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "stripe_payments_billing_plan_changes_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	assert.Equal(t, map[string]float64{"down": 2, "up": 1}, got)
}
