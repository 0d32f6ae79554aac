package billing

import (
	"context"
	"log/slog"
)

// chargeMethod asks Stripe how PaymentIntent pi on account was paid (its
// latest charge's payment_method_details), for the receipt of a success a
// webhook reports (its event carries the charge's id only). Best effort:
// when Stripe cannot be asked the receipt is written without it (docs/design.md §4:
// "when it says"), never held back.
func (s *Service) chargeMethod(ctx context.Context, account, pi string, log *slog.Logger) PaymentMethodUsed {
	if s.charger == nil {
		return PaymentMethodUsed{}
	}
	got, err := s.charger.Retrieve(ctx, account, pi)
	if err != nil {
		log.Warn("billing feed: could not read how the payment was paid; its receipt says nothing of it", "error", err)
		return PaymentMethodUsed{}
	}
	return MethodOf(got)
}
