package billing_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/lock"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// classCharger records the budget class each lookup was asked at.
type classCharger struct {
	billing.Charger
	mu      sync.Mutex
	classes []stripebudget.Class
}

func (c *classCharger) FindAttempt(ctx context.Context, q billing.AttemptQuery) (billing.Lookup, error) {
	c.mu.Lock()
	c.classes = append(c.classes, stripebudget.ClassOf(ctx, stripebudget.Hydration))
	c.mu.Unlock()
	return c.Charger.FindAttempt(ctx, q)
}

// inFlight charges acc-1's subscription on 2024-01-10 with Stripe acting
// as behave and answering 500: the period is left with its attempt in
// flight. It returns the service resolving through a recording charger.
func inFlight(t *testing.T, behave stripetest.Behavior) (*billingtest.Env, billing.Subscription, *billing.Service, *classCharger) {
	t.Helper()
	e := billingtest.NewEnv(t, billingtest.Options{})
	e.Stripe.Decide = billingtest.Behaviors(behave)
	e.Stripe.ActedAs = func(stripetest.PI) stripetest.Behavior { return stripetest.Decline }
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	rep := collect(t, e, "2024-01-10")
	require.Equal(t, 1, rep.Unknown)
	require.NotEmpty(t, period(t, e, sub, "2024-01-10").InFlightKey)
	cc := &classCharger{Charger: e.Charger}
	svc, err := billing.New(billingtest.TestConfig(), billing.Deps{Store: e.Store, Locks: e.Lock, Charger: cc,
		Notifier: e.Notifier, Now: e.Clock.Now})
	require.NoError(t, err)
	return e, sub, svc, cc
}

func resolveReq(p billing.Period) billing.InFlightRequest {
	return billing.InFlightRequest{Account: p.AccountID, Subscription: p.SubscriptionID, BillingDate: p.BillingDate,
		Key: p.InFlightKey, MinAge: 5 * time.Minute, Wait: time.Second}
}

// The reconciliation resolves an attempt as the collection would: under
// the account's lock, its lookups at the charges class, the history
// saying the outcome was looked up; a declined attempt is recorded ERROR
// and never retried by the reconciliation (it never charges).
func TestResolveInFlightSettlesAsTheCollectionWould(t *testing.T) {
	t.Parallel()
	e, sub, svc, cc := inFlight(t, stripetest.Acted500)
	p := period(t, e, sub, "2024-01-10")
	bg := stripebudget.WithClass(ctx, stripebudget.Background) // the reconciliation's runs

	res, err := svc.ResolveInFlight(bg, resolveReq(p))
	require.NoError(t, err)
	assert.Equal(t, billing.ResolveTooYoung, res.Outcome, "just sent: Stripe may still be working on it")
	assert.Empty(t, cc.classes, "Stripe was not asked")

	e.Clock.Advance(10 * time.Minute)
	other := lock.New(e.DB, e.Locks, lock.Options{Owner: "collection", Lease: 2 * time.Second, Heartbeat: 100 * time.Millisecond})
	held, err := other.Acquire(ctx, billing.LockKey("acc-1"), true)
	require.NoError(t, err)
	_, err = svc.ResolveInFlight(bg, resolveReq(p))
	assert.ErrorIs(t, err, billing.ErrLocked, "a collection holds the account: waited, then left to the next run")
	assert.Equal(t, p.InFlightKey, period(t, e, sub, "2024-01-10").InFlightKey, "nothing recorded")
	assert.Empty(t, cc.classes, "Stripe was not asked without the lock")
	require.NoError(t, held.Release(ctx))

	dry := resolveReq(p)
	dry.DryRun = true
	res, err = svc.ResolveInFlight(bg, dry)
	require.NoError(t, err)
	assert.Equal(t, billing.ResolveLeft, res.Outcome)
	pi := e.Stripe.PIs()[0]
	assert.Equal(t, "payment_intent "+pi.ID+" declined (insufficient_funds)", res.Stripe)
	assert.Equal(t, p.Version, period(t, e, sub, "2024-01-10").Version, "a dry run writes nothing")

	res, err = svc.ResolveInFlight(bg, resolveReq(p))
	require.NoError(t, err)
	assert.Equal(t, billing.ResolveSettled, res.Outcome)
	assert.Equal(t, 1, res.Attempt)
	assert.Equal(t, "settled as ERROR from "+pi.ID, res.Action)
	got := period(t, e, sub, "2024-01-10")
	assert.Equal(t, billing.Error, got.Status)
	assert.Empty(t, got.InFlightKey)
	assert.Equal(t, pi.ID, got.TransactionID)
	assert.Equal(t, 1, got.Attempts)
	assert.Len(t, e.Stripe.PIs(), 1, "no retry charged by the reconciliation")
	for _, c := range cc.classes {
		assert.Equal(t, stripebudget.Charges, c, "the collection's class")
	}
	hist, err := e.Store.AllHistory(ctx, "acc-1", sub.SubscriptionID)
	require.NoError(t, err)
	var causes []string
	for _, h := range hist {
		if h.BillingDate.String() == "2024-01-10" && h.Status == billing.Error {
			causes = append(causes, h.Cause)
		}
	}
	require.Len(t, causes, 1, "%+v", hist)
	assert.True(t, strings.HasPrefix(causes[0], "resolve:"), "the history says the outcome was looked up: %s", causes[0])

	// Settled since: the same request finds nothing in flight.
	res, err = svc.ResolveInFlight(bg, resolveReq(p))
	require.NoError(t, err)
	assert.Equal(t, billing.ResolveNotInFlight, res.Outcome)
	for _, r := range e.Stripe.Requests() {
		if r.Method == http.MethodPost && r.Path == "/v1/payment_intents" {
			assert.Equal(t, p.InFlightKey, r.IdempotencyKey, "the only charge is the collection's")
		}
	}
}

// Bad input changes nothing: an unknown period, a key that is not the
// period's attempt in flight.
func TestResolveInFlightLeavesOtherAttemptsAlone(t *testing.T) {
	t.Parallel()
	e, sub, svc, cc := inFlight(t, stripetest.Fail500)
	e.Clock.Advance(time.Hour)
	p := period(t, e, sub, "2024-01-10")
	for _, tc := range []struct {
		name string
		req  func(r *billing.InFlightRequest)
	}{
		{"another attempt's key", func(r *billing.InFlightRequest) { r.Key = billing.IdempotencyKey(p, 7) }},
		{"no such period", func(r *billing.InFlightRequest) { r.BillingDate = d("2024-01-11") }},
		{"no such account", func(r *billing.InFlightRequest) { r.Account = "acc-2" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := resolveReq(p)
			tc.req(&req)
			res, err := svc.ResolveInFlight(ctx, req)
			require.NoError(t, err)
			assert.Equal(t, billing.ResolveNotInFlight, res.Outcome)
		})
	}
	assert.Empty(t, cc.classes, "Stripe was not asked")
	assert.Equal(t, p.Version, period(t, e, sub, "2024-01-10").Version)
}
