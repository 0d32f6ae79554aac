package stripecharge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v76"
)

// Cancel cancels a PaymentIntent of a billing period that can still be
// paid (requires_payment_method, requires_confirmation, requires_action),
// with the idempotency key the core derives from it (docs/design.md §8 "One
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
	var pi *stripe.PaymentIntent
	err := c.retry429(ctx, func() (err error) {
		pi, err = c.api.PaymentIntents.Cancel(id, p)
		return err
	})
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
	var r *stripe.Refund
	err := c.retry429(ctx, func() (err error) {
		r, err = c.api.Refunds.New(p)
		return err
	})
	if err == nil {
		return r.ID, nil
	}
	var se *stripe.Error
	if errors.As(err, &se) && se.Code == stripe.ErrorCodeChargeAlreadyRefunded {
		return "already-refunded", nil
	}
	return "", fmt.Errorf("refund payment intent %s: %w", paymentIntent, err)
}

// retry429 makes one request through the token bucket, and again with the
// same parameters (the same idempotency key) after a 429, which Stripe does
// not execute, as Charge does.
func (c *Charger) retry429(ctx context.Context, call func() error) error {
	for attempt := 0; ; attempt++ {
		if err := c.limiter.Wait(ctx); err != nil {
			return fmt.Errorf("rate limiter: %w", err)
		}
		c.requests.Add(1)
		err := call()
		var se *stripe.Error
		if err == nil || !errors.As(err, &se) || se.HTTPStatusCode != http.StatusTooManyRequests {
			return err
		}
		c.rateLimited.Add(1)
		if attempt >= c.opts.MaxRateLimitRetries {
			return fmt.Errorf("rate limited %d times: %w", attempt+1, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(c.opts.Backoff(attempt + 1)):
		}
	}
}
