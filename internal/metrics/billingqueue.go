package metrics

import "github.com/prometheus/client_golang/prometheus"

// BillingQueue holds the billing queue's collectors (package
// billingqueue): what each received message came to, and the queued runs
// past their deadline (the alert StripePaymentsBillingQueueNotDrained).
type BillingQueue struct {
	messages *prometheus.CounterVec
	overdue  prometheus.Gauge
	depth    *prometheus.GaugeVec
}

// billingQueueOutcomes are the outcomes a receive ends in.
var billingQueueOutcomes = []string{"collected", "nothing_due", "incomplete", "locked", "dead", "retry", "refused"}

// NewBillingQueue registers the queue's collectors on reg.
func NewBillingQueue(reg prometheus.Registerer) *BillingQueue {
	q := &BillingQueue{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_billing_queue_messages_total",
			Help: "Billing queue messages this replica handled, by outcome: collected, nothing_due, incomplete (recorded, a charge's outcome unknown or an entry failed: the next run settles it), locked (comes back later), retry (failed, comes back later), dead (failed on its last receive: dead-letter queue), refused (not a billing queue message).",
		}, []string{"outcome"}),
		overdue: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stripe_payments_billing_queue_runs_overdue",
			Help: "Queued collection runs (real time) not drained by their deadline (BILLING_QUEUE_DEADLINE after their start), as this replica last counted them in Postgres.",
		}),
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stripe_payments_billing_queue_messages",
			Help: "Billing queue messages as SQS last counted them (approximate), by state: visible (waiting) or in_flight (received, being collected or hidden until they come back).",
		}, []string{"state"}),
	}
	for _, o := range billingQueueOutcomes {
		q.messages.WithLabelValues(o)
	}
	reg.MustRegister(q.messages, q.overdue, q.depth)
	return q
}

// Finished implements billingqueue.Observer.
func (q *BillingQueue) Finished(outcome string) { q.messages.WithLabelValues(outcome).Inc() }

// Overdue implements billingqueue.Observer.
func (q *BillingQueue) Overdue(n int) { q.overdue.Set(float64(n)) }

// Depth implements billingqueue.Observer.
func (q *BillingQueue) Depth(visible, inFlight int) {
	q.depth.WithLabelValues("visible").Set(float64(visible))
	q.depth.WithLabelValues("in_flight").Set(float64(inFlight))
}
