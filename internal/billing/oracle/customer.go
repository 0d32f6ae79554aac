package oracle

import "fmt"

// docs/design.md §8 "One successful charge per period, also when the customer pays
// an old PaymentIntent". A declined charge leaves a PaymentIntent the
// customer may still pay, on-session, at any time; the rules decide what
// such a payment does:
//
//   - before a new attempt on a period, and when a period is waived or
//     cancelled or its amount changes, the period's earlier PaymentIntents
//     that can still be paid are cancelled: the customer can no longer pay
//     them (Stripe refuses);
//   - a payment of a payable PaymentIntent of a period not collected
//     (SCHEDULED, ERROR, ACHSENT, or STALE: a late payment) collects it:
//     COMPLETED, with a receipt for the amount of the attempt that made
//     the PaymentIntent (not the period's amount today);
//   - a payment for a period that already has a successful charge, or that
//     ended WAIVED or CANCELLED, is refunded (once) and changes nothing
//     else.

// PayResult is what a customer's payment of an old PaymentIntent did.
type PayResult int

const (
	// PayCollected: the payment collected its period.
	PayCollected PayResult = iota + 1
	// PayRefunded: the period had a successful charge or had ended WAIVED
	// or CANCELLED: the payment is refunded.
	PayRefunded
)

// payable reports whether the customer can still pay attempt a.
func (a *Attempt) payable() bool {
	return (a.Outcome == Declined || a.Outcome == HardDeclined) && !a.Unresolved && !a.Cancelled && !a.Paid
}

// cancelPayable cancels p's PaymentIntents that can still be paid.
func (p *Period) cancelPayable() {
	for i := range p.Attempts {
		if p.Attempts[i].payable() {
			p.Attempts[i].Cancelled = true
		}
	}
}

// Payable reports whether the customer can pay PaymentIntent pi now.
func (s *outcomes) Payable(pi string) bool {
	_, a := s.attempt(pi)
	return a != nil && a.payable()
}

// CustomerPays is the customer paying PaymentIntent pi on day: ErrRefused
// when it cannot be paid (cancelled by the rules, or not a declined
// attempt's).
func (s *outcomes) CustomerPays(day Date, pi string) (PayResult, error) {
	p, a := s.attempt(pi)
	if p == nil || !a.payable() {
		return 0, fmt.Errorf("%w: %s cannot be paid", ErrRefused, pi)
	}
	a.Paid = true
	switch p.Status {
	case Completed, Refunded, Waived, Cancelled, PausedSkipped:
		s.refunds = append(s.refunds, pi)
		return PayRefunded, nil
	}
	a.Outcome = Succeeded
	s.succeed(p, *a, day)
	return PayCollected, nil
}

// DuplicateRefunds are the PaymentIntents refunded because their period
// had a successful charge already or had ended WAIVED or CANCELLED.
func (s *Sub) DuplicateRefunds() []string { return s.refunds }
