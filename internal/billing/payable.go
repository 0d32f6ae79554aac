package billing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
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

// applyPaid settles p with a PaymentIntent of its own the customer paid
// (succeeded, or processing: a bank debit), as read from Stripe; its
// webhook, when it comes, changes nothing more. The account's lock is
// held.
func (s *Service) applyPaid(ctx context.Context, p Period, pi *stripe.PaymentIntent) error {
	p, err := s.store.GetPeriod(ctx, p.AccountID, p.SubscriptionID, p.BillingDate) // as it is now
	if err != nil {
		return err
	}
	sub, err := s.store.GetSubscription(ctx, p.AccountID, p.SubscriptionID)
	if err != nil {
		return err
	}
	s, err = s.forSub(ctx, sub) // its test clock's "today", if it has one
	if err != nil {
		return err
	}
	h := HappenedSucceeded
	if pi.Status == stripe.PaymentIntentStatusProcessing {
		h = HappenedProcessing
	}
	in := s.settleInput(sub, p, h, pi.ID, FeedProcess(p), s.today(sub))
	// pi is the period's latest attempt's (cancelPayable cancels no other).
	in.Known, in.Amount, in.Currency, in.SKU = true, pi.Amount, string(pi.Currency), pi.Metadata[MetaSKU]
	if ref, err := s.store.GetPaymentRef(ctx, pi.ID); err == nil && ref.of(p) {
		in.RefAmount, in.RefCurrency, in.RefundedAlready = ref.Amount, ref.Currency, ref.RefundID != ""
	} else if err != nil && !errors.Is(err, apperr.ErrNotFound) {
		return err
	}
	log := s.log.With("payment_intent", pi.ID, "account", p.AccountID, "subscription_id", p.SubscriptionID,
		"billing_date", p.BillingDate.String())
	return s.applySettle(ctx, log, sub, in, "evt:read:"+pi.ID+":"+string(pi.Status))
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
