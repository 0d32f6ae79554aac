package metrics

import "github.com/prometheus/client_golang/prometheus"

// newReplaysFinished counts bulk replays carried to their end, by result:
// clean, or with_failures (done, yet items failed again: a run recorded as
// finished that left work behind, alert StripePaymentsReplayDoneWithFailures).
func newReplaysFinished(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stripe_payments_replays_finished_total",
		Help: "Bulk replays finished (status done), by result: clean, or with_failures when items failed again.",
	}, []string{"result"})
	for _, r := range []string{"clean", "with_failures"} {
		c.WithLabelValues(r) // present at 0, so increase() sees the first one
	}
	reg.MustRegister(c)
	return c
}

// ReplayFinished implements replay.RunnerConfig.Finished.
func (m *Metrics) ReplayFinished(result string) { m.replaysFinished.WithLabelValues(result).Inc() }
