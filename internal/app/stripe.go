package app

import (
	"github.com/stripe-payments/stripe-payments/internal/metrics"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/stripeclient"
)

// newStripe builds the shared Stripe budget and the API client drawing on
// it: every Stripe request of this replica draws on the one budget
// (docs/design.md §9); a request names its class in its context, else it
// is the client's.
func (a *App) newStripe() error {
	cfg := a.Config
	budget, err := stripebudget.New(stripebudget.PGStore{Pool: a.Pool}, stripebudget.Config{
		Rate: cfg.Billing.StripeRateLimit, Replicas: cfg.Billing.StripeExpectedReplicas,
		Log: a.log, Observer: metrics.NewStripeBudget(a.Metrics.Registry), Safe: a.safe})
	if err != nil {
		return err
	}
	a.stripeBudget = budget
	a.stripe = stripeclient.New(stripeclient.Options{APIKey: cfg.StripeAPIKey, BaseURL: cfg.StripeAPIBase, Log: a.log,
		HTTPClient: budget.Client(nil, stripebudget.Hydration)})
	return nil
}
