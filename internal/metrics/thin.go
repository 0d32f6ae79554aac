package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// Thin holds the thin-event collectors; it implements
// thin.Observer.
type Thin struct {
	received *prometheus.CounterVec
	hydrated *prometheus.CounterVec
	health   *prometheus.CounterVec
	latency  prometheus.Histogram
}

// ThinBacklog reads the hydration backlog: how many notifications wait and
// when the oldest was received (zero when none).
type ThinBacklog func(ctx context.Context) (count int, oldest time.Time, err error)

// NewThin registers the thin-event metrics; backlog is read on each scrape.
func (m *Metrics) NewThin(backlog ThinBacklog) *Thin {
	t := &Thin{
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_thin_events_received_total",
			Help: "Thin event notifications taken in, by outcome (received, duplicate, ignored, failed).",
		}, []string{"outcome"}),
		hydrated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_thin_events_hydrated_total",
			Help: "Thin event hydrations, by result (hydrated, account, redriven, unhandled; retry for a failed try; refused for a notification that disagreed with Stripe's copy of the event).",
		}, []string{"result"}),
		// severity only: an account label would be one series per merchant.
		health: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_thin_health_events_total",
			Help: "Event generation failure health events hydrated (their object re-driven), by data.severity (critical, non_critical; unknown when Stripe sent none or another).",
		}, []string{"severity"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "stripe_payments_thin_hydration_latency_seconds",
			Help:    "From a thin notification's receipt to its hydration.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
		}),
	}
	for _, o := range []stripeevent.Outcome{stripeevent.Received, stripeevent.Duplicate, stripeevent.Ignored, stripeevent.Failed} {
		t.received.WithLabelValues(string(o))
	}
	// Every result exists from the start, so an alert on the first
	// increase of one (refused) sees it.
	for _, r := range []string{"hydrated", "account", "redriven", "unhandled", "retry", "refused"} {
		t.hydrated.WithLabelValues(r)
	}
	for _, sev := range []string{stripeevent.SeverityCritical, stripeevent.SeverityNonCritical, stripeevent.SeverityUnknown} {
		t.health.WithLabelValues(sev)
	}
	m.Registry.MustRegister(t.received, t.hydrated, t.health, t.latency, &thinBacklog{read: backlog,
		count: prometheus.NewDesc("stripe_payments_thin_hydration_backlog",
			"Thin event notifications received and not yet hydrated.", nil, nil),
		age: prometheus.NewDesc("stripe_payments_thin_hydration_oldest_age_seconds",
			"Age of the oldest thin notification waiting for hydration (0 when none).", nil, nil)})
	return t
}

// ThinReceived implements thin.Observer.
func (t *Thin) ThinReceived(o stripeevent.Outcome) { t.received.WithLabelValues(string(o)).Inc() }

// ThinHydrated implements thin.Observer.
func (t *Thin) ThinHydrated(result string, latency time.Duration) {
	t.hydrated.WithLabelValues(result).Inc()
	if result != "retry" && result != "refused" { // neither was hydrated
		t.latency.Observe(latency.Seconds())
	}
}

// ThinHealth implements thin.Observer. A severity outside the known set is
// counted as unknown, so the label set stays fixed.
func (t *Thin) ThinHealth(severity string) {
	if severity != stripeevent.SeverityCritical && severity != stripeevent.SeverityNonCritical {
		severity = stripeevent.SeverityUnknown
	}
	t.health.WithLabelValues(severity).Inc()
}

// thinBacklog reads the backlog from Postgres on each scrape.
type thinBacklog struct {
	read       ThinBacklog
	count, age *prometheus.Desc
}

func (b *thinBacklog) Describe(ch chan<- *prometheus.Desc) { ch <- b.count; ch <- b.age }

func (b *thinBacklog) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, oldest, err := b.read(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(b.count, err)
		return
	}
	age := 0.0
	if !oldest.IsZero() {
		age = time.Since(oldest).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(b.count, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(b.age, prometheus.GaugeValue, age)
}
