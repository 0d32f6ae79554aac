package model

// docs/design.md §8 "Declines that retrying cannot fix are not retried": when
// Stripe's decline code says the card or account will never be approved as
// it is (Config.HardDeclineCodes: lost or stolen card, closed account,
// authentication required, …), the period is ERROR with that code and gets
// no automatic retries; its next look is its stale date, when the job marks
// it STALE as any unpaid period. A pay now may still collect it, and a
// payment method change makes it due at the next collection run (internal/billing/lifecycle).
// Card networks penalise retries of such declines.

// HardCodes is the set of codes.
func HardCodes(codes []string) map[string]bool {
	m := make(map[string]bool, len(codes))
	for _, c := range codes {
		m[c] = true
	}
	return m
}

// DeclineObserver is an Observer that also counts declines by class
// (stripe_payments_billing_declines_total{class="hard"|"soft"}).
type DeclineObserver interface {
	Declined(class string)
}

// DeclineClass names a decline's class in the metrics.
func DeclineClass(hard bool) string {
	if hard {
		return "hard"
	}
	return "soft"
}
