package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Records holds the collectors of the events table's write-behind (package
// recordq) and of the ingest batches' stages: where an event's time goes.
type Records struct {
	backlog      prometheus.Gauge
	backlogBytes prometheus.Gauge
	quarantined  prometheus.Counter
	written      *prometheus.CounterVec
	writeSeconds prometheus.Histogram
	batchSize    prometheus.Histogram
	stageSeconds *prometheus.HistogramVec
}

// NewRecords registers the write-behind collectors on m's registry.
func (m *Metrics) NewRecords() *Records {
	r := &Records{
		backlog: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stripe_payments_event_records_backlog",
			Help: "Event records acknowledged (durable in Postgres) and not yet written to the events table.",
		}),
		backlogBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stripe_payments_event_records_backlog_bytes",
			Help: "Payload bytes of the event records acknowledged and not yet written to the events table (the queue holds ids; the payloads stay in Postgres).",
		}),
		quarantined: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stripe_payments_event_records_quarantined_total",
			Help: "Event records the events table refused for good, moved to event_records_quarantined (docs/runbooks/StripePaymentsEventRecordsQuarantined.md).",
		}),
		written: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_event_records_written_total",
			Help: "Event records copied from Postgres to the events table, by result (ok, error: retried).",
		}, []string{"result"}),
		writeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "stripe_payments_event_records_write_seconds",
			Help:    "One write-behind batch: BatchGetItem of the bookkeeping, BatchWriteItem, delete of the pending rows.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "stripe_payments_ingest_batch_events",
			Help:    "Events per group-commit batch.",
			Buckets: []float64{1, 2, 4, 8, 16, 25, 50, 100},
		}),
		stageSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "stripe_payments_ingest_stage_seconds",
			Help:    "Time of one group-commit batch's stages (commit: the Postgres transaction; record: the synchronous events-table work of the answer, when there is any).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"stage"}),
	}
	r.written.WithLabelValues("ok")
	r.written.WithLabelValues("error")
	m.Registry.MustRegister(r.backlog, r.backlogBytes, r.quarantined, r.written, r.writeSeconds, r.batchSize, r.stageSeconds)
	return r
}

// RecordsWritten implements recordq.Observer.
func (r *Records) RecordsWritten(n int, elapsed time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	r.written.WithLabelValues(result).Add(float64(n))
	r.writeSeconds.Observe(elapsed.Seconds())
}

// RecordBacklog implements recordq.Observer.
func (r *Records) RecordBacklog(n int) { r.backlog.Set(float64(n)) }

// RecordBacklogBytes implements recordq.QuarantineObserver.
func (r *Records) RecordBacklogBytes(n int64) { r.backlogBytes.Set(float64(n)) }

// RecordsQuarantined implements recordq.QuarantineObserver.
func (r *Records) RecordsQuarantined(n int) { r.quarantined.Add(float64(n)) }

// Batch is told the size and stage times of every ingest batch.
func (r *Records) Batch(events int, stage string, elapsed time.Duration) {
	if stage == "commit" {
		r.batchSize.Observe(float64(events))
	}
	r.stageSeconds.WithLabelValues(stage).Observe(elapsed.Seconds())
}
