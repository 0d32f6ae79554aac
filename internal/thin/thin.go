// Package thin takes in Stripe's thin events (docs/design.md §4): the
// intake records a verified notification durably (the events table, status
// received, payload_kind thin, and the hydration queue in Postgres) and
// answers at once; the hydrator then fetches the event from Stripe within
// the API budget and processes it:
//
//   - a v1.* type names its snapshot event (`snapshot_event`), which is
//     fetched (GET /v1/events/{id} on the event's account) and handed to the
//     one handler keyed by the snapshot's own id, so a change delivered both
//     as a snapshot and as a thin event applies once;
//   - v2.core.account.created|updated|closed and v2.core.account[...].updated
//     keep the registry of connected accounts the poller walks;
//   - v2.core.health.event_generation_failure.resolved re-drives the object
//     Stripe failed to generate an event for (redrive.go);
//   - other v2.* types are recorded as unhandled, with no effect.
//
// What the hydrator applies comes from Stripe's copy of the event
// (GET /v2/core/events/{id}), never from the notification: a notification
// that disagrees with that copy is recorded failed, naming the difference.
//
// A hydration that fails (404/403 included) stays received with its
// last_error and is retried with backoff; it never blocks other events.
package thin

import (
	"context"
	"log/slog"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// Store is the part of the events store thin events use.
type Store interface {
	Get(ctx context.Context, id string) (events.Record, error)
	PutReceived(ctx context.Context, r events.Record) error
	ThinDone(ctx context.Context, id string, h events.ThinHydrated, at time.Time) error
	ThinRetry(ctx context.Context, id, lastError string, attempts int) error
	ThinRefused(ctx context.Context, id, lastError string, attempts int) error
}

// Observer is told what thin events do (metrics); see package metrics.
type Observer interface {
	ThinReceived(outcome stripeevent.Outcome)
	ThinHydrated(result string, latency time.Duration)
	// ThinHealth counts a hydrated health event by its severity
	// (stripeevent.Severity*).
	ThinHealth(severity string)
}

type nopObserver struct{}

func (nopObserver) ThinReceived(stripeevent.Outcome)   {}
func (nopObserver) ThinHydrated(string, time.Duration) {}
func (nopObserver) ThinHealth(string)                  {}

// IntakeConfig configures the intake.
type IntakeConfig struct {
	PlatformAccount string
	EventTTL        time.Duration
	Livemode        bool
	Log             *slog.Logger
	Observer        Observer // may be nil
	Now             func() time.Time
}

// Intake records verified thin notifications.
type Intake struct {
	cfg   IntakeConfig
	store Store
	queue *Queue
	nudge func() // wakes the hydrator; may be nil
}

// NewIntake returns the intake. nudge (may be nil) wakes the hydrator.
func NewIntake(cfg IntakeConfig, store Store, queue *Queue, nudge func()) *Intake {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Intake{cfg: cfg, store: store, queue: queue, nudge: nudge}
}

// Accept records a verified thin notification: its hydration job, in one
// Postgres commit; the internal API finds it at once (status received,
// through the Recorder) and the events table gets its record right behind. It answers stripeevent.Received (or Duplicate for one
// already processed, Ignored for a livemode mismatch). An error means the
// notification may not be recorded: the sender must deliver it again (5xx).
func (in *Intake) Accept(ctx context.Context, t stripeevent.Thin, payload []byte, source stripeevent.Source) (stripeevent.Outcome, error) {
	outcome, err := in.accept(ctx, t, payload, source)
	in.cfg.Observer.ThinReceived(outcome)
	return outcome, err
}

func (in *Intake) accept(ctx context.Context, t stripeevent.Thin, payload []byte, source stripeevent.Source) (stripeevent.Outcome, error) {
	log := in.cfg.Log.With("event_id", t.ID, "event_type", t.Type, "stripe_account", t.Context, "source", string(source))
	if t.Livemode != in.cfg.Livemode {
		log.Warn("ignoring thin event whose livemode does not match the configured key", "livemode", t.Livemode)
		return stripeevent.Ignored, nil
	}
	// One statement, one durable commit: the queue row. Its record reaches
	// the events table behind the answer (Recorder), which reads it from
	// the queue until then. A crash before the commit answered no 200, so
	// Stripe delivers again.
	done, err := in.queue.Enqueue(ctx, Job{EventID: t.ID, Type: t.Type, Context: t.Context, Source: string(source), Payload: payload})
	if err != nil {
		log.Warn("thin event not queued for hydration; it will be delivered again", "error", err)
		return stripeevent.Failed, err
	}
	if done {
		return stripeevent.Duplicate, nil
	}
	if in.nudge != nil {
		in.nudge()
	}
	return stripeevent.Received, nil
}
