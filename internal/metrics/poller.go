package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Poller holds the poller's collectors (docs/design.md §7). Every series carries the
// stripe_account it is about: one series per known account and metric.
type Poller struct {
	EventsListed   *prometheus.CounterVec
	EventsReplayed *prometheus.CounterVec
	EventsFailed   *prometheus.CounterVec
	WebhookGaps    *prometheus.CounterVec
	CheckpointAges *prometheus.GaugeVec
}

// NewPoller registers the poller's collectors on reg (the instance's
// Metrics.Registry).
func NewPoller(reg prometheus.Registerer) *Poller {
	p := &Poller{
		EventsListed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_poller_events_listed_total",
			Help: "Events the Stripe Events API listed to the poller, by account.",
		}, []string{"stripe_account"}),
		EventsReplayed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_poller_events_replayed_total",
			Help: "Events the poller replayed (missing or unprocessed) that are now processed, by account.",
		}, []string{"stripe_account"}),
		EventsFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_poller_events_failed_total",
			Help: "Events the poller could not replay, by account; each holds the account's checkpoint back.",
		}, []string{"stripe_account"}),
		WebhookGaps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_poller_webhook_gap_total",
			Help: "Events the Events API listed that the events table never recorded (the webhook never arrived), by account.",
		}, []string{"stripe_account"}),
		CheckpointAges: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stripe_payments_poller_checkpoint_age_seconds",
			Help: "Age of the account's poller checkpoint at the end of the last run.",
		}, []string{"stripe_account"}),
	}
	reg.MustRegister(p.EventsListed, p.EventsReplayed, p.EventsFailed, p.WebhookGaps, p.CheckpointAges)
	return p
}

// Listed implements poller.Observer.
func (p *Poller) Listed(account string, n int) {
	p.EventsListed.WithLabelValues(account).Add(float64(n))
}

// Replayed implements poller.Observer.
func (p *Poller) Replayed(account string, n int) {
	p.EventsReplayed.WithLabelValues(account).Add(float64(n))
}

// Failed implements poller.Observer.
func (p *Poller) Failed(account string, n int) {
	p.EventsFailed.WithLabelValues(account).Add(float64(n))
}

// WebhookGap implements poller.Observer.
func (p *Poller) WebhookGap(account string, n int) {
	p.WebhookGaps.WithLabelValues(account).Add(float64(n))
}

// CheckpointAge implements poller.Observer.
func (p *Poller) CheckpointAge(account string, age time.Duration) {
	p.CheckpointAges.WithLabelValues(account).Set(age.Seconds())
}
