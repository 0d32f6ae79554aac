package metrics

import "github.com/prometheus/client_golang/prometheus"

// Triggers counts the collections the platform triggers (docs/design.md §8
// "Collections triggered by the platform"; trigger.Observer).
type Triggers struct {
	Total    *prometheus.CounterVec
	Refusals *prometheus.CounterVec
	Waiting  prometheus.Gauge
}

// NewTriggers registers the trigger collectors on reg, every kind and
// outcome (and refusal reason) at 0, so that a rate is defined from the
// start.
func NewTriggers(reg prometheus.Registerer, kinds, outcomes, reasons []string) *Triggers {
	t := &Triggers{
		Total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_billing_triggers_total",
			Help: "Platform triggers done, by kind (income, balance) and outcome (collected, processing, declined, not_attempted, nothing_unpaid, unknown_account, failed, duplicate).",
		}, []string{"kind", "outcome"}),
		Refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_billing_trigger_refusals_total",
			Help: "Messages on BILLING_TRIGGERS_QUEUE_URL that are not triggers, by reason (envelope, detail_type, detail, reference_conflict): left for the dead-letter queue.",
		}, []string{"reason"}),
		Waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stripe_payments_billing_triggers_pending",
			Help: "Platform triggers recorded and not collected yet.",
		}),
	}
	reg.MustRegister(t.Total, t.Refusals, t.Waiting)
	for _, k := range kinds {
		for _, o := range outcomes {
			t.Total.WithLabelValues(k, o)
		}
	}
	for _, r := range reasons {
		t.Refusals.WithLabelValues(r)
	}
	return t
}

// Triggered implements trigger.Observer.
func (t *Triggers) Triggered(kind, outcome string) { t.Total.WithLabelValues(kind, outcome).Inc() }

// Refused implements trigger.Observer.
func (t *Triggers) Refused(reason string) { t.Refusals.WithLabelValues(reason).Inc() }

// Pending implements trigger.Observer.
func (t *Triggers) Pending(n int) { t.Waiting.Set(float64(n)) }
