package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripeid"
)

// EventReader is the part of the events store the API reads.
type EventReader interface {
	Get(ctx context.Context, id string) (events.Record, error)
	ByDate(ctx context.Context, date string, r events.Range, limit int32, cursor string) (events.Page, error)
	ByAccount(ctx context.Context, account string, r events.Range, limit int32, cursor string) (events.Page, error)
	BySubscription(ctx context.Context, subscription string, r events.Range, limit int32, cursor string) (events.Page, error)
}

// EventFetcher reads an event from Stripe's Events API, for a replay of an
// event the table no longer holds. account is empty for the platform.
type EventFetcher interface {
	FetchEvent(ctx context.Context, id, account string) ([]byte, error)
}

// Event is the JSON shape of an event record (docs/design.md §4, Contract): every
// key of the contract is always present, null when it has no value, plus
// api_version and last_error for operators.
type Event struct {
	ID            string  `json:"id"`
	Type          string  `json:"type"`
	StripeAccount string  `json:"stripe_account"`
	Timestamp     string  `json:"timestamp"`
	Date          string  `json:"date"`
	Time          string  `json:"time"`
	Expiration    int64   `json:"expiration"`
	Subscription  *string `json:"subscription"` // null when the event is about none
	Status        string  `json:"status"`
	ReceivedAt    string  `json:"received_at"`
	ProcessedAt   *string `json:"processed_at"` // null until processed
	Source        string  `json:"source"`
	Attempts      int     `json:"attempts"`
	APIVersion    string  `json:"api_version,omitempty"`
	LastError     string  `json:"last_error,omitempty"`
	// PayloadKind is "snapshot" or "thin" (docs/design.md §4); a thin record also
	// has its hydration state, the object it is about and, once hydrated
	// from a v1 resource, snapshot_event.
	PayloadKind   string `json:"payload_kind"`
	Hydration     string `json:"hydration,omitempty"`
	SnapshotEvent string `json:"snapshot_event,omitempty"`
	RelatedObject string `json:"related_object,omitempty"`
}

// EventJSON renders a record.
func EventJSON(r events.Record) Event {
	e := Event{
		ID: r.ID, Type: r.Type, StripeAccount: r.StripeAccount,
		Timestamp: r.Timestamp(), Date: r.Date(), Time: r.Time(),
		Expiration: r.Expiration.Unix(),
		Status:     string(r.Status), ReceivedAt: r.ReceivedAt.UTC().Format(time.RFC3339Nano),
		Source: string(r.Source), Attempts: r.Attempts, APIVersion: r.APIVersion, LastError: r.LastError,
	}
	if r.Subscription != "" {
		e.Subscription = &r.Subscription
	}
	if !r.ProcessedAt.IsZero() {
		at := r.ProcessedAt.UTC().Format(time.RFC3339Nano)
		e.ProcessedAt = &at
	}
	e.PayloadKind = string(stripeevent.KindSnapshot)
	if r.PayloadKind == stripeevent.KindThin {
		e.PayloadKind, e.Hydration, e.SnapshotEvent, e.RelatedObject = string(r.PayloadKind), r.Hydration, r.SnapshotEvent, r.RelatedObject
	}
	return e
}

var clockPattern = regexp.MustCompile(`^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{3})?$`)

type eventRoutes struct {
	store    EventReader
	handler  stripeevent.Handler
	fetcher  EventFetcher
	platform string // STRIPE_PLATFORM_ACCOUNT
}

func (h eventRoutes) get(c echo.Context) error {
	id, err := eventID(c)
	if err != nil {
		return err
	}
	rec, err := h.store.Get(c.Request().Context(), id)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "could not read event")
	}
	return c.JSON(http.StatusOK, EventJSON(rec))
}

func eventID(c echo.Context) (string, error) {
	id := c.Param("id")
	if !stripeid.Valid(id, "evt_") {
		return "", apperr.New(apperr.CodeInvalidParameter, "invalid event id %q", truncate(id, 64))
	}
	return id, nil
}

