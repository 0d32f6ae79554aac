// Package stripecharge makes the billing core's requests to Stripe: the
// collection's PaymentIntents (created and confirmed off-session with the
// attempt's idempotency key) through one token bucket, and the lookups that
// settle an attempt whose outcome is unknown (lookup.go). It implements
// model.Charger over a stripe-go client (internal/stripeclient).
package stripecharge

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"
	"golang.org/x/time/rate"

	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/config"
)

// Options configure the Stripe rate limiting.
type Options struct {
	// Rate is the token bucket's requests per second (STRIPE_RATE_LIMIT),
	// Burst its size.
	Rate  float64
	Burst int
	// MaxRateLimitRetries bounds the retries of one request answered 429.
	MaxRateLimitRetries int
	// Backoff is the pause before retry n (n ≥ 1) after a 429.
	Backoff func(n int) time.Duration
}

// Charger creates the PaymentIntents of the collection job through one
// token bucket: Stripe's rate limit is the ceiling of a collection run, so
// every worker waits for a token, and a 429 (which Stripe does not execute
// and stripe-go does not retry) backs off and retries with the same
// idempotency key.
type Charger struct {
	api     *client.API
	limiter *rate.Limiter
	opts    Options

	requests    atomic.Int64
	rateLimited atomic.Int64
}

// DefaultBackoff: 250 ms doubling to 8 s, with jitter.
func DefaultBackoff(n int) time.Duration {
	d := 250 * time.Millisecond << min(n-1, 5)
	return d/2 + rand.N(d/2+1)
}

// New returns a charger over a stripe-go client (internal/stripeclient).
func New(api *client.API, opts Options) *Charger {
	if opts.Rate <= 0 {
		opts.Rate = config.DefaultStripeRateLimit
	}
	if opts.Burst <= 0 {
		opts.Burst = 1
	}
	if opts.MaxRateLimitRetries <= 0 {
		opts.MaxRateLimitRetries = 8
	}
	if opts.Backoff == nil {
		opts.Backoff = DefaultBackoff
	}
	return &Charger{api: api, limiter: rate.NewLimiter(rate.Limit(opts.Rate), opts.Burst), opts: opts}
}

// Stats are the charger's counters.
type Stats struct {
	Requests    int64
	RateLimited int64
}

// Stats returns the request and 429 counts so far.
func (c *Charger) Stats() Stats {
	return Stats{Requests: c.requests.Load(), RateLimited: c.rateLimited.Load()}
}

// Charge creates and confirms the PaymentIntent. The error is non-nil
// exactly when the outcome is Unknown.
func (c *Charger) Charge(ctx context.Context, req model.ChargeRequest) (model.ChargeResult, error) {
	for attempt := 0; ; attempt++ {
		if err := c.limiter.Wait(ctx); err != nil {
			return model.ChargeResult{}, fmt.Errorf("rate limiter: %w", err)
		}
		c.requests.Add(1)
		pi, err := c.api.PaymentIntents.New(c.params(ctx, req))
		if err == nil {
			return fromPaymentIntent(pi), nil
		}
		var se *stripe.Error
		if !errors.As(err, &se) {
			return model.ChargeResult{}, fmt.Errorf("create payment intent: %w", err)
		}
		if se.HTTPStatusCode == http.StatusTooManyRequests {
			c.rateLimited.Add(1)
			if attempt >= c.opts.MaxRateLimitRetries {
				return model.ChargeResult{}, fmt.Errorf("create payment intent: rate limited %d times: %w", attempt+1, err)
			}
			select {
			case <-ctx.Done():
				return model.ChargeResult{}, fmt.Errorf("create payment intent: %w", ctx.Err())
			case <-time.After(c.opts.Backoff(attempt + 1)):
			}
			continue
		}
		return classify(se, err)
	}
}

func (c *Charger) params(ctx context.Context, req model.ChargeRequest) *stripe.PaymentIntentParams {
	p := &stripe.PaymentIntentParams{
		Amount:        stripe.Int64(req.Amount),
		Currency:      stripe.String(req.Currency),
		Customer:      stripe.String(req.Customer),
		PaymentMethod: stripe.String(req.PaymentMethod),
		Confirm:       stripe.Bool(true),
		OffSession:    stripe.Bool(true),
		AutomaticPaymentMethods: &stripe.PaymentIntentAutomaticPaymentMethodsParams{
			Enabled: stripe.Bool(true), AllowRedirects: stripe.String("never"),
		},
	}
	if req.Description != "" {
		p.Description = stripe.String(req.Description)
	}
	// The charge's payment_method_details: how a success was paid, for
	// its receipt.
	p.AddExpand("latest_charge")
	p.Context = ctx
	p.SetIdempotencyKey(req.IdempotencyKey)
	if req.StripeAccount != "" {
		p.SetStripeAccount(req.StripeAccount)
	}
	for k, v := range req.Metadata {
		p.AddMetadata(k, v)
	}
	return p
}

// classify maps a Stripe error to an outcome: a declined card (402) or a
// refused request (4xx) is a failed attempt; anything else is unknown.
func classify(se *stripe.Error, err error) (model.ChargeResult, error) {
	msg := model.DeclineText(string(se.Code), se.Msg)
	if se.DeclineCode != "" {
		msg += " (" + string(se.DeclineCode) + ")"
	}
	res := model.ChargeResult{Outcome: model.Declined, Error: msg, DeclineCode: declineCode(string(se.DeclineCode), string(se.Code))}
	if se.PaymentIntent != nil {
		res.PaymentIntent = se.PaymentIntent.ID
		if se.PaymentIntent.Status == stripe.PaymentIntentStatusSucceeded {
			return fromPaymentIntent(se.PaymentIntent), nil
		}
	}
	switch {
	case se.HTTPStatusCode == http.StatusPaymentRequired:
		return res, nil
	case se.HTTPStatusCode >= 400 && se.HTTPStatusCode < 500 &&
		se.HTTPStatusCode != http.StatusUnauthorized && se.HTTPStatusCode != http.StatusForbidden &&
		se.HTTPStatusCode != http.StatusConflict:
		return res, nil
	}
	return model.ChargeResult{}, fmt.Errorf("create payment intent: %w", err)
}

func fromPaymentIntent(pi *stripe.PaymentIntent) model.ChargeResult {
	res := model.ChargeResult{PaymentIntent: pi.ID}
	switch pi.Status {
	case stripe.PaymentIntentStatusSucceeded:
		res.Outcome, res.Method = model.Succeeded, model.MethodOf(pi)
	case stripe.PaymentIntentStatusProcessing:
		res.Outcome = model.Processing
	default:
		res.Outcome = model.Declined
		res.Error = "payment intent " + string(pi.Status)
		if e := pi.LastPaymentError; e != nil {
			res.Error = model.DeclineText(string(e.Code), e.Msg)
			res.DeclineCode = declineCode(string(e.DeclineCode), string(e.Code))
		}
	}
	return res
}

// declineCode is the code a decline is classed by (docs/design.md §8 "Declines
// that retrying cannot fix"): Stripe's decline_code, else the error's code
// (expired_card, incorrect_number and authentication_required come as
// codes).
func declineCode(decline, code string) string {
	if decline != "" {
		return decline
	}
	return code
}
