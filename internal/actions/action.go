// Package actions carries side effects ("fulfil this purchase", "run the
// unsubscribe actions", "a billing payment completed") to the platform: they
// are enqueued to the outbox in the transaction that causes them (Enqueue,
// the one way every side effect leaves, tracking's and billing's alike), on
// the one topic of actions (Topic), and package dispatch POSTs each one,
// signed, to ACTIONS_URL until it is acknowledged. The JSON shape is docs/design.md
// §6's contract; billing actions add their BillingDetails after it.
package actions

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/pgtx"
)

// Topic is the outbox topic of every action.
const Topic = "action"

// Action types of purchases and subscriptions (docs/design.md §6); billing's are in
// package billing, beside the code that emits them.
const (
	TypePurchaseFulfilled      = "purchase.fulfilled"
	TypeSubscriptionTerminated = "subscription.terminated"
)

// Action is the JSON body delivered to ACTIONS_URL. ID is the outbox message
// id: it never changes across retries, so receivers deduplicate on it (it is
// also sent as Idempotency-Key).
type Action struct {
	ID             uuid.UUID `json:"id"`
	Type           string    `json:"type"`
	Account        string    `json:"account"`
	StripeAccount  string    `json:"stripe_account"`
	PurchaseID     *string   `json:"purchase_id"`
	SubscriptionID *string   `json:"subscription_id"`
	// Created is when the effect was decided, RFC 3339 UTC.
	Created string `json:"created"`
	// BillingDetails is set on the billing core's actions only (nil on
	// the others, which then carry no more than the fields above): its
	// fields follow the docs/design.md §6 ones in the JSON, as if declared here.
	*BillingDetails
}

// BillingDetails is what a consumer needs to act on a billing action (send
// the email, update a ledger).
type BillingDetails struct {
	SKU string `json:"sku"`
	// Email is the subscriber's address, for the reminder email written
	// beside the action (package notify). It is never in the action's
	// JSON: action payloads, their dead letters and ACTIONS_URL carry no
	// email, so personal data stays where it can be erased; a consumer
	// reads it from the internal API.
	Email         string `json:"-"`
	BillingDate   string `json:"billing_date"`
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	PaymentIntent string `json:"payment_intent,omitempty"`
	Attempt       int    `json:"attempt,omitempty"`
	Error         string `json:"error,omitempty"`
	// DeclineCode is Stripe's code of a failed payment; NotRetried: it is
	// one retrying cannot fix (docs/design.md §8), so no automatic retry follows.
	DeclineCode string `json:"decline_code,omitempty"`
	NotRetried  bool   `json:"not_retried,omitempty"`
	// PaymentMethodType and PaymentMethodLast4: how a completed payment
	// was paid (card, us_bank_account, …), when Stripe said.
	PaymentMethodType  string `json:"payment_method_type,omitempty"`
	PaymentMethodLast4 string `json:"payment_method_last4,omitempty"`
	// Period is the scheduled date of the period a reminder announces when
	// it differs from BillingDate, its charge date (a moved period): two
	// periods charged on one date each get their reminder (docs/design.md §8,
	// finding F16). It names the effect in billing's dedupe key and is not
	// sent.
	Period string `json:"-"`
}

// DedupeKey names one effect: "<type>:<subject>", e.g.
// "purchase.fulfilled:<purchase id>". One effect yields one action however
// often (or concurrently) it is caused.
func DedupeKey(actionType, subject string) string { return actionType + ":" + subject }

// Enqueue writes a in tx with the given dedupe key, filling in ID, and
// Created unless the cause dated the effect itself (billing's jobs date it on
// their own clock, a test clock's included); now dates the outbox message,
// which is deliverable from then on. It reports whether a new action was
// written (false: this effect already has its action, which keeps its
// original id).
func Enqueue(ctx context.Context, tx pgtx.Tx, a Action, dedupeKey string, now time.Time) (bool, error) {
	a.ID = uuid.New()
	now = now.UTC()
	if a.Created == "" {
		a.Created = now.Format(time.RFC3339)
	}
	payload, err := json.Marshal(a)
	if err != nil {
		return false, fmt.Errorf("encode action: %w", err)
	}
	added, err := outbox.Enqueue(ctx, tx, outbox.Message{
		ID: a.ID, Topic: Topic, Type: a.Type, DedupeKey: dedupeKey, Payload: payload, CreatedAt: now,
	})
	if err != nil {
		return false, fmt.Errorf("enqueue action %s: %w", dedupeKey, err)
	}
	return added, nil
}
