// Package feedqueue is the webhook feed's Postgres edge: Enqueue, the
// handler's applier of feed.FeedEventTypes, puts an event about a billing
// charge on the outbox inside the event's ledger transaction, and Deliver,
// the outbox worker's delivery, hands it to the feed (feed.Feed.ApplyFeed).
// Keeping it here keeps the outbox and Postgres out of the billing core.
package feedqueue

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/billing/feed"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/pgtx"
)

// Enqueue is the handler applier of feed.FeedEventTypes: inside the event's
// ledger transaction it enqueues the event for the billing core on the
// "billing" topic (dedupe key: the event id), when the PaymentIntent is a
// billing-core charge (metadata billing_*). A full refund's charge without
// that metadata is enqueued too, for a lookup of its PaymentIntent.
// DynamoDB is never written inside the Postgres transaction: the billing
// outbox worker applies the message afterwards, idempotently.
func Enqueue(ctx context.Context, tx pgtx.Tx, ev *stripe.Event) error {
	msg, ok, err := feed.FeedFromEvent(ev)
	if err != nil || !ok {
		return err
	}
	payload, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("encode billing feed message: %w", err)
	}
	_, err = outbox.Enqueue(ctx, tx, outbox.Message{
		Topic: feed.FeedTopic, Type: msg.Type, DedupeKey: "billing:" + ev.ID, Payload: payload,
	})
	return err
}

// Applier applies one feed message (feed.Feed, and the billing service
// that embeds it).
type Applier interface {
	ApplyFeed(ctx context.Context, msg feed.FeedMessage) error
}

// Deliver is the billing outbox worker's Deliver: decode one message and
// apply it (Applier); an undecodable one is logged and dropped.
func Deliver(svc Applier, log *slog.Logger) func(ctx context.Context, m outbox.Message) error {
	return func(ctx context.Context, m outbox.Message) error {
		var msg feed.FeedMessage
		if err := json.Unmarshal(m.Payload, &msg); err != nil {
			log.Error("billing feed: undecodable message dropped", "message_id", m.ID, "error", err)
			return nil
		}
		return svc.ApplyFeed(ctx, msg)
	}
}