// list serves the three listings: by date (and time range), by account and
// by subscription (each with an optional since/until).
func (h eventRoutes) list(c echo.Context) error {
	q, err := requestParams(c, "date", "from", "to", "stripe_account", "subscription", "since", "until", "limit", "cursor", "payload_kind")
	if err != nil {
		return err
	}
	limit, err := pageLimit(q["limit"])
	if err != nil {
		return err
	}
	kind := stripeevent.PayloadKind(q["payload_kind"])
	if kind != "" && kind != stripeevent.KindSnapshot && kind != stripeevent.KindThin {
		return apperr.New(apperr.CodeInvalidParameter, "payload_kind must be snapshot or thin")
	}
	selectors := 0
	for _, k := range []string{"date", "stripe_account", "subscription"} {
		if q[k] != "" {
			selectors++
		}
	}
	if selectors != 1 {
		return apperr.New(apperr.CodeInvalidParameter, "give exactly one of date, stripe_account or subscription")
	}
	ctx := c.Request().Context()
	var page events.Page
	switch {
	case q["date"] != "":
		if q["since"] != "" || q["until"] != "" {
			return apperr.New(apperr.CodeInvalidParameter, "since and until go with stripe_account or subscription; use from and to with date")
		}
		if _, err := time.Parse(events.DateLayout, q["date"]); err != nil {
			return apperr.New(apperr.CodeInvalidParameter, "date must be YYYY-MM-DD")
		}
		r, err := clockRange(q["from"], q["to"])
		if err != nil {
			return err
		}
		page, err = h.store.ByDate(ctx, q["date"], r, limit, q["cursor"])
		if err != nil {
			return apperr.Ensure(err, apperr.CodeUnavailable, "could not list events")
		}
	default:
		if q["from"] != "" || q["to"] != "" {
			return apperr.New(apperr.CodeInvalidParameter, "from and to go with date; use since and until")
		}
		r, err := timestampRange(q["since"], q["until"])
		if err != nil {
			return err
		}
		if acct := q["stripe_account"]; acct != "" {
			if !stripeid.Valid(acct, "acct_") {
				return apperr.New(apperr.CodeInvalidParameter, "stripe_account must be an acct_ id")
			}
			page, err = h.store.ByAccount(ctx, acct, r, limit, q["cursor"])
		} else {
			if !stripeid.Valid(q["subscription"], "sub_") {
				return apperr.New(apperr.CodeInvalidParameter, "subscription must be a sub_ id")
			}
			page, err = h.store.BySubscription(ctx, q["subscription"], r, limit, q["cursor"])
		}
		if err != nil {
			return apperr.Ensure(err, apperr.CodeUnavailable, "could not list events")
		}
	}
	if kind != "" {
		// The filter applies to each page read: a page may hold fewer than
		// limit records (or none) and still have a next_cursor.
		kept := page.Records[:0]
		for _, r := range page.Records {
			if EventJSON(r).PayloadKind == string(kind) {
				kept = append(kept, r)
			}
		}
		page.Records = kept
	}
	return c.JSON(http.StatusOK, listOf(page.Records, page.NextCursor, EventJSON))
}

// clockRange turns from/to (HH:MM:SS[.mmm]) into an inclusive time range.
func clockRange(from, to string) (events.Range, error) {
	var r events.Range
	for _, p := range []struct {
		name, value, pad string
		dst              *string
	}{{"from", from, ".000", &r.From}, {"to", to, ".999", &r.To}} {
		if p.value == "" {
			continue
		}
		if !clockPattern.MatchString(p.value) {
			return r, apperr.New(apperr.CodeInvalidParameter, "%s must be HH:MM:SS or HH:MM:SS.mmm", p.name)
		}
		*p.dst = p.value
		if len(p.value) == len("15:04:05") {
			*p.dst += p.pad
		}
	}
	if r.From != "" && r.To != "" && r.From > r.To {
		return r, apperr.New(apperr.CodeInvalidParameter, "from is after to")
	}
	return r, nil
}

