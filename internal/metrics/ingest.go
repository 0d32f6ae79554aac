package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stripe-payments/stripe-payments/internal/handler"
)

// ingest holds the collectors of the ingest path's protections.
type ingest struct {
	panics prometheus.Counter
	shed   *prometheus.CounterVec
}

func newIngest(r prometheus.Registerer) ingest {
	in := ingest{
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stripe_payments_ingest_panics_total",
			Help: "Batches whose processing panicked; their deliveries failed (5xx) and are retried.",
		}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_ingest_shed_total",
			Help: "Deliveries not processed: refused on a full queue (queue_full) or dropped because their caller had gone (caller_gone).",
		}, []string{"reason"}),
	}
	// Both reasons exist from the start, so rate() sees the first one.
	in.shed.WithLabelValues(handler.ShedQueueFull)
	in.shed.WithLabelValues(handler.ShedCallerGone)
	r.MustRegister(in.panics, in.shed)
	return in
}

// FlushPanicked implements handler.IngestObserver.
func (m *Metrics) FlushPanicked() { m.ingest.panics.Inc() }

// Shed implements handler.IngestObserver. reason is one of the handler's
// constants: a fixed label set.
func (m *Metrics) Shed(reason string, n int) {
	if reason != handler.ShedQueueFull && reason != handler.ShedCallerGone {
		return
	}
	m.ingest.shed.WithLabelValues(reason).Add(float64(n))
}

// WatchIngest exports the ingest queue of stats as gauges.
func (m *Metrics) WatchIngest(stats func() handler.QueueStats) {
	gauge := func(name, help string, v func(handler.QueueStats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return v(stats()) })
	}
	m.Registry.MustRegister(
		gauge("stripe_payments_ingest_queue_depth", "Deliveries waiting for a group-commit batch.",
			func(s handler.QueueStats) float64 { return float64(s.Queued) }),
		gauge("stripe_payments_ingest_queue_bytes", "Payload bytes of the deliveries waiting for a batch.",
			func(s handler.QueueStats) float64 { return float64(s.Bytes) }),
		gauge("stripe_payments_ingest_batches_in_flight", "Group-commit batches being processed.",
			func(s handler.QueueStats) float64 { return float64(s.Flushing) }),
		gauge("stripe_payments_ingest_stalled_seconds", "How long the oldest queued delivery has waited with no batch finishing (0 when none waits).",
			func(s handler.QueueStats) float64 { return s.Stalled.Seconds() }),
	)
}
