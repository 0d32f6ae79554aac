package model

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// IdempotencyKey of attempt n on a period: the same attempt always sends
// the same key, so a rerun after a crash gets the same PaymentIntent back.
// The attempt number is part of it because Stripe replays a declined
// request's answer for its key: a retry on a later day is a new attempt.
func IdempotencyKey(p Period, n int) string {
	k := fmt.Sprintf("billing:%s:%s:%s:%d", p.AccountID, p.SubscriptionID, p.BillingDate, n)
	if len(k) > 255 {
		sum := sha256.Sum256([]byte(k))
		k = "billing:" + hex.EncodeToString(sum[:])
	}
	return k
}

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

// Payable reports whether p may have a PaymentIntent a customer can still
// pay: its latest attempt's, when that did not move money.
func Payable(p Period) bool {
	if p.TransactionID == "" || p.InFlightKey != "" {
		return false
	}
	switch p.Status {
	case Error, Waived, Cancelled, Scheduled:
		return true
	}
	return false
}
