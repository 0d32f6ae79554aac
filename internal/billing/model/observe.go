package model

// Observer receives the billing core's money-safety signals (the Prometheus
// collectors of internal/metrics in serve; nothing in tests by default).
type Observer interface {
	// FeedRefused: a webhook about a PaymentIntent the service did not
	// create for the period it names was refused (reason: account, amount,
	// currency, payment_intent, period).
	FeedRefused(reason string)
	// OutcomeUnknown: an attempt got no trustworthy answer from Stripe.
	OutcomeUnknown()
	// OutcomeResolved: an unknown outcome was settled by asking Stripe
	// (result: succeeded, processing, declined, not_found).
	OutcomeResolved(result string)
	// UnresolvedPeriods: after a collection run, the periods it left with
	// an attempt whose outcome is still unknown (0 when all are resolved).
	UnresolvedPeriods(n int)
}

// NopObserver observes nothing (the default).
type NopObserver struct{}

func (NopObserver) FeedRefused(string)     {}
func (NopObserver) OutcomeUnknown()        {}
func (NopObserver) OutcomeResolved(string) {}
func (NopObserver) UnresolvedPeriods(int)  {}
