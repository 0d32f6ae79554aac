// Package actions carries side effects ("fulfil this purchase", "run the
// unsubscribe actions") to the platform: they are enqueued to the outbox in
// the transaction that causes them (Enqueue), on the one topic of actions
// (Topic), and package dispatch POSTs each one, signed, to ACTIONS_URL until
// it is acknowledged. The JSON shape is DESIGN §6's contract.
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

// Action types (DESIGN §6).
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
}

// DedupeKey names one effect: "<type>:<subject>", e.g.
// "purchase.fulfilled:<purchase id>". One effect yields one action however
// often (or concurrently) it is caused.
func DedupeKey(actionType, subject string) string { return actionType + ":" + subject }

// Enqueue writes a in tx with the given dedupe key, filling in ID and
// Created. It reports whether a new action was written (false: this effect
// already has its action, which keeps its original id).
func Enqueue(ctx context.Context, tx pgtx.Tx, a Action, dedupeKey string, now time.Time) (bool, error) {
	a.ID = uuid.New()
	now = now.UTC()
	a.Created = now.Format(time.RFC3339)
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
