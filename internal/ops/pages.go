package ops

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/stripeid"
)

// PageSize of every list.
const PageSize = 50

// ChartHours is how far back the overview chart goes.
const ChartHours = 48

var clockPattern = regexp.MustCompile(`^([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9])?$`)

type overviewData struct {
	Chart       chart
	Totals      map[string]int64
	Outcomes    []string
	Problems    map[string]int64
	Checkpoints []Checkpoint
	Outbox      []outbox.TopicStats
	Runs        []Run
	Today       string
	Warnings    []string
}

func (c *Console) overview(ec echo.Context) error {
	ctx := ctxOf(ec)
	now := c.d.Now().UTC()
	d := overviewData{Outcomes: Outcomes, Totals: map[string]int64{}, Today: now.Format(events.DateLayout)}
	// This instance's counts are read fresh; other instances' lag by at
	// most their flush interval.
	if err := c.d.Counter.Flush(ctx); err != nil {
		d.Warnings = append(d.Warnings, "This instance's latest event counts could not be saved; the chart may lag.")
		c.d.Log.Warn("console: flush counts", "error", err)
	}
	hours, err := c.d.Counter.Hours(ctx, ChartHours)
	if err != nil {
		return c.unavailable(ec, "read the event counts", err)
	}
	for _, h := range hours {
		for o, n := range h.Counts {
			d.Totals[o] += n
		}
	}
	d.Chart = newChart(hours)
	if d.Problems, err = c.d.Problems.Counts(ctx); err != nil {
		return c.unavailable(ec, "count the dead letters", err)
	}
	if d.Checkpoints, err = Checkpoints(ctx, c.d.Pool, c.d.Gatherer, now); err != nil {
		return c.unavailable(ec, "read the poller checkpoints", err)
	}
	if d.Outbox, err = c.d.Outbox.Stats(ctx); err != nil {
		return c.unavailable(ec, "read the outbox backlog", err)
	}
	if d.Runs, err = c.d.Runs.Last(ctx, 5); err != nil {
		return c.unavailable(ec, "read the billing runs", err)
	}
	return c.render(ec, http.StatusOK, "overview", view{Title: "Overview", Nav: "overview", Data: d})
}

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
	if errors.Is(err, events.ErrInvalidCursor) {
		v.Error = "That page link is not valid any more; search again."
		return c.render(ec, http.StatusBadRequest, "events", v)
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
	var r events.Range
	for _, p := range []struct {
		v, pad string
		dst    *string
	}{{from, ":00.000", &r.From}, {to, ":59.999", &r.To}} {
		if p.v == "" {
			continue
		}
		if !clockPattern.MatchString(p.v) {
			return r, "Give times as HH:MM or HH:MM:SS (UTC)."
		}
		if len(p.v) == len("15:04") {
			*p.dst = p.v + p.pad
		} else {
			*p.dst = p.v + p.pad[3:]
		}
	}
	if r.From != "" && r.To != "" && r.From > r.To {
		return r, "The start time is after the end time."
	}
	return r, ""
}