// timestampRange turns since/until (RFC3339) into an inclusive timestamp range.
func timestampRange(since, until string) (events.Range, error) {
	var r events.Range
	var s, u time.Time
	var err error
	if since != "" {
		if s, err = time.Parse(time.RFC3339, since); err != nil {
			return r, apperr.New(apperr.CodeInvalidParameter, "since must be an RFC 3339 timestamp")
		}
		r.From = s.UTC().Format(events.TimestampLayout)
	}
	if until != "" {
		if u, err = time.Parse(time.RFC3339, until); err != nil {
			return r, apperr.New(apperr.CodeInvalidParameter, "until must be an RFC 3339 timestamp")
		}
		r.To = u.UTC().Format(events.TimestampLayout)
	}
	if since != "" && until != "" && s.After(u) {
		return r, apperr.New(apperr.CodeInvalidParameter, "since is after until")
	}
	return r, nil
}

// ReplayResult answers POST /internal/v1/events/{id}/replay.
type ReplayResult struct {
	EventID string `json:"event_id"`
	// Outcome is the handler's: applied, completed, duplicate or ignored.
	Outcome string `json:"outcome"`
	// PayloadSource says where the event came from: "store" or "stripe".
	PayloadSource string `json:"payload_source"`
	Event         *Event `json:"event,omitempty"`
}

// replay re-drives one event through the handler: from its stored payload,
// or fetched from Stripe when the table no longer holds it.
func (h eventRoutes) replay(c echo.Context) error {
	id, err := eventID(c)
	if err != nil {
		return err
	}
	q, err := requestParams(c, "stripe_account")
	if err != nil {
		return err
	}
	result, err := h.replayEvent(c.Request().Context(), id, q["stripe_account"])
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, result)
}

// Replayer re-drives events exactly as POST /internal/v1/events/{id}/replay
// does; the operator console replays through it.
type Replayer struct{ routes eventRoutes }

// NewReplayer returns the replay logic of the API on deps.
func NewReplayer(deps Deps) Replayer {
	return Replayer{eventRoutes{store: deps.Events, handler: deps.Handler, fetcher: deps.Fetcher, platform: deps.PlatformAccount}}
}

// Replay re-drives event id; account is the connected account to fetch it
// as when the table no longer holds it. Errors are *apperr.Error.
func (r Replayer) Replay(ctx context.Context, id, account string) (ReplayResult, error) {
	if !stripeid.Valid(id, "evt_") {
		return ReplayResult{}, apperr.New(apperr.CodeInvalidParameter, "invalid event id %q", truncate(id, 64))
	}
	return r.routes.replayEvent(ctx, id, account)
}

func (h eventRoutes) replayEvent(ctx context.Context, id, account string) (ReplayResult, error) {
	result := ReplayResult{EventID: id, PayloadSource: "store"}
	var (
		payload     []byte
		fetchedFrom string // the account an event fetched from Stripe was asked of
	)
	rec, err := h.store.Get(ctx, id)
	switch {
	case err == nil && len(rec.Payload) > 0:
		payload = rec.Payload
	case err == nil || errors.Is(err, apperr.ErrNotFound):
		if err == nil {
			account = rec.StripeAccount
		}
		if account != "" && !stripeid.Valid(account, "acct_") {
			return result, apperr.New(apperr.CodeInvalidParameter, "stripe_account must be an acct_ id")
		}
		if h.fetcher == nil {
			return result, apperr.New(apperr.CodeNotFound, "event %s not found", id)
		}
		payload, err = h.fetcher.FetchEvent(ctx, id, account)
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
		if payload, ev, err = h.fetchedAs(id, fetchedFrom, payload, ev); err != nil {
			return result, err
		}
	}
	outcome, err := h.handler.Handle(ctx, ev, payload, stripeevent.SourceReplay)
	if err != nil {
		return result, apperr.Wrap(err, apperr.CodeUnavailable, "event %s could not be processed; it stays re-drivable", id)
	}
	result.Outcome = string(outcome)
	if rec, err := h.store.Get(ctx, id); err == nil {
		e := EventJSON(rec)
		result.Event = &e
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
func (h eventRoutes) fetchedAs(id, account string, payload []byte, ev *stripe.Event) ([]byte, *stripe.Event, error) {
	if ev.ID != id {
		return nil, nil, apperr.New(apperr.CodeUpstream, "Stripe answered a request for event %s with event %q; nothing was recorded", id, truncate(ev.ID, 100))
	}
	connected := account != "" && account != h.platform
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

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
