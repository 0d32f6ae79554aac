package outcome

import (
	"context"
	"errors"
	"fmt"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/billing/settle"
	"github.com/stripe/stripe-go/v76"
)

// One successful charge per period, also when the customer pays an old
// PaymentIntent (docs/design.md §8). A declined attempt leaves a PaymentIntent the
// customer may still pay on-session at any time (Stripe's hosted pages,
// 3-D Secure). So:
//   - before a new attempt on a period, and when a period is waived or
//     cancelled or its amount or payment method changes, the period's
//     PaymentIntent that can still be paid (its latest declined attempt's;
//     each attempt cancels the one before it) is cancelled at Stripe,
//     idempotency-keyed. A cancel refused because the customer has just
//     paid is resolved by reading the PaymentIntent and applying what it
//     says as its webhook would: never by charging again;
//   - a success that still arrives for a period that already has one, or
//     that ended WAIVED or CANCELLED, is refunded (one refund per
//     PaymentIntent, idempotency-keyed, recorded on its PaymentRef),
//     recorded in the history as duplicate-refunded and counted; a success
//     for a STALE period completes it (a late payment, with its receipt).

// CancelPayable cancels p's PaymentIntent that can still be paid. paid is
// the PaymentIntent as read when the customer paid it before the cancel
// (succeeded, or processing: a bank debit): the caller applies it and
// charges nothing. The error is non-nil when Stripe could not be asked:
// nothing may be charged then.
func (r *Recorder) CancelPayable(ctx context.Context, p model.Period) (paid *stripe.PaymentIntent, err error) {
	if !model.Payable(p) || r.Charger == nil {
		return nil, nil
	}
	pi, err := r.Charger.Cancel(ctx, p.PaymentDetails.StripeAccount, p.TransactionID, model.CancelKey(p.TransactionID))
	if err != nil {
		return nil, fmt.Errorf("cancel the period's payable PaymentIntent %s: %w", p.TransactionID, err)
	}
	switch pi.Status {
	case stripe.PaymentIntentStatusSucceeded, stripe.PaymentIntentStatusProcessing:
		r.Log.Warn("billing: the customer paid the period's earlier PaymentIntent before it was cancelled; applying it",
			"account", p.AccountID, "subscription_id", p.SubscriptionID, "billing_date", p.BillingDate.String(),
			"payment_intent", pi.ID, "status", string(pi.Status))
		return pi, nil
	}
	return nil, nil
}

// ApplyPaid settles p with a PaymentIntent of its own the customer paid
// (succeeded, or processing: a bank debit), as read from Stripe; its
// webhook, when it comes, changes nothing more. The account's lock is
// held.
func (r *Recorder) ApplyPaid(ctx context.Context, p model.Period, pi *stripe.PaymentIntent) error {
	p, err := r.Store.GetPeriod(ctx, p.AccountID, p.SubscriptionID, p.BillingDate) // as it is now
	if err != nil {
		return err
	}
	sub, err := r.Store.GetSubscription(ctx, p.AccountID, p.SubscriptionID)
	if err != nil {
		return err
	}
	r, err = r.forSub(ctx, sub) // its test clock's "today", if it has one
	if err != nil {
		return err
	}
	h := settle.HappenedSucceeded
	if pi.Status == stripe.PaymentIntentStatusProcessing {
		h = settle.HappenedProcessing
	}
	in := r.Input(sub, p, h, pi.ID, model.FeedProcess(p), r.Today(sub))
	// pi is the period's latest attempt's (cancelPayable cancels no other).
	in.Known, in.Amount, in.Currency, in.SKU = true, pi.Amount, string(pi.Currency), pi.Metadata[model.MetaSKU]
	if ref, err := r.Store.GetPaymentRef(ctx, pi.ID); err == nil && ref.Of(p) {
		in.RefAmount, in.RefCurrency, in.RefundedAlready = ref.Amount, ref.Currency, ref.RefundID != ""
	} else if err != nil && !errors.Is(err, apperr.ErrNotFound) {
		return err
	}
	log := r.Log.With("payment_intent", pi.ID, "account", p.AccountID, "subscription_id", p.SubscriptionID,
		"billing_date", p.BillingDate.String())
	return r.Apply(ctx, log, sub, in, "evt:read:"+pi.ID+":"+string(pi.Status))
}

// CancelChanged cancels, after a change was written, the payable
// PaymentIntents of the periods it waived, cancelled, or gave a new amount
// or payment method (before: the periods as they were). A cancel Stripe
// does not answer is logged and left: the next attempt cancels first (and
// charges nothing until it could), and a success that still arrives for a
// WAIVED or CANCELLED period is refunded. The account's lock is held; changed
// says whether a payment the cancel found was applied.
func (r *Recorder) CancelChanged(ctx context.Context, before, after []model.Period) (changed bool) {
	was := make(map[dates.Date]model.Period, len(before))
	for _, p := range before {
		was[p.BillingDate] = p
	}
	for _, q := range after {
		b, ok := was[q.BillingDate]
		if !ok || !model.Payable(q) {
			continue
		}
		if b.Status == q.Status && b.Amount == q.Amount && b.Currency == q.Currency && b.SKU == q.SKU &&
			b.PaymentDetails.PaymentMethod == q.PaymentDetails.PaymentMethod {
			continue
		}
		log := r.Log.With("account", q.AccountID, "subscription_id", q.SubscriptionID, "billing_date", q.BillingDate.String(),
			"payment_intent", q.TransactionID)
		paid, err := r.CancelPayable(ctx, q)
		if err != nil {
			log.Warn("billing: could not cancel the payable PaymentIntent of a changed period; the next attempt cancels it first", "error", err)
			continue
		}
		if paid != nil {
			if err := r.ApplyPaid(ctx, q, paid); err != nil {
				log.Warn("billing: could not apply the payment the cancel found; its webhook applies it", "error", err)
				continue
			}
			changed = true
		}
	}
	return changed
}
