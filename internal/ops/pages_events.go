package ops

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/opsdata"
	"github.com/stripe-payments/stripe-payments/internal/stripeid"
)

// searchData is the event search page: the query and its results.
type searchData struct {
	By, ID, Date, From, To, Account, Subscription, Since, Until string
	Records                                                     []events.Record
	Searched                                                    bool
	Next                                                        string // URL of the next page
}

// eventSearch finds events by id or through one of the three indexes, a
// page at a time (never a scan).
func (c *Console) eventSearch(ec echo.Context) error {
	q := ec.QueryParams()
	d := searchData{By: q.Get("by"), ID: strings.TrimSpace(q.Get("id")), Date: q.Get("date"), From: q.Get("from"), To: q.Get("to"),
		Account: strings.TrimSpace(q.Get("account")), Subscription: strings.TrimSpace(q.Get("subscription")),
		Since: q.Get("since"), Until: q.Get("until")}
	if d.By == "" {
		switch {
		case d.ID != "":
			d.By = "id"
		case d.Account != "":
			d.By = "account"
		case d.Subscription != "":
			d.By = "subscription"
		default:
			d.By = "date"
		}
	}
	v := view{Title: "Events", Nav: "events", Data: &d}
	if d.Date == "" && d.By == "date" && len(q) == 0 {
		d.Date = c.d.Now().UTC().Format(events.DateLayout)
		return c.render(ec, http.StatusOK, "events", v)
	}
	ctx := ctxOf(ec)
	cursor := q.Get("cursor")
	var (
		page events.Page
		err  error
	)
	switch d.By {
	case "id":
		if !stripeid.Valid(d.ID, "evt_") {
			v.Error = "An event id looks like evt_…"
			return c.render(ec, http.StatusBadRequest, "events", v)
		}
		return ec.Redirect(http.StatusSeeOther, Prefix+"/events/"+url.PathEscape(d.ID))
	case "date":
		if _, perr := time.Parse(events.DateLayout, d.Date); perr != nil {
			v.Error = "Give a date as YYYY-MM-DD."
			return c.render(ec, http.StatusBadRequest, "events", v)
		}
		r, rerr := clockRange(d.From, d.To)
		if rerr != "" {
			v.Error = rerr
			return c.render(ec, http.StatusBadRequest, "events", v)
		}
		page, err = c.d.Events.ByDate(ctx, d.Date, r, PageSize, cursor)
	case "account", "subscription":
		r, rerr := timeRange(d.Since, d.Until)
		if rerr != "" {
			v.Error = rerr
			return c.render(ec, http.StatusBadRequest, "events", v)
		}
		if d.By == "account" {
			if !stripeid.Valid(d.Account, "acct_") {
				v.Error = "A Stripe account id looks like acct_…"
				return c.render(ec, http.StatusBadRequest, "events", v)
			}
			page, err = c.d.Events.ByAccount(ctx, d.Account, r, PageSize, cursor)
		} else {
			if !stripeid.Valid(d.Subscription, "sub_") {
				v.Error = "A subscription id looks like sub_…"
				return c.render(ec, http.StatusBadRequest, "events", v)
			}
			page, err = c.d.Events.BySubscription(ctx, d.Subscription, r, PageSize, cursor)
		}
	default:
		v.Error = "Search by id, date, account or subscription."
		return c.render(ec, http.StatusBadRequest, "events", v)
	}
	if errors.Is(err, apperr.ErrInvalid) {
		v.Error = "That page link is not valid any more; search again."
		return c.render(ec, statusOf(err), "events", v)
	}
	if err != nil {
		return c.unavailable(ec, "search the events", err)
	}
	d.Records, d.Searched = page.Records, true
	if page.NextCursor != "" {
		next := ec.QueryParams()
		next.Set("cursor", page.NextCursor)
		d.Next = Prefix + "/events?" + next.Encode()
	}
	return c.render(ec, http.StatusOK, "events", v)
}

// clockRange reads HH:MM[:SS] bounds of a day, both inclusive.
func clockRange(from, to string) (events.Range, string) {
	for _, v := range []string{from, to} {
		if v != "" && !clockPattern.MatchString(v) {
			return events.Range{}, "Give times as HH:MM or HH:MM:SS (UTC)."
		}
	}
	r, err := events.ClockRange(from, to)
	if err != nil {
		return r, "The start time is after the end time."
	}
	return r, ""
}

// timeRange reads datetime-local bounds (UTC) into a timestamp range; an
// end given to the minute covers the whole minute.
func timeRange(since, until string) (events.Range, string) {
	var s, u *time.Time
	for _, p := range []struct {
		v   string
		dst **time.Time
	}{{since, &s}, {until, &u}} {
		if p.v == "" {
			continue
		}
		t, err := parseLocal(p.v)
		if err != nil {
			return events.Range{}, "Give times as YYYY-MM-DDTHH:MM (UTC)."
		}
		*p.dst = &t
	}
	var pad time.Duration
	if u != nil && u.Second() == 0 {
		pad = 59*time.Second + 999*time.Millisecond
	}
	r, err := events.TimeRange(s, u, pad)
	if err != nil {
		return r, "The start is after the end."
	}
	return r, ""
}

func parseLocal(v string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339} {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("bad time %q", v)
}

type eventData struct {
	Record  events.Record
	Payload string
	Problem *opsdata.Problem
}

func (c *Console) eventPage(ec echo.Context) error {
	id := ec.Param("id")
	if !stripeid.Valid(id, "evt_") {
		return c.fail(ec, http.StatusBadRequest, "An event id looks like evt_…")
	}
	rec, err := c.d.Events.Get(ctxOf(ec), id)
	if errors.Is(err, apperr.ErrNotFound) {
		return c.render(ec, statusOf(err), "event", view{Title: "Event not found", Nav: "events",
			Error: "No event " + id + " in the events table (never received, or past its TTL). A replay fetches it from Stripe.",
			Data:  eventData{Record: events.Record{ID: id}}})
	}
	if err != nil {
		return c.unavailable(ec, "read the event", err)
	}
	return c.render(ec, http.StatusOK, "event", view{Title: "Event " + id, Nav: "events", Notice: noticeOf(ec), Data: eventData{Record: rec, Payload: pretty(rec.Payload)}})
}

func pretty(raw []byte) string {
	if len(raw) == 0 {
		return ""
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return string(raw)
	}
	out, err := json.MarshalIndent(redact(doc), "", "  ")
	if err != nil {
		return string(raw)
	}
	return string(out)
}

// redact hides what must not be shown on a screen: a PaymentIntent's
// client_secret lets whoever reads it confirm the payment.
func redact(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if k == "client_secret" {
				if s, ok := e.(string); ok && s != "" {
					x[k] = "[redacted]"
				}
				continue
			}
			x[k] = redact(e)
		}
	case []any:
		for i, e := range x {
			x[i] = redact(e)
		}
	}
	return v
}