// timeRange reads datetime-local bounds (UTC) into a timestamp range.
func timeRange(since, until string) (events.Range, string) {
	var r events.Range
	var s, u time.Time
	for _, p := range []struct {
		v   string
		t   *time.Time
		dst *string
		end bool
	}{{since, &s, &r.From, false}, {until, &u, &r.To, true}} {
		if p.v == "" {
			continue
		}
		t, err := parseLocal(p.v)
		if err != nil {
			return r, "Give times as YYYY-MM-DDTHH:MM (UTC)."
		}
		*p.t = t
		if p.end && t.Second() == 0 {
			t = t.Add(59*time.Second + 999*time.Millisecond)
		}
		*p.dst = t.Format(events.TimestampLayout)
	}
	if since != "" && until != "" && s.After(u) {
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
	Problem *Problem
}

func (c *Console) eventPage(ec echo.Context) error {
	id := ec.Param("id")
	if !stripeid.Valid(id, "evt_") {
		return c.fail(ec, http.StatusBadRequest, "An event id looks like evt_…")
	}
	rec, err := c.d.Events.Get(ctxOf(ec), id)
	if errors.Is(err, events.ErrNotFound) {
		return c.render(ec, http.StatusNotFound, "event", view{Title: "Event not found", Nav: "events",
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

// replayResult is one replay as the console shows it.
type replayResult struct {
	EventID string
	Outcome string
	Status  string
	Error   string
	// Still is the error the record keeps (a rejected event that is still
	// unprocessable: the handler answers duplicate and keeps the reason).
	Still string
}

// replay re-drives one event through the API's replay logic and takes it
// off the dead-letter list once it is processed without error.
func (c *Console) replay(ec echo.Context, id, account string) replayResult {
	ctx := ctxOf(ec)
	res, err := c.d.Replayer.Replay(ctx, id, account)
	out := replayResult{EventID: id, Outcome: res.Outcome}
	if err != nil {
		var ae *apperr.Error
		if errors.As(err, &ae) {
			out.Error = ae.Message
		} else {
			out.Error = "replay failed (see the service logs)"
		}
		c.d.Log.Warn("console replay failed", "event_id", id, "error", err)
		return out
	}
	if res.Event != nil {
		out.Status, out.Still = res.Event.Status, res.Event.LastError
		if res.Event.Status == string(events.StatusProcessed) && res.Event.LastError == "" {
			if err := c.d.Problems.Resolve(ctx, id); err != nil {
				c.d.Log.Warn("console: resolve problem", "event_id", id, "error", err)
			}
		}
	}
	c.d.Log.Info("console replay", "event_id", id, "outcome", res.Outcome)
	return out
}

func (c *Console) replayOne(ec echo.Context) error {
	id := ec.Param("id")
	if !stripeid.Valid(id, "evt_") {
		return c.fail(ec, http.StatusBadRequest, "An event id looks like evt_…")
	}
	account := strings.TrimSpace(ec.Request().PostFormValue("stripe_account"))
	if account != "" && !stripeid.Valid(account, "acct_") {
		return c.fail(ec, http.StatusBadRequest, "A Stripe account id looks like acct_…")
	}
	res := c.replay(ec, id, account)
	status := http.StatusOK
	if res.Error != "" {
		status = http.StatusBadGateway
	}
	return c.render(ec, status, "replayed", view{Title: "Replay", Nav: "problems", Data: []replayResult{res}})
}

type problemsData struct {
	Outcome  string
	Problems []Problem
	Next     string
}

func (c *Console) problems(ec echo.Context) error {
	outcome := ec.QueryParam("outcome")
	if outcome != "" && outcome != "failed" && outcome != "rejected" {
		return c.fail(ec, http.StatusBadRequest, "outcome is failed or rejected")
	}
	page, err := c.d.Problems.List(ctxOf(ec), outcome, PageSize, ec.QueryParam("cursor"))
	if errors.Is(err, ErrBadCursor) {
		return c.fail(ec, http.StatusBadRequest, "That page link is not valid; open the list again.")
	}
	if err != nil {
		return c.unavailable(ec, "list the dead letters", err)
	}
	d := problemsData{Outcome: outcome, Problems: page.Problems}
	if page.Next != "" {
		q := url.Values{"cursor": {page.Next}}
		if outcome != "" {
			q.Set("outcome", outcome)
		}
		d.Next = Prefix + "/problems?" + q.Encode()
	}
	return c.render(ec, http.StatusOK, "problems", view{Title: "Failed and rejected events", Nav: "problems", Data: d})
}

// MaxSelection bounds one selection replay (one request's work).
const MaxSelection = PageSize

func (c *Console) replaySelection(ec echo.Context) error {
	if err := ec.Request().ParseForm(); err != nil {
		return c.fail(ec, http.StatusBadRequest, "Could not read the form.")
	}
	ids := ec.Request().PostForm["id"]
	if len(ids) == 0 {
		return c.fail(ec, http.StatusBadRequest, "Select at least one event to replay.")
	}
	if len(ids) > MaxSelection {
		return c.fail(ec, http.StatusBadRequest, fmt.Sprintf("Select at most %d events at once.", MaxSelection))
	}
	for _, id := range ids {
		if !stripeid.Valid(id, "evt_") {
			return c.fail(ec, http.StatusBadRequest, "An event id looks like evt_…; nothing was replayed.")
		}
	}
	results := make([]replayResult, 0, len(ids))
	for _, id := range ids {
		results = append(results, c.replay(ec, id, ""))
	}
	return c.render(ec, http.StatusOK, "replayed", view{Title: "Replay", Nav: "problems", Data: results})
}

type outboxMessage struct {
	ID          string
	Topic       string
	Type        string
	Attempts    int
	LastError   string
	CreatedAt   time.Time
	AvailableAt time.Time
}

type outboxData struct {
	Topic    string
	Dead     bool
	Stats    []outbox.TopicStats
	Messages []outboxMessage
	Letters  []outbox.DeadLetter
	Next     string
}

// outbox lists the undelivered messages of a topic, oldest due first, or
// (dead=1) its dead letters, newest first, a page at a time through the
// partial indexes of those rows.
func (c *Console) outbox(ec echo.Context) error {
	ctx := ctxOf(ec)
	d := outboxData{Topic: ec.QueryParam("topic"), Dead: ec.QueryParam("dead") == "1"}
	var err error
	if d.Stats, err = c.d.Outbox.Stats(ctx); err != nil {
		return c.unavailable(ec, "read the outbox", err)
	}
	next := url.Values{}
	if d.Topic != "" {
		next.Set("topic", d.Topic)
	}
	if d.Dead {
		var after outbox.DeadCursor
		if cur := ec.QueryParam("after"); cur != "" {
			at, id, ok := strings.Cut(cur, "|")
			t, terr := time.Parse(time.RFC3339Nano, at)
			u, uerr := uuid.Parse(id)
			if !ok || terr != nil || uerr != nil {
				return c.fail(ec, http.StatusBadRequest, "That page link is not valid; open the list again.")
			}
			after = outbox.DeadCursor{DeadAt: t, ID: u}
		}
		letters, cur, err := c.d.Outbox.ListDead(ctx, d.Topic, after, PageSize)
		if err != nil {
			return c.unavailable(ec, "list the dead letters", err)
		}
		d.Letters = letters
		if cur != nil {
			next.Set("dead", "1")
			next.Set("after", cur.DeadAt.UTC().Format(time.RFC3339Nano)+"|"+cur.ID.String())
			d.Next = Prefix + "/outbox?" + next.Encode()
		}
		return c.render(ec, http.StatusOK, "outbox", view{Title: "Outbox dead letters", Nav: "outbox", Data: d})
	}
	// Keyset paging on (available_at, id): ties never skip a message.
	after, afterID := time.Time{}, ""
	if cur := ec.QueryParam("after"); cur != "" {
		at, id, ok := strings.Cut(cur, "|")
		t, terr := time.Parse(time.RFC3339Nano, at)
		if !ok || terr != nil || uuid.Validate(id) != nil {
			return c.fail(ec, http.StatusBadRequest, "That page link is not valid; open the list again.")
		}
		after, afterID = t, id
	}
	rows, err := c.d.Pool.Query(ctx, `SELECT id::text, topic, type, attempts, coalesce(last_error, ''), created_at, available_at
		FROM outbox WHERE delivered_at IS NULL AND dead_at IS NULL AND ($1 = '' OR topic = $1)
		AND ($2 = '' OR (available_at, id) > ($3, $2::uuid))
		ORDER BY available_at, id LIMIT $4`, d.Topic, afterID, after, PageSize+1)
	if err != nil {
		return c.unavailable(ec, "read the outbox", err)
	}
	d.Messages, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (outboxMessage, error) {
		var m outboxMessage
		err := row.Scan(&m.ID, &m.Topic, &m.Type, &m.Attempts, &m.LastError, &m.CreatedAt, &m.AvailableAt)
		return m, err
	})
	if err != nil {
		return c.unavailable(ec, "read the outbox", err)
	}
	if len(d.Messages) > PageSize {
		d.Messages = d.Messages[:PageSize]
		last := d.Messages[PageSize-1]
		next.Set("after", last.AvailableAt.UTC().Format(time.RFC3339Nano)+"|"+last.ID)
		d.Next = Prefix + "/outbox?" + next.Encode()
	}
	return c.render(ec, http.StatusOK, "outbox", view{Title: "Outbox", Nav: "outbox", Data: d})
}

func (c *Console) runs(ec echo.Context) error {
	runs, err := c.d.Runs.Last(ctxOf(ec), 100)
	if err != nil {
		return c.unavailable(ec, "read the billing runs", err)
	}
	return c.render(ec, http.StatusOK, "runs", view{Title: "Billing runs", Nav: "billing", Data: runs})
}

// noticeOf is the confirmation a redirect after a change carries.
func noticeOf(ec echo.Context) string {
	switch ec.QueryParam("done") {
	case "pause":
		return "The subscription is paused."
	case "resume":
		return "The subscription is resumed."
	case "cancel":
		return "The subscription is cancelled."
	case "waive":
		return "The period is waived."
	case "pay":
		switch ec.QueryParam("status") {
		case "COMPLETED":
			return "Paid: the period is COMPLETED."
		case "ACHSENT":
			return "Submitted: the bank debit is processing (ACHSENT)."
		}
		return "The charge was declined; the period stays in ERROR (see its error below)."
	}
	return ""
}
