// Package stripeevent is the vocabulary every part of the service shares
// about a Stripe event, with no storage behind it: how a body becomes an
// event (Parse), where a delivery comes from (Source), what handling it
// came to (Outcome, ErrUnprocessable, ErrOverloaded), and the one interface
// the webhook, the poller and the internal API hand events to (Handler).
// The events table (package events) and the handler (package handler) build
// on it; the endpoints import only this.
package stripeevent

import (
	"context"
	"errors"

	"github.com/stripe/stripe-go/v76"
)

// Handler is the one event handler (package handler), as the webhook, the
// poller's in-process replay and the replay API use it. An error means the
// event may not be processed: the caller must answer so that it is delivered
// again (5xx to Stripe).
type Handler interface {
	Handle(ctx context.Context, ev *stripe.Event, payload []byte, source Source) (Outcome, error)
}

// Source says how an event reached the handler.
type Source string

const (
	SourceWebhook Source = "webhook"
	SourcePoller  Source = "poller"
	SourceReplay  Source = "replay"
	// SourceEventBridge: an SQS message from Stripe's EventBridge partner
	// event source (package eventbridge, docs/design.md §4).
	SourceEventBridge Source = "eventbridge"
)

// Valid reports whether s is one of the known sources.
func (s Source) Valid() bool {
	return s == SourceWebhook || s == SourcePoller || s == SourceReplay || s == SourceEventBridge
}

// Outcome of handling one delivery.
type Outcome string

const (
	// Applied: the event's effects were committed by this delivery.
	Applied Outcome = "applied"
	// Completed: the effects had been committed before (a crash between
	// the commit and the record, or a concurrent delivery); the record was
	// written now.
	Completed Outcome = "completed"
	// Duplicate: already recorded as processed; nothing was done.
	Duplicate Outcome = "duplicate"
	// Ignored: livemode differs from the configured key; nothing recorded.
	Ignored Outcome = "ignored"
	// Rejected: the event's object cannot be processed (its appliers report
	// ErrUnprocessable: it does not decode, or names ids Stripe never
	// issues). Retrying cannot change that, so it is recorded as processed,
	// with the reason in last_error and no effect, and logged as an error.
	// It takes no ledger entry: once the cause is fixed, an operator replay
	// (POST /internal/v1/events/{id}/replay) applies it.
	Rejected Outcome = "rejected"
	// Failed: an error; the event is left re-drivable.
	Failed Outcome = "failed"
)

// ErrUnprocessable marks an event whose envelope is fine but whose object its
// type's handler cannot act on (it does not decode into Stripe's type, or it
// names ids Stripe never issues). Retrying cannot change that, so the handler
// records such an event as processed with no effect, and says so loudly,
// instead of failing it forever.
var ErrUnprocessable = errors.New("event object cannot be processed")

// ErrOverloaded means the ingest queue is full: the delivery was not queued,
// nothing was recorded, and the sender should come again later (the webhook
// answers 503 with Retry-After).
var ErrOverloaded = errors.New("ingest queue full")
