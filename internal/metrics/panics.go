package metrics

import "github.com/prometheus/client_golang/prometheus"

// Goroutine names of stripe_payments_panics_total: a fixed label set, the
// background loops and work that package safego starts.
var goroutineNames = []string{
	"records_sweep", "records_writer", "records_write", "actions", "emails", "ops_counter",
	"outbox_stats", "prune", "poller", "billing_feed", "billing_ticker",
	"clock_advance", "clock_heartbeat", "billing_account", "eventbridge", "thin_hydrator", "thin_hydration", "thin_sweep",
	"bulk_replay", "billing_batch", "lock_heartbeat", "stripe_budget_leaser", "stripe_budget_probe",
}

// Panics counts the panics recovered in background goroutines
// (safego.Observer).
type Panics struct{ c *prometheus.CounterVec }

// NewPanics registers stripe_payments_panics_total on reg.
func NewPanics(reg prometheus.Registerer) *Panics {
	p := &Panics{c: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stripe_payments_panics_total",
		Help: "Panics recovered in background goroutines (logged with their stack; the loop was restarted, or that one piece of work failed), by goroutine.",
	}, []string{"goroutine"})}
	for _, n := range goroutineNames {
		p.c.WithLabelValues(n)
	}
	reg.MustRegister(p.c)
	return p
}

// Panicked implements safego.Observer.
func (p *Panics) Panicked(name string) { p.c.WithLabelValues(name).Inc() }
