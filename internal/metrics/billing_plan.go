package metrics

import "github.com/prometheus/client_golang/prometheus"

// newPlanChanges registers the count of plan changes (docs/design.md §8 "Plan
// change") by direction: up, down (a pending downgrade follows) or same
// (a new name at the same amount).
func newPlanChanges(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stripe_payments_billing_plan_changes_total",
		Help: "Billing plan changes (PATCH or reactivate with sku and amount) by direction of the amount: up, down (pending_downgrade until its first charge) or same.",
	}, []string{"direction"})
	reg.MustRegister(c)
	return c
}

// PlanChanged implements billing.PlanObserver.
func (b *Billing) PlanChanged(direction string) { b.PlanChangesTotal.WithLabelValues(direction).Inc() }
