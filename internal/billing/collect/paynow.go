package collect

import (
	"context"
	"errors"
	"fmt"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/lock"
)

// Pay now errors (the API answers 409 for both).
var (
	// ErrNothingToPay: the subscription has no unpaid ERROR period.
	ErrNothingToPay = apperr.New(apperr.CodeConflict, "no unpaid ERROR period to pay")
	// ErrAttemptInFlight: a period of the subscription has a collection
	// attempt whose outcome is not recorded yet.
	ErrAttemptInFlight = apperr.New(apperr.CodeConflict, "a payment attempt is in flight; retry after the next collection run")
)

// PayNow charges the subscription's oldest ERROR period at once (docs/design.md §4
// "pay now", process MANUAL_REPAYMENT) and returns the subscription as it
// is afterwards. See Pay.
func (c *Collector) PayNow(ctx context.Context, account, subID string) (model.Subscription, error) {
	sub, _, err := c.Pay(ctx, account, subID)
	return sub, err
}

// Pay charges the subscription's oldest ERROR period at once, exactly as
// a collection job would: under the account's lock (ErrLocked when a job
// holds it), with the claim, the attempt's idempotency key (attempt n+1 of
// the period), the history entry, the receipt and the action. It returns
// the subscription and the period as they are afterwards; a declined pay now
// leaves the period ERROR (its retries go on). ErrNothingToPay when there is
// no ERROR period, ErrAttemptInFlight when an attempt of the subscription
// is in flight (its outcome must be known first). A charge without a
// trustworthy answer returns the error and leaves the attempt in flight:
// the collection job resolves it.
func (c *Collector) Pay(ctx context.Context, account, subID string) (model.Subscription, model.Period, error) {
	if c.Charger == nil {
		return model.Subscription{}, model.Period{}, errors.New("pay now: no Stripe charger configured")
	}
	var (
		outSub model.Subscription
		outP   model.Period
	)
	err := c.WithLock(ctx, account, func(ctx context.Context, l *lock.Lock) error {
		sub, err := c.Store.GetSubscription(ctx, account, subID)
		if err != nil {
			return err
		}
		c, err := c.forSub(ctx, sub) // its test clock's "today", if it has one
		if err != nil {
			return err
		}
		periods, err := c.Store.ListPeriods(ctx, account, subID)
		if err != nil {
			return err
		}
		var due *model.Period
		for i := range periods { // oldest first
			if periods[i].InFlightKey != "" {
				return fmt.Errorf("period %s: %w", periods[i].BillingDate, ErrAttemptInFlight)
			}
			if due == nil && periods[i].Status == model.Error {
				due = &periods[i]
			}
		}
		if due == nil {
			return ErrNothingToPay
		}
		if sub.Status == model.SubCancelled {
			return apperr.Invalid("the subscription is cancelled")
		}
		rep := &model.Report{Job: "pay"}
		next, _, err := c.attempt(ctx, l, sub, *due, model.ProcManualRepayment, c.Today(sub), rep)
		if err != nil {
			return err
		}
		if rep.Skipped > 0 {
			return fmt.Errorf("pay now: the subscription changed meanwhile: %w", model.ErrConflict)
		}
		p, err := c.Store.GetPeriod(ctx, account, subID, due.BillingDate)
		if err != nil {
			return err
		}
		outSub, outP = next, p
		if fresh, err := c.Store.GetSubscription(ctx, account, subID); err == nil {
			outSub = fresh
		}
		return nil
	})
	return outSub, outP, err
}
