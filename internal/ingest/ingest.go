// Package ingest is the one entry point for a verified Stripe event body,
// whatever carried it (the webhook, EventBridge): it tells a snapshot event
// (`"object":"event"`) from a thin one (`"object":"v2.core.event"`) and
// hands it to the snapshot handler or the thin intake (docs/design.md §4).
package ingest

import (
	"context"
	"errors"

	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// ThinIntake records verified thin notifications (thin.Intake).
type ThinIntake interface {
	Accept(ctx context.Context, t stripeevent.Thin, payload []byte, source stripeevent.Source) (stripeevent.Outcome, error)
}

// Result says what became of a body.
type Result struct {
	EventID string
	Kind    stripeevent.PayloadKind
	Outcome stripeevent.Outcome
}

// Intake dispatches verified event bodies.
type Intake struct {
	snapshot stripeevent.Handler
	thin     ThinIntake // nil: thin bodies are refused as not a Stripe event
}

// New returns the entry point. thin may be nil (thin events refused).
func New(snapshot stripeevent.Handler, thin ThinIntake) *Intake {
	return &Intake{snapshot: snapshot, thin: thin}
}

// Ingest handles one verified event body from source. A body that is not
// a Stripe event (either shape) is an error wrapping
// stripeevent.ErrMalformed, and nothing is recorded: answer 400 (or, for a
// queue, leave it to redrive). Any other error means the event may not be
// recorded or processed: the sender must deliver it again (5xx). On a
// snapshot error Result still names the event.
//
// The snapshot path is exactly the parse it always was: the body's object
// is only looked at when Parse refuses it, so the common case pays nothing.
func (in *Intake) Ingest(ctx context.Context, body []byte, source stripeevent.Source) (Result, error) {
	ev, perr := stripeevent.Parse(body)
	if perr == nil {
		return in.handleSnapshot(ctx, ev, body, source)
	}
	if in.thin == nil || stripeevent.ObjectOf(body) != stripeevent.ObjectThin {
		return Result{Kind: stripeevent.KindSnapshot}, perr
	}
	t, err := stripeevent.ParseThin(body)
	if err != nil {
		return Result{Kind: stripeevent.KindThin}, err
	}
	res := Result{EventID: t.ID, Kind: stripeevent.KindThin}
	res.Outcome, err = in.thin.Accept(ctx, t, body, source)
	return res, err
}

func (in *Intake) handleSnapshot(ctx context.Context, ev *stripe.Event, body []byte, source stripeevent.Source) (Result, error) {
	res := Result{EventID: ev.ID, Kind: stripeevent.KindSnapshot}
	var err error
	res.Outcome, err = in.snapshot.Handle(ctx, ev, body, source)
	return res, err
}

// Malformed reports whether err is a refusal of the body itself (400).
func Malformed(err error) bool { return errors.Is(err, stripeevent.ErrMalformed) }
