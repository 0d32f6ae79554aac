package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reasons of stripe_payments_ingest_shed_total: a fixed label set.
const (
	shedQueueFull  = "queue_full"
	shedCallerGone = "caller_gone"
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
	in.shed.WithLabelValues(shedQueueFull)
	in.shed.WithLabelValues(shedCallerGone)
	r.MustRegister(in.panics, in.shed)
	return in
}

// FlushPanicked implements handler.IngestObserver.
func (m *Metrics) FlushPanicked() { m.ingest.panics.Inc() }

// QueueFull implements handler.IngestObserver.
func (m *Metrics) QueueFull(n int) { m.ingest.shed.WithLabelValues(shedQueueFull).Add(float64(n)) }

// CallerGone implements handler.IngestObserver.
func (m *Metrics) CallerGone(n int) { m.ingest.shed.WithLabelValues(shedCallerGone).Add(float64(n)) }

// IngestQueue is a snapshot of the ingest queue (handler.QueueStats, which
// converts to it): metrics reads the handler without importing it.
type IngestQueue struct {
	Queued   int   // deliveries waiting for a batch
	Bytes    int64 // their payload bytes
	Flushing int   // batches in flight
	// Stalled is how long the oldest queued delivery has waited while no
	// batch finished; zero when nothing waits.
	Stalled time.Duration
}

// WatchIngest exports the ingest queue of stats as gauges.
func (m *Metrics) WatchIngest(stats func() IngestQueue) {
	gauge := func(name, help string, v func(IngestQueue) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return v(stats()) })
	}
	m.Registry.MustRegister(
		gauge("stripe_payments_ingest_queue_depth", "Deliveries waiting for a group-commit batch.",
			func(s IngestQueue) float64 { return float64(s.Queued) }),
		gauge("stripe_payments_ingest_queue_bytes", "Payload bytes of the deliveries waiting for a batch.",
			func(s IngestQueue) float64 { return float64(s.Bytes) }),
		gauge("stripe_payments_ingest_batches_in_flight", "Group-commit batches being processed.",
			func(s IngestQueue) float64 { return float64(s.Flushing) }),
		gauge("stripe_payments_ingest_stalled_seconds", "How long the oldest queued delivery has waited with no batch finishing (0 when none waits).",
			func(s IngestQueue) float64 { return s.Stalled.Seconds() }),
	)
}
