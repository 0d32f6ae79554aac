package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Outbox holds the outbox's collectors. The topic label takes the code's
// fixed topic names only (action, billing, email); table is outbox or
// processed_events.
type Outbox struct {
	Pending      *prometheus.GaugeVec
	OldestAge    *prometheus.GaugeVec
	Dead         *prometheus.GaugeVec
	DeadLettered *prometheus.CounterVec
	Pruned       *prometheus.CounterVec
}

// NewOutbox registers the outbox's collectors on reg (the instance's
// Metrics.Registry).
func NewOutbox(reg prometheus.Registerer) *Outbox {
	o := &Outbox{
		Pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stripe_payments_outbox_pending",
			Help: "Undelivered outbox messages (due, backing off or under lease), by topic; refreshed every 15 s.",
		}, []string{"topic"}),
		OldestAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stripe_payments_outbox_oldest_pending_age_seconds",
			Help: "Age of the oldest undelivered outbox message, by topic (0 when none); refreshed every 15 s.",
		}, []string{"topic"}),
		Dead: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stripe_payments_outbox_dead_letters",
			Help: "Outbox messages given up on, waiting for a re-drive, by topic; refreshed every 15 s.",
		}, []string{"topic"}),
		DeadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_outbox_dead_lettered_total",
			Help: "Outbox messages this instance gave up on, by topic.",
		}, []string{"topic"}),
		Pruned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_pruned_rows_total",
			Help: "Rows deleted by the pruner past their retention, by table.",
		}, []string{"table"}),
	}
	reg.MustRegister(o.Pending, o.OldestAge, o.Dead, o.DeadLettered, o.Pruned)
	return o
}
