package replay

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripeid"
)

// EventGetter reads one event record (events.Store).
type EventGetter interface {
	Get(ctx context.Context, id string) (events.Record, error)
}

// EventFetcher reads an event from Stripe's Events API, for a replay of an
// event the table no longer holds. account is empty for the platform.
type EventFetcher interface {
	FetchEvent(ctx context.Context, id, account string) ([]byte, error)
}

// One re-drives single events through the handler: from the stored
// payload, or fetched from Stripe when the table no longer holds it. The
// internal API (POST /internal/v1/events/{id}/replay), the operator console
// and the bulk runner (through Outcomes) all replay through it.
type One struct {
	Events  EventGetter
	Handler stripeevent.Handler
	// Fetcher may be nil: replays then need the stored payload.
	Fetcher EventFetcher
	// Platform is STRIPE_PLATFORM_ACCOUNT: an event fetched as it is a
	// platform event.
	Platform string
}

// Result is one replay.
type Result struct {
	EventID string
	// Outcome is the handler's: applied, completed, duplicate or ignored.
	Outcome string
	// PayloadSource says where the event came from: "store" or "stripe".
	PayloadSource string
	// Record is the event's record after the replay (nil when it could not
	// be read).
	Record *events.Record
}

// Replay re-drives event id; account is the connected account to fetch it
// as when the table no longer holds it. Errors are *apperr.Error.
func (o One) Replay(ctx context.Context, id, account string) (Result, error) {
	result := Result{EventID: id, PayloadSource: "store"}
	if !stripeid.Valid(id, "evt_") {
		return result, apperr.Invalid("invalid event id %q", truncate(id, 64))
	}
	var (
		payload     []byte
		fetchedFrom string // the account an event fetched from Stripe was asked of
	)
	rec, err := o.Events.Get(ctx, id)
	switch {
	case err == nil && len(rec.Payload) > 0:
		payload = rec.Payload
	case err == nil || errors.Is(err, apperr.ErrNotFound):
		if err == nil {
			account = rec.StripeAccount
		}
		if account != "" && !stripeid.Valid(account, "acct_") {
			return result, apperr.Invalid("stripe_account must be an acct_ id")
		}
		if o.Fetcher == nil {
			return result, apperr.New(apperr.CodeNotFound, "event %s not found", id)
		}
		payload, err = o.Fetcher.FetchEvent(ctx, id, account)
		if err != nil {
			return result, err
		}
		result.PayloadSource, fetchedFrom = "stripe", account
	default:
		return result, apperr.Wrap(err, apperr.CodeUnavailable, "could not read event")
	}
	ev, err := stripeevent.Parse(payload)
	if err != nil {
		if result.PayloadSource == "stripe" {
			return result, apperr.Wrap(err, apperr.CodeUpstream, "Stripe answered %s with something that is not an event", id)
		}
		return result, apperr.Wrap(err, apperr.CodeInternal, "stored payload of %s is not an event", id)
	}
	if result.PayloadSource == "stripe" {
		if payload, ev, err = o.fetchedAs(id, fetchedFrom, payload, ev); err != nil {
			return result, err
		}
	}
	outcome, err := o.Handler.Handle(ctx, ev, payload, stripeevent.SourceReplay)
	if err != nil {
		return result, apperr.Wrap(err, apperr.CodeUnavailable, "event %s could not be processed; it stays re-drivable", id)
	}
	result.Outcome = string(outcome)
	if rec, err := o.Events.Get(ctx, id); err == nil {
		result.Record = &rec
	}
	return result, nil
}

// fetchedAs checks an event fetched from Stripe against the request and
// files it under the account it was fetched from. Stripe answered a GET of
// event id made as account (the Stripe-Account header; empty or the
// platform's id: the platform):
//   - a different id is a wrong answer: 502, nothing written;
//   - a connected account's event that carries another `account` is a wrong
//     answer too: 502, nothing written;
//   - a connected account's event without `account` (Stripe leaves the field
//     out of events read with a Stripe-Account header, as the poller sees
//     in listings) is that account's: docs/design.md §5 stores the platform only
//     for an event that has no Connect account, and this one does — the
//     one Stripe served it as. The field is set in the payload, so the
//     stored payload, the record's stripe_account and every applier agree,
//     and a later re-drive from the table files it the same way.
func (o One) fetchedAs(id, account string, payload []byte, ev *stripe.Event) ([]byte, *stripe.Event, error) {
	if ev.ID != id {
		return nil, nil, apperr.New(apperr.CodeUpstream, "Stripe answered a request for event %s with event %q; nothing was recorded", id, truncate(ev.ID, 100))
	}
	connected := account != "" && account != o.Platform
	switch {
	case !connected || ev.Account == account:
		return payload, ev, nil
	case ev.Account != "":
		return nil, nil, apperr.New(apperr.CodeUpstream, "Stripe answered event %s of account %s with one of account %q; nothing was recorded", id, account, truncate(ev.Account, 100))
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(payload, &doc); err != nil {
		return nil, nil, apperr.Wrap(err, apperr.CodeUpstream, "Stripe answered %s with something that is not an event", id)
	}
	doc["account"], _ = json.Marshal(account)
	filed, err := json.Marshal(doc)
	if err != nil {
		return nil, nil, apperr.Wrap(err, apperr.CodeInternal, "file event %s under %s", id, account)
	}
	ev, err = stripeevent.Parse(filed)
	if err != nil {
		return nil, nil, apperr.Wrap(err, apperr.CodeInternal, "file event %s under %s", id, account)
	}
	return filed, ev, nil
}

// Outcomes adapts One to the bulk runner's Replayer (the outcome only).
type Outcomes struct{ One One }

// Replay implements Replayer.
func (o Outcomes) Replay(ctx context.Context, id, account string) (string, error) {
	res, err := o.One.Replay(ctx, id, account)
	return res.Outcome, err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
