package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
)

// StripeBudget holds the shared Stripe API budget's collectors (docs/design.md §9,
// docs/stripe-budget.md); it implements stripebudget.Observer.
type StripeBudget struct {
	GrantedTotal     *prometheus.CounterVec
	Waits            *prometheus.HistogramVec
	RateLimitedTotal *prometheus.CounterVec
	StoreErrors      prometheus.Counter
	FallbackOn       prometheus.Gauge
	ReplayedTotal    *prometheus.CounterVec
	LateTotal        *prometheus.CounterVec
}

// NewStripeBudget registers the collectors on reg.
func NewStripeBudget(reg prometheus.Registerer) *StripeBudget {
	m := &StripeBudget{
		GrantedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_stripe_budget_granted_total",
			Help: "Stripe API requests this replica sent on the shared budget, by class (charges, hydration, background).",
		}, []string{"class"}),
		Waits: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "stripe_payments_stripe_budget_wait_seconds",
			Help:    "How long a Stripe API request waited for its slot of the shared budget, by class.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"class"}),
		RateLimitedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_stripe_budget_rate_limited_total",
			Help: "Stripe API answers 429 (each pauses every replica), by the class of the request.",
		}, []string{"class"}),
		StoreErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stripe_payments_stripe_budget_store_errors_total",
			Help: "Leases and pauses of the shared Stripe budget that its Postgres store did not answer.",
		}),
		FallbackOn: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stripe_payments_stripe_budget_fallback",
			Help: "1 while this replica cannot reach the budget's store and spends STRIPE_RATE_LIMIT / STRIPE_EXPECTED_REPLICAS alone.",
		}),
		ReplayedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_stripe_idempotent_replayed_total",
			Help: "Stripe answers with Idempotent-Replayed: true (the first answer again; nothing new happened), by class.",
		}, []string{"class"}),
		LateTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_stripe_budget_late_slots_total",
			Help: "Slots dropped because the process woke more than one request's worth after them (a stalled replica), by class.",
		}, []string{"class"}),
	}
	reg.MustRegister(m.GrantedTotal, m.Waits, m.RateLimitedTotal, m.StoreErrors, m.FallbackOn, m.ReplayedTotal, m.LateTotal)
	return m
}

// Granted implements stripebudget.Observer.
func (m *StripeBudget) Granted(c stripebudget.Class, wait time.Duration) {
	m.GrantedTotal.WithLabelValues(c.String()).Inc()
	m.Waits.WithLabelValues(c.String()).Observe(wait.Seconds())
}

// RateLimited implements stripebudget.Observer.
func (m *StripeBudget) RateLimited(c stripebudget.Class) {
	m.RateLimitedTotal.WithLabelValues(c.String()).Inc()
}

// StoreError implements stripebudget.Observer.
func (m *StripeBudget) StoreError() { m.StoreErrors.Inc() }

// Fallback implements stripebudget.Observer.
func (m *StripeBudget) Fallback(on bool) {
	if on {
		m.FallbackOn.Set(1)
		return
	}
	m.FallbackOn.Set(0)
}

// Replayed implements stripebudget.Observer.
func (m *StripeBudget) Replayed(c stripebudget.Class) {
	m.ReplayedTotal.WithLabelValues(c.String()).Inc()
}

// Late implements stripebudget.Observer.
func (m *StripeBudget) Late(c stripebudget.Class) { m.LateTotal.WithLabelValues(c.String()).Inc() }
