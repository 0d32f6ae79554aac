package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stripe-payments/stripe-payments/internal/reconcile"
)

// Reconcile counts what the reconciliation (docs/design.md §11) finds;
// it implements reconcile.Observer.
type Reconcile struct {
	drift *prometheus.CounterVec
}

// NewReconcile registers stripe_payments_reconcile_drift_total on reg.
func NewReconcile(reg prometheus.Registerer) *Reconcile {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stripe_payments_reconcile_drift_total",
		Help: "Differences the reconciliation found between the service and Stripe, by kind of object (dry runs included).",
	}, []string{"kind"})
	for _, k := range reconcile.AllKinds {
		c.WithLabelValues(k) // present at 0, so increase() sees the first one
	}
	reg.MustRegister(c)
	return &Reconcile{drift: c}
}

// DriftFound implements reconcile.Observer.
func (r *Reconcile) DriftFound(kind string) { r.drift.WithLabelValues(kind).Inc() }
