package billing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
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

// UpdatedEventDuplicateRefunded is the history cause of an automatic
// refund of a second success.
const UpdatedEventDuplicateRefunded = "duplicate-refunded"

// CancelKey is the idempotency key of the cancel of PaymentIntent pi.
func CancelKey(pi string) string { return derivedKey("billing-cancel:", pi) }

// RefundKey is the idempotency key of the refund of PaymentIntent pi: one
// refund per PaymentIntent, whichever replica or redelivery asks.
func RefundKey(pi string) string { return derivedKey("billing-refund:", pi) }

func derivedKey(prefix, pi string) string {
	k := prefix + pi
	if len(k) > 255 {
		sum := sha256.Sum256([]byte(pi))
		k = prefix + hex.EncodeToString(sum[:])
	}
	return k
}

// DuplicateObserver is an Observer that also counts automatic refunds of
// duplicate successes (stripe_payments_billing_duplicate_refunds_total).
type DuplicateObserver interface {
	DuplicateRefunded()
}

// payable reports whether p may have a PaymentIntent a customer can still
// pay: its latest attempt's, when that did not move money.
func payable(p Period) bool {
	if p.TransactionID == "" || p.InFlightKey != "" {
		return false
	}
	switch p.Status {
	case Error, Waived, Cancelled, Scheduled:
		return true
	}
	return false
}

// cancelPayable cancels p's PaymentIntent that can still be paid. paid is
// the PaymentIntent as read when the customer paid it before the cancel
// (succeeded, or processing: a bank debit): the caller applies it and
// charges nothing. The error is non-nil when Stripe could not be asked:
// nothing may be charged then.
func (s *Service) cancelPayable(ctx context.Context, p Period) (paid *stripe.PaymentIntent, err error) {
	if !payable(p) || s.charger == nil {
		return nil, nil
	}
	pi, err := s.charger.Cancel(ctx, p.PaymentDetails.StripeAccount, p.TransactionID, CancelKey(p.TransactionID))
	if err != nil {
		return nil, fmt.Errorf("cancel the period's payable PaymentIntent %s: %w", p.TransactionID, err)
	}
	switch pi.Status {
	case stripe.PaymentIntentStatusSucceeded, stripe.PaymentIntentStatusProcessing:
		s.log.Warn("billing: the customer paid the period's earlier PaymentIntent before it was cancelled; applying it",
			"account", p.AccountID, "subscription_id", p.SubscriptionID, "billing_date", p.BillingDate.String(),
			"payment_intent", pi.ID, "status", string(pi.Status))
		return pi, nil
	}
	return nil, nil
}

// applyPaid applies a PaymentIntent of p the customer paid, read from
// Stripe, exactly as its webhook would (the webhook that follows changes
// nothing more). The account's lock is held.
func (s *Service) applyPaid(ctx context.Context, p Period, pi *stripe.PaymentIntent) error {
	typ := "payment_intent.succeeded"
	if pi.Status == stripe.PaymentIntentStatusProcessing {
		typ = "payment_intent.processing"
	}
	msg := FeedMessage{EventID: "read:" + pi.ID + ":" + string(pi.Status), Type: typ, Created: s.now().Unix(),
		PaymentIntent: pi.ID, Account: p.AccountID, Subscription: p.SubscriptionID, BillingDate: p.BillingDate.String(),
		V: 2, StripeAccount: p.PaymentDetails.StripeAccount, Amount: pi.Amount, Currency: string(pi.Currency),
		Attempt: pi.Metadata[MetaAttempt], SKU: pi.Metadata[MetaSKU]}
	return s.applyFeed(ctx, msg, p.BillingDate)
}

// cancelChanged cancels, after a change was written, the payable
// PaymentIntents of the periods it waived, cancelled, or gave a new amount
// or payment method (before: the periods as they were). A cancel Stripe
// does not answer is logged and left: the next attempt cancels first (and
// charges nothing until it could), and a success that still arrives for a
// WAIVED or CANCELLED period is refunded. The account's lock is held; changed
// says whether a payment the cancel found was applied.
func (s *Service) cancelChanged(ctx context.Context, before, after []Period) (changed bool) {
	was := make(map[dates.Date]Period, len(before))
	for _, p := range before {
		was[p.BillingDate] = p
	}
	for _, q := range after {
		b, ok := was[q.BillingDate]
		if !ok || !payable(q) {
			continue
		}
		if b.Status == q.Status && b.Amount == q.Amount && b.Currency == q.Currency && b.SKU == q.SKU &&
			b.PaymentDetails.PaymentMethod == q.PaymentDetails.PaymentMethod {
			continue
		}
		log := s.log.With("account", q.AccountID, "subscription_id", q.SubscriptionID, "billing_date", q.BillingDate.String(),
			"payment_intent", q.TransactionID)
		paid, err := s.cancelPayable(ctx, q)
		if err != nil {
			log.Warn("billing: could not cancel the payable PaymentIntent of a changed period; the next attempt cancels it first", "error", err)
			continue
		}
		if paid != nil {
			if err := s.applyPaid(ctx, q, paid); err != nil {
				log.Warn("billing: could not apply the payment the cancel found; its webhook applies it", "error", err)
				continue
			}
			changed = true
		}
	}
	return changed
}

// refundDuplicate refunds a success that arrived for a period that already
// has one, or ended WAIVED or CANCELLED: once per PaymentIntent (its
// PaymentRef records the refund; the idempotency key is derived from the
// PaymentIntent), with a history entry. apply is false when it was refunded
// already (a redelivery, another replica).
func (s *Service) refundDuplicate(ctx context.Context, c *feedChange) (apply bool, err error) {
	p, pi := &c.p, c.pi
	if c.ref != nil && c.ref.RefundID != "" {
		return false, nil
	}
	if s.charger == nil {
		return false, fmt.Errorf("refund duplicate %s: no Stripe charger configured", pi)
	}
	c.log.Error("billing feed: a second successful charge for one period (or one that ended "+string(p.Status)+"); refunding it",
		"recorded_payment_intent", p.TransactionID, "status", string(p.Status))
	id, err := s.charger.Refund(ctx, p.PaymentDetails.StripeAccount, pi, RefundKey(pi))
	if err != nil {
		return false, fmt.Errorf("refund duplicate %s: %w", pi, err)
	}
	ref := PaymentRef{PaymentIntent: pi, AccountID: p.AccountID, SubscriptionID: p.SubscriptionID, BillingDate: p.BillingDate,
		Amount: c.msg.Amount, Currency: c.msg.Currency, RefundID: id}
	c.tx.PutPaymentRef(ref)
	p.UpdatedEvent, p.Process = UpdatedEventDuplicateRefunded, ProcWebhook
	p.Error = fmt.Sprintf("second successful charge %s (%d %s) refunded: %s", pi, c.msg.Amount, c.msg.Currency, id)
	c.tx.PutPeriod(p, false)
	c.refunded = true
	return true, nil
}

// lateAmount sets p's amount to what the PaymentIntent that paid it
// charged (an earlier attempt's, when the amount changed since).
func lateAmount(p *Period, amount int64, currency string) {
	if amount > 0 && currency != "" {
		p.Amount, p.Currency = amount, currency
	}
}

// latePlan sets p's SKU to the plan the PaymentIntent that paid it was
// made for (an earlier attempt's, when the plan changed since), so its
// receipt and action name what was paid for. "" (a PaymentIntent of an
// older version, without it) keeps p's.
func latePlan(p *Period, sku string) {
	if sku != "" {
		p.SKU = sku
	}
}
