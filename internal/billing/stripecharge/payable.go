package stripecharge

import (
	"context"
	"errors"
	"fmt"

	"github.com/stripe/stripe-go/v76"
)

// Cancel cancels a PaymentIntent of a billing period that can still be
// paid (requires_payment_method, requires_confirmation, requires_action),
// with the idempotency key the core derives from it (DESIGN §8 "One
// successful charge per period"). When Stripe refuses because of the
// PaymentIntent's state (the customer paid it just now, or it is cancelled
// already) the PaymentIntent is read and returned as it is: the caller
// learns what happened from it and never charges again because of it. The
// error is non-nil when Stripe could not be asked (nothing is known then).
func (c *Charger) Cancel(ctx context.Context, account, id, idempotencyKey string) (*stripe.PaymentIntent, error) {
	p := &stripe.PaymentIntentCancelParams{
		CancellationReason: stripe.String(string(stripe.PaymentIntentCancellationReasonAbandoned)),
	}
	p.Context = ctx
	p.SetIdempotencyKey(idempotencyKey)
	if account != "" {
		p.SetStripeAccount(account)
	}
	if err := c.limiter.Wait(ctx); err != nil {
		return nil, fmt.Errorf("rate limiter: %w", err)
	}
	c.requests.Add(1)
	pi, err := c.api.PaymentIntents.Cancel(id, p)
	if err == nil {
		return pi, nil
	}
	var se *stripe.Error
	if errors.As(err, &se) && se.Code == stripe.ErrorCodePaymentIntentUnexpectedState {
		return c.Retrieve(ctx, account, id)
	}
	return nil, fmt.Errorf("cancel payment intent %s: %w", id, err)
}

// Refund refunds a succeeded PaymentIntent in full (reason duplicate),
// with the idempotency key the core derives from it: one refund per
// PaymentIntent, however often it is asked for. It returns the refund's id;
// a PaymentIntent refunded already (past Stripe's idempotency window)
// answers "already-refunded".
func (c *Charger) Refund(ctx context.Context, account, paymentIntent, idempotencyKey string) (string, error) {
	p := &stripe.RefundParams{PaymentIntent: stripe.String(paymentIntent), Reason: stripe.String(string(stripe.RefundReasonDuplicate))}
	p.Context = ctx
	p.SetIdempotencyKey(idempotencyKey)
	if account != "" {
		p.SetStripeAccount(account)
	}
	if err := c.limiter.Wait(ctx); err != nil {
		return "", fmt.Errorf("rate limiter: %w", err)
	}
	c.requests.Add(1)
	r, err := c.api.Refunds.New(p)
	if err == nil {
		return r.ID, nil
	}
	var se *stripe.Error
	if errors.As(err, &se) && se.Code == stripe.ErrorCodeChargeAlreadyRefunded {
		return "already-refunded", nil
	}
	return "", fmt.Errorf("refund payment intent %s: %w", paymentIntent, err)
}
