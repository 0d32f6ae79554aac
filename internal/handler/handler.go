// Package handler is the one event handler shared by the webhook, the poller
// and replays: record the event, apply its effects once in one Postgres
// transaction, mark it processed.
package handler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/tracking"
)

// EventStore is the part of the events store the handler uses.
type EventStore interface {
	Record(ctx context.Context, r events.Record) (events.Outcome, error)
	MarkProcessed(ctx context.Context, id string) error
	MarkFailed(ctx context.Context, id string, cause error) error
}

// Ledger applies an event's effects at most once.
type Ledger interface {
	Apply(ctx context.Context, ev tracking.EventRef, effects func(ctx context.Context, tx pgx.Tx) error) (bool, error)
}

// Applier applies one event type's state transitions inside the ledger's
// transaction. It must only write through tx.
type Applier func(ctx context.Context, tx pgx.Tx, ev *stripe.Event) error

// Preparer runs before the ledger transaction opens, for work that must not
// hold a database transaction open, such as asking Stripe for what the
// payload lacks. It may enrich ev (e.g. expand a reference in ev.Data) for the
// appliers. It runs again on every delivery that reaches processing, so it must
// be side-effect free; an error fails the delivery, which is retried.
type Preparer func(ctx context.Context, ev *stripe.Event) error

// Observer is told the outcome of every Handle call (metrics).
type Observer interface {
	Handled(eventType string, outcome Outcome, elapsed time.Duration)
}

// Outcome of handling one delivery.
type Outcome string

const (
	// Applied: the event's effects were committed by this delivery.
	Applied Outcome = "applied"
	// Completed: recorded again and marked processed; the effects had
	// been committed earlier (crash between steps) or by a concurrent delivery.
	Completed Outcome = "completed"
	// Duplicate: already processed; nothing was done.
	Duplicate Outcome = "duplicate"
	// Ignored: livemode differs from the configured key; nothing recorded.
	Ignored Outcome = "ignored"
	// Failed: an error; the event is left re-drivable.
	Failed Outcome = "failed"
)

// Config of the handler.
type Config struct {
	PlatformAccount string
	EventTTL        time.Duration
	Livemode        bool
}

// Handler is the one event handler.
type Handler struct {
	cfg      Config
	store    EventStore
	ledger   Ledger
	appliers map[string]Applier
	prepare  map[string]Preparer
	observer Observer
	log      *slog.Logger
	now      func() time.Time
}

// Option customises a Handler.
type Option func(*Handler)

// WithApplier registers the applier for an event type; later registrations of
// the same type run after earlier ones, in the same transaction.
func WithApplier(eventType string, a Applier) Option {
	return func(h *Handler) {
		if prev, ok := h.appliers[eventType]; ok {
			h.appliers[eventType] = func(ctx context.Context, tx pgx.Tx, ev *stripe.Event) error {
				if err := prev(ctx, tx, ev); err != nil {
					return err
				}
				return a(ctx, tx, ev)
			}
			return
		}
		h.appliers[eventType] = a
	}
}

// WithPreparer registers the preparer of an event type (one per type; a later
// registration replaces an earlier one).
func WithPreparer(eventType string, p Preparer) Option {
	return func(h *Handler) { h.prepare[eventType] = p }
}

// WithObserver sets the outcome observer.
func WithObserver(o Observer) Option { return func(h *Handler) { h.observer = o } }

// WithClock replaces time.Now.
func WithClock(now func() time.Time) Option { return func(h *Handler) { h.now = now } }

// New returns a handler.
func New(cfg Config, store EventStore, ledger Ledger, log *slog.Logger, opts ...Option) *Handler {
	h := &Handler{cfg: cfg, store: store, ledger: ledger, appliers: map[string]Applier{}, prepare: map[string]Preparer{}, log: log, now: time.Now}
	for _, o := range opts {
		o(h)
	}
	return h
}

// Handle records and processes one verified event. payload is the event's
// raw JSON, kept so the event can be re-driven without Stripe. An error means
// the event may not be processed: the caller must answer so that it is
// delivered again (5xx to Stripe).
func (h *Handler) Handle(ctx context.Context, ev *stripe.Event, payload []byte, source events.Source) (Outcome, error) {
	start := h.now()
	outcome, err := h.handle(ctx, ev, payload, source)
	if h.observer != nil {
		h.observer.Handled(string(ev.Type), outcome, h.now().Sub(start))
	}
	return outcome, err
}

func (h *Handler) handle(ctx context.Context, ev *stripe.Event, payload []byte, source events.Source) (Outcome, error) {
	log := h.log.With("event_id", ev.ID, "event_type", string(ev.Type), "stripe_account", ev.Account, "source", string(source))
	if ev.Livemode != h.cfg.Livemode {
		log.Warn("ignoring event whose livemode does not match the configured key", "livemode", ev.Livemode)
		return Ignored, nil
	}
	rec := events.NewRecord(ev, payload, h.cfg.PlatformAccount, h.cfg.EventTTL, source, h.now())
	recorded, err := h.store.Record(ctx, rec)
	if err != nil {
		return Failed, fmt.Errorf("record event: %w", err)
	}
	if recorded == events.AlreadyProcessed {
		log.Debug("duplicate event")
		return Duplicate, nil
	}

	if prepare, ok := h.prepare[string(ev.Type)]; ok {
		if err := prepare(ctx, ev); err != nil {
			err = fmt.Errorf("prepare event: %w", err)
			h.markFailed(ctx, log, ev.ID, err)
			return Failed, err
		}
	}
	ref := tracking.EventRef{ID: ev.ID, Type: string(ev.Type), StripeAccount: rec.StripeAccount, Created: rec.Created}
	applied, err := h.ledger.Apply(ctx, ref, func(ctx context.Context, tx pgx.Tx) error {
		if apply, ok := h.appliers[string(ev.Type)]; ok {
			return apply(ctx, tx, ev)
		}
		return nil
	})
	if err != nil {
		h.markFailed(ctx, log, ev.ID, err)
		return Failed, fmt.Errorf("process event: %w", err)
	}
	if err := h.store.MarkProcessed(ctx, ev.ID); err != nil {
		// The effects are committed; a redelivery finds the ledger entry and
		// only repeats this step.
		return Failed, fmt.Errorf("mark processed: %w", err)
	}
	if applied {
		log.Info("event processed")
		return Applied, nil
	}
	log.Info("event completed; effects were already applied")
	return Completed, nil
}

// markFailed records the error on the event, on a fresh context so that a
// cancelled request still leaves a trace. Failing to do so is only logged:
// the event stays `received`, which the poller re-drives all the same.
func (h *Handler) markFailed(ctx context.Context, log *slog.Logger, id string, cause error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	log.Error("event processing failed", "error", cause)
	if err := h.store.MarkFailed(ctx, id, cause); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("could not mark event failed", "error", err)
	}
}
