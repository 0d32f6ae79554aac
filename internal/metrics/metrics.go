// Package metrics owns the Prometheus registry of one running service (no
// global registry) and the collectors the other packages report to.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// Metrics is the set of collectors of one service instance.
type Metrics struct {
	Registry        *prometheus.Registry
	EventsHandled   *prometheus.CounterVec
	HandleSeconds   *prometheus.HistogramVec
	HTTPRequests    *prometheus.CounterVec
	HTTPSeconds     *prometheus.HistogramVec
	HTTPPanics      *prometheus.CounterVec
	DynamoRequests  *prometheus.CounterVec
	ingest          ingest
	deliveries      deliveries
	replaysFinished *prometheus.CounterVec
}

// New registers the collectors on a fresh registry.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		EventsHandled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_events_handled_total",
			Help: "Events handled, by outcome (applied, completed, duplicate, ignored, failed).",
		}, []string{"outcome"}),
		HandleSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "stripe_payments_event_handle_seconds",
			Help:    "Time to record and process one event, by outcome.",
			Buckets: []float64{.002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"outcome"}),
		HTTPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_http_requests_total",
			Help: "HTTP requests by route and status code.",
		}, []string{"route", "method", "code"}),
		HTTPSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "stripe_payments_http_request_seconds",
			Help:    "HTTP request latency by route.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "method"}),
		HTTPPanics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_http_panics_total",
			Help: "HTTP handlers that panicked (answered 500, server kept serving), by route template.",
		}, []string{"route"}),
		DynamoRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_dynamodb_requests_total",
			Help: "DynamoDB API calls by operation (retries not counted).",
		}, []string{"operation"}),
	}
	m.Registry.MustRegister(m.DynamoRequests,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.EventsHandled, m.HandleSeconds, m.HTTPRequests, m.HTTPSeconds, m.HTTPPanics,
	)
	m.ingest = newIngest(m.Registry)
	m.deliveries = newDeliveries(m.Registry)
	m.replaysFinished = newReplaysFinished(m.Registry)
	return m
}

// Handled implements handler.Observer.
func (m *Metrics) Handled(_ string, outcome stripeevent.Outcome, elapsed time.Duration) {
	m.EventsHandled.WithLabelValues(string(outcome)).Inc()
	m.HandleSeconds.WithLabelValues(string(outcome)).Observe(elapsed.Seconds())
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}
