package metrics

import "github.com/prometheus/client_golang/prometheus"

// Batches counts the progress of batch collections (docs/design.md §8 "Batch
// collection"; batchrun.Observer).
type Batches struct {
	Items   *prometheus.CounterVec
	Running prometheus.Gauge
}

// NewBatches registers the batch collectors on reg.
func NewBatches(reg prometheus.Registerer) *Batches {
	b := &Batches{
		Items: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_billing_batch_items_total",
			Help: "Batch collection items done, by outcome (paid, processing, declined, nothing_to_pay, skipped_in_flight, skipped_cancelled, skipped_locked, failed).",
		}, []string{"outcome"}),
		Running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stripe_payments_billing_batches_running",
			Help: "Batch collections recorded and not finished yet.",
		}),
	}
	reg.MustRegister(b.Items, b.Running)
	return b
}

// BatchItem implements batchrun.Observer.
func (b *Batches) BatchItem(outcome string) { b.Items.WithLabelValues(outcome).Inc() }

// BatchesRunning implements batchrun.Observer.
func (b *Batches) BatchesRunning(n int) { b.Running.Set(float64(n)) }
