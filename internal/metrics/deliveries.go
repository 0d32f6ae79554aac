package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// deliveries counts the events the handler is given, by where they came
// from (never by account: one series per merchant is unbounded), and those whose api_version is not
// the one the service expects (STRIPE_API_VERSION): the silence and
// version-drift alerts read them (monitoring/prometheus/alerts.yml).
type deliveries struct {
	received   *prometheus.CounterVec
	unexpected *prometheus.CounterVec
	// unexpectedBySource is unexpected without the version, its delivery
	// sources' series created at 0: a version's series is born at its first
	// event, which increase() cannot see; this one's first event it can.
	unexpectedBySource *prometheus.CounterVec
}

func newDeliveries(reg prometheus.Registerer) deliveries {
	d := deliveries{
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_events_received_total",
			Help: "Events given to the handler, by source (webhook, eventbridge, poller, replay).",
		}, []string{"source"}),
		unexpected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_events_unexpected_api_version_total",
			Help: "Events whose api_version is not the configured STRIPE_API_VERSION, by api_version and source.",
		}, []string{"api_version", "source"}),
	}
	d.unexpectedBySource = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stripe_payments_events_unexpected_api_version_deliveries_total",
		Help: "Events whose api_version is not the configured STRIPE_API_VERSION, by source (every source's series from 0).",
	}, []string{"source"})
	for _, src := range []stripeevent.Source{stripeevent.SourceWebhook, stripeevent.SourceEventBridge} {
		d.unexpectedBySource.WithLabelValues(string(src))
	}
	reg.MustRegister(d.received, d.unexpected, d.unexpectedBySource)
	return d
}

// Delivered implements handler.DeliveryObserver.
func (m *Metrics) Delivered(source stripeevent.Source, apiVersion string, expected bool) {
	m.deliveries.received.WithLabelValues(string(source)).Inc()
	if !expected {
		m.deliveries.unexpected.WithLabelValues(apiVersion, string(source)).Inc()
		m.deliveries.unexpectedBySource.WithLabelValues(string(source)).Inc()
	}
}
