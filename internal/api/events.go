package api

import (
	"net/http"
	"regexp"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/replay"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripeid"
)

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
	// from a v1 resource, snapshot_event; a hydrated health event has the
	// severity Stripe gave it.
	PayloadKind   string `json:"payload_kind"`
	Hydration     string `json:"hydration,omitempty"`
	SnapshotEvent string `json:"snapshot_event,omitempty"`
	RelatedObject string `json:"related_object,omitempty"`
	Severity      string `json:"severity,omitempty"`
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
		e.Severity = r.Severity
	}
	return e
}

var clockPattern = regexp.MustCompile(`^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{3})?$`)

type eventRoutes struct {
	store    events.Reader
	replayer replay.One
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
		return "", apperr.Invalid("invalid event id %q", truncate(id, 64))
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
		return apperr.Invalid("payload_kind must be snapshot or thin")
	}
	selectors := 0
	for _, k := range []string{"date", "stripe_account", "subscription"} {
		if q[k] != "" {
			selectors++
		}
	}
	if selectors != 1 {
		return apperr.Invalid("give exactly one of date, stripe_account or subscription")
	}
	ctx := c.Request().Context()
	var page events.Page
	switch {
	case q["date"] != "":
		if q["since"] != "" || q["until"] != "" {
			return apperr.Invalid("since and until go with stripe_account or subscription; use from and to with date")
		}
		if _, err := time.Parse(events.DateLayout, q["date"]); err != nil {
			return apperr.Invalid("date must be YYYY-MM-DD")
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
			return apperr.Invalid("from and to go with date; use since and until")
		}
		r, err := timestampRange(q["since"], q["until"])
		if err != nil {
			return err
		}
		if acct := q["stripe_account"]; acct != "" {
			if !stripeid.Valid(acct, "acct_") {
				return apperr.Invalid("stripe_account must be an acct_ id")
			}
			page, err = h.store.ByAccount(ctx, acct, r, limit, q["cursor"])
		} else {
			if !stripeid.Valid(q["subscription"], "sub_") {
				return apperr.Invalid("subscription must be a sub_ id")
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
	for _, p := range []struct{ name, value string }{{"from", from}, {"to", to}} {
		if p.value != "" && !clockPattern.MatchString(p.value) {
			return events.Range{}, apperr.Invalid("%s must be HH:MM:SS or HH:MM:SS.mmm", p.name)
		}
	}
	r, err := events.ClockRange(from, to)
	if err != nil {
		return r, apperr.Invalid("from is after to")
	}
	return r, nil
}

// timestampRange turns since/until (RFC3339) into an inclusive timestamp range.
func timestampRange(since, until string) (events.Range, error) {
	var s, u *time.Time
	for _, p := range []struct {
		name, value string
		dst         **time.Time
	}{{"since", since, &s}, {"until", until, &u}} {
		if p.value == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, p.value)
		if err != nil {
			return events.Range{}, apperr.Invalid("%s must be an RFC 3339 timestamp", p.name)
		}
		*p.dst = &t
	}
	r, err := events.TimeRange(s, u, 0)
	if err != nil {
		return r, apperr.Invalid("since is after until")
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

// replay re-drives one event through the handler (replay.One): from its
// stored payload, or fetched from Stripe when the table no longer holds it.
func (h eventRoutes) replay(c echo.Context) error {
	id, err := eventID(c)
	if err != nil {
		return err
	}
	q, err := requestParams(c, "stripe_account")
	if err != nil {
		return err
	}
	res, err := h.replayer.Replay(c.Request().Context(), id, q["stripe_account"])
	if err != nil {
		return err
	}
	result := ReplayResult{EventID: res.EventID, Outcome: res.Outcome, PayloadSource: res.PayloadSource}
	if res.Record != nil {
		e := EventJSON(*res.Record)
		result.Event = &e
	}
	return c.JSON(http.StatusOK, result)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
