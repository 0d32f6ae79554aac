package ops

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/incidents"
	"github.com/stripe-payments/stripe-payments/internal/opsdata"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/stripeid"
	"github.com/stripe-payments/stripe-payments/internal/thin"
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
	Runs        []opsdata.Run
	Today       string
	Warnings    []string
	Thin        thin.Hydrations
	// Incidents are the open ones; the overview leads with them.
	Incidents   []incidents.Incident
	IncidentsOn bool
}

func (c *Console) overview(ec echo.Context) error {
	ctx := ctxOf(ec)
	now := c.d.Now().UTC()
	d := overviewData{Outcomes: opsdata.Outcomes, Totals: map[string]int64{}, Today: now.Format(events.DateLayout)}
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
	if d.Checkpoints, err = checkpoints(ctx, c.d.Checkpoints, c.d.Poller, now); err != nil {
		return c.unavailable(ec, "read the poller checkpoints", err)
	}
	if d.Outbox, err = c.d.Outbox.Stats(ctx); err != nil {
		return c.unavailable(ec, "read the outbox backlog", err)
	}
	if d.Runs, err = c.d.Runs.Last(ctx, 5); err != nil {
		return c.unavailable(ec, "read the billing runs", err)
	}
	if d.Thin, err = c.d.Thin.Hydrations(ctx, now, MaxThinStuck); err != nil {
		return c.unavailable(ec, "read the thin events waiting for hydration", err)
	}
	if n, err := c.d.Quarantine.Quarantined(ctx); err != nil {
		return c.unavailable(ec, "count the quarantined event records", err)
	} else if n > 0 {
		d.Warnings = append(d.Warnings, quarantineWarning(n))
	}
	if c.d.Incidents != nil {
		d.IncidentsOn = true
		if d.Incidents, err = c.d.Incidents.List(ctx, incidents.Open); err != nil {
			return c.unavailable(ec, "list the open incidents", err)
		}
	}
	return c.render(ec, http.StatusOK, "overview", view{Title: "Overview", Nav: "overview", Data: d})
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
	// Cause is why a replay that failed failed (the record's last error).
	Cause string
}

