package metrics

import "github.com/prometheus/client_golang/prometheus"

// Billing holds the billing core's money-safety collectors (billing.Observer).
type Billing struct {
	FeedRefusedTotal      *prometheus.CounterVec
	UnknownOutcomesTotal  prometheus.Counter
	ResolvedOutcomesTotal *prometheus.CounterVec
	Unresolved            prometheus.Gauge
	DuplicateRefunds      prometheus.Counter
	DeclinesTotal         *prometheus.CounterVec
	PlanChangesTotal      *prometheus.CounterVec // billing_plan.go
}

// NewBilling registers the billing collectors on reg.
func NewBilling(reg prometheus.Registerer) *Billing {
	b := &Billing{
		FeedRefusedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_billing_feed_refused_total",
			Help: "Billing webhooks refused because the PaymentIntent is not one the service created for the period (reason: account, amount, currency, payment_intent, period).",
		}, []string{"reason"}),
		UnknownOutcomesTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stripe_payments_billing_unknown_outcomes_total",
			Help: "Billing charges that got no trustworthy answer from Stripe (timeout, 5xx).",
		}),
		ResolvedOutcomesTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stripe_payments_billing_resolved_outcomes_total",
			Help: "Unknown charge outcomes settled by asking Stripe for the PaymentIntent (result: succeeded, processing, declined, not_found).",
		}, []string{"result"}),
		Unresolved: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stripe_payments_billing_unresolved_periods",
			Help: "Billing periods the last collection run left with an attempt whose outcome is unknown: alert when > 0.",
		}),
		DuplicateRefunds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stripe_payments_billing_duplicate_refunds_total",
			Help: "Successes refunded automatically because their period already had one, or had ended WAIVED or CANCELLED (history cause duplicate-refunded).",
		}),
	}
	b.DeclinesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stripe_payments_billing_declines_total",
		Help: "Billing charges declined, by class: hard (a code retrying cannot fix, BILLING_HARD_DECLINE_CODES: not retried) or soft (retried on the retry days).",
	}, []string{"class"})
	reg.MustRegister(b.FeedRefusedTotal, b.UnknownOutcomesTotal, b.ResolvedOutcomesTotal, b.Unresolved, b.DuplicateRefunds, b.DeclinesTotal)
	b.PlanChangesTotal = newPlanChanges(reg)
	return b
}

// FeedRefused implements billing.Observer.
func (b *Billing) FeedRefused(reason string) { b.FeedRefusedTotal.WithLabelValues(reason).Inc() }

// OutcomeUnknown implements billing.Observer.
func (b *Billing) OutcomeUnknown() { b.UnknownOutcomesTotal.Inc() }

// OutcomeResolved implements billing.Observer.
func (b *Billing) OutcomeResolved(result string) {
	b.ResolvedOutcomesTotal.WithLabelValues(result).Inc()
}

// UnresolvedPeriods implements billing.Observer.
func (b *Billing) UnresolvedPeriods(n int) { b.Unresolved.Set(float64(n)) }

// DuplicateRefunded implements billing.DuplicateObserver.
func (b *Billing) DuplicateRefunded() { b.DuplicateRefunds.Inc() }

// Declined implements billing.DeclineObserver.
func (b *Billing) Declined(class string) { b.DeclinesTotal.WithLabelValues(class).Inc() }