// replay re-drives one event through the one replay path (replay.One) and takes it
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
		// Why: the handler's error, as the event's record keeps it (the
		// same text as the event page's last error).
		if rec, gerr := c.d.Events.Get(ctx, id); gerr == nil && rec.LastError != "" {
			out.Cause = rec.LastError
		}
		c.d.Log.Warn("console replay failed", "event_id", id, "error", err)
		return out
	}
	if res.Record != nil {
		out.Status, out.Still = string(res.Record.Status), res.Record.LastError
		if res.Record.Status == events.StatusProcessed && res.Record.LastError == "" {
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
	Problems []opsdata.Problem
	Next     string
	Thin     thin.Hydrations // thin events whose hydration keeps failing
}

func (c *Console) problems(ec echo.Context) error {
	outcome := ec.QueryParam("outcome")
	if outcome != "" && outcome != "failed" && outcome != "rejected" {
		return c.fail(ec, http.StatusBadRequest, "outcome is failed or rejected")
	}
	page, err := c.d.Problems.List(ctxOf(ec), outcome, PageSize, ec.QueryParam("cursor"))
	if errors.Is(err, apperr.ErrInvalid) {
		return c.refused(ec, err, "That page link is not valid; open the list again.")
	}
	if err != nil {
		return c.unavailable(ec, "list the dead letters", err)
	}
	d := problemsData{Outcome: outcome, Problems: page.Problems}
	if d.Thin, err = c.d.Thin.Hydrations(ctxOf(ec), c.d.Now().UTC(), MaxThinStuck); err != nil {
		return c.unavailable(ec, "read the thin events waiting for hydration", err)
	}
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

type outboxData struct {
	Topic    string
	Dead     bool
	Stats    []outbox.TopicStats
	Messages []outbox.Undelivered
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
		t, u, ok := pageAfter(ec.QueryParam("after"))
		if !ok {
			return c.fail(ec, http.StatusBadRequest, "That page link is not valid; open the list again.")
		}
		after := outbox.DeadCursor{DeadAt: t, ID: u}
		letters, cur, err := c.d.Outbox.ListDead(ctx, d.Topic, after, PageSize)
		if err != nil {
			return c.unavailable(ec, "list the dead letters", err)
		}
		d.Letters = letters
		if cur != nil {
			next.Set("dead", "1")
			next.Set("after", pageLink(cur.DeadAt, cur.ID))
			d.Next = Prefix + "/outbox?" + next.Encode()
		}
		return c.render(ec, http.StatusOK, "outbox", view{Title: "Outbox dead letters", Nav: "outbox", Notice: outboxNotice(ec), Data: d})
	}
	// Keyset paging on (available_at, id): ties never skip a message.
	t, u, ok := pageAfter(ec.QueryParam("after"))
	if !ok {
		return c.fail(ec, http.StatusBadRequest, "That page link is not valid; open the list again.")
	}
	after := outbox.PendingCursor{AvailableAt: t, ID: u}
	msgs, cur, err := c.d.Outbox.ListPending(ctx, d.Topic, after, PageSize)
	if err != nil {
		return c.unavailable(ec, "read the outbox", err)
	}
	d.Messages = msgs
	if cur != nil {
		next.Set("after", pageLink(cur.AvailableAt, cur.ID))
		d.Next = Prefix + "/outbox?" + next.Encode()
	}
	return c.render(ec, http.StatusOK, "outbox", view{Title: "Outbox", Nav: "outbox", Data: d})
}

// pageAfter reads an outbox page link's "after" (time|id, as pageLink
// writes it); "" is the first page (zero values, ok).
func pageAfter(cur string) (time.Time, uuid.UUID, bool) {
	if cur == "" {
		return time.Time{}, uuid.UUID{}, true
	}
	at, id, ok := strings.Cut(cur, "|")
	t, terr := time.Parse(time.RFC3339Nano, at)
	u, uerr := uuid.Parse(id)
	if !ok || terr != nil || uerr != nil {
		return time.Time{}, uuid.UUID{}, false
	}
	return t, u, true
}

// pageLink writes the keyset position of an outbox page's last row.
func pageLink(at time.Time, id uuid.UUID) string {
	return at.UTC().Format(time.RFC3339Nano) + "|" + id.String()
}

// redriveDead re-drives one dead letter from its button: it is due again
// at once, with its attempts starting afresh, and keeps its id (the
// receiver deduplicates it).
func (c *Console) redriveDead(ec echo.Context) error {
	id, err := uuid.Parse(ec.Param("id"))
	if err != nil {
		return c.fail(ec, http.StatusBadRequest, "That is not an outbox message id; nothing was re-driven.")
	}
	back := url.Values{"dead": {"1"}}
	if t := ec.FormValue("topic"); t != "" && topicPattern.MatchString(t) {
		back.Set("topic", t)
	}
	switch err := c.d.Outbox.Redrive(ctxOf(ec), id); {
	case errors.Is(err, apperr.ErrNotFound):
		return c.refused(ec, err, "No outbox message "+id.String()+"; nothing was re-driven.")
	case errors.Is(err, apperr.ErrConflict): // not a dead letter
		back.Set("redriven", id.String())
		back.Set("result", "not-dead")
	case err != nil:
		return c.unavailable(ec, "re-drive the dead letter", err)
	default:
		c.d.Log.Info("console re-drove a dead letter", "outbox_id", id.String())
		back.Set("redriven", id.String())
		back.Set("result", "ok")
	}
	return ec.Redirect(http.StatusSeeOther, Prefix+"/outbox?"+back.Encode())
}

var topicPattern = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)

func (c *Console) runs(ec echo.Context) error {
	ctx := ctxOf(ec)
	runs, err := c.d.Runs.Last(ctx, 100)
	if err != nil {
		return c.unavailable(ec, "read the billing runs", err)
	}
	if err := c.attachQueueProgress(ctx, runs); err != nil {
		return c.unavailable(ec, "read the billing queue runs", err)
	}
	return c.render(ec, http.StatusOK, "runs", view{Title: "Billing runs", Nav: "billing", Data: runs})
}

// attachQueueProgress adds to each queued run its progress across
// replicas (the billing queue's workers record it as they go).
func (c *Console) attachQueueProgress(ctx context.Context, runs []opsdata.Run) error {
	if c.d.QueueRuns == nil {
		return nil
	}
	var ids []string
	for _, r := range runs {
		if r.QueueRun != "" {
			ids = append(ids, r.QueueRun)
		}
	}
	progress, err := c.d.QueueRuns.ProgressOf(ctx, ids)
	if err != nil {
		return err
	}
	for i := range runs {
		if p, ok := progress[runs[i].QueueRun]; ok {
			runs[i].Queue = &p
		}
	}
	return nil
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

// outboxNotice is the result a re-drive redirect carries.
func outboxNotice(ec echo.Context) string {
	id, err := uuid.Parse(ec.QueryParam("redriven"))
	if err != nil {
		return ""
	}
	switch ec.QueryParam("result") {
	case "ok":
		return "Re-driven: message " + id.String() + " is due again; the outbox worker delivers it (it keeps its id, so the receiver deduplicates it)."
	case "not-dead":
		return "Message " + id.String() + " is not a dead letter (re-driven or delivered already); nothing was changed."
	}
	return ""
}
