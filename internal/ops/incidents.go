package ops

import (
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/incidents"
	"github.com/stripe-payments/stripe-payments/internal/replay"
)

// ConsoleActor is who an incident's audit row and a replay name for a
// change made from the console.
const ConsoleActor = "console"

var (
	incidentIDRe = regexp.MustCompile(`^inc_[0-9a-f]{20}$`)
	replayIDRe   = regexp.MustCompile(`^rpl_[0-9a-f]{24}$`)
)

func (c *Console) registerIncidents(g *echo.Group) {
	if c.d.Incidents == nil {
		return
	}
	g.GET("/incidents", c.incidentList, c.auth)
	g.GET("/incidents/:id", c.incidentPage, c.auth)
	g.POST("/incidents/:id/state", c.incidentState, c.auth)
	if c.d.Replays != nil {
		g.POST("/incidents/:id/replay", c.incidentReplay, c.auth)
		g.GET("/replays/:id", c.replayPage, c.auth)
		g.POST("/replays/:id/cancel", c.replayCancel, c.auth)
	}
}

type incidentListData struct {
	State     string
	States    []string
	Incidents []incidents.Incident
}

func (c *Console) incidentList(ec echo.Context) error {
	state := ec.QueryParam("state")
	st, ok := incidents.ParseState(state)
	if state != "" && !ok {
		return c.fail(ec, http.StatusBadRequest, "Unknown state: choose open, acknowledged or resolved.")
	}
	list, err := c.d.Incidents.List(ctxOf(ec), st)
	if err != nil {
		return c.unavailable(ec, "list the incidents", err)
	}
	return c.render(ec, http.StatusOK, "incidents", view{Title: "Incidents", Nav: "incidents",
		Data: incidentListData{State: state, States: []string{"open", "acknowledged", "resolved"}, Incidents: list}})
}

type incidentData struct {
	Incident incidents.Incident
	Audit    []incidents.AuditEntry
	// Guide is the incident in words: title, what to do, runbook.
	Guide incidents.Guide
	// Replayable: the console offers Replay (a replay can succeed and
	// there is something to replay).
	Replayable bool
	// NoReplay says why Replay is not offered where an operator would
	// look for it ("" when it is, or nothing fails).
	NoReplay string
	// Preview is the dry run shown before the replay is confirmed.
	Preview *replay.Preview
	// Samples are the incident's sample ids with the page each opens
	// ("" none).
	Samples []sampleLink
}

type sampleLink struct{ ID, Href string }

// sampleLinks links each sample to its page: an event's, the subscription
// of a charge whose outcome is unknown ("<account>/<subscription_id>"), the
// runs page for a billing run.
func sampleLinks(inc incidents.Incident) []sampleLink {
	out := make([]sampleLink, 0, len(inc.SampleIDs))
	for _, id := range inc.SampleIDs {
		l := sampleLink{ID: id}
		switch {
		case inc.Kind == incidents.KindEvent:
			l.Href = Prefix + "/events/" + url.PathEscape(id)
		case inc.Kind == incidents.KindBilling && strings.Count(id, "/") == 1:
			account, sub, _ := strings.Cut(id, "/")
			l.Href = Prefix + "/billing/" + url.PathEscape(account) + "/" + url.PathEscape(sub)
		case inc.Kind == incidents.KindBilling:
			l.Href = Prefix + "/runs"
		}
		out = append(out, l)
	}
	return out
}

func (c *Console) incidentPage(ec echo.Context) error {
	return c.showIncident(ec, http.StatusOK, nil, "", "")
}

func (c *Console) showIncident(ec echo.Context, status int, preview *replay.Preview, notice, errMsg string) error {
	id := ec.Param("id")
	if !incidentIDRe.MatchString(id) {
		return c.fail(ec, http.StatusBadRequest, "That is not an incident id.")
	}
	ctx := ctxOf(ec)
	inc, err := c.d.Incidents.Get(ctx, id)
	if errors.Is(err, apperr.ErrNotFound) {
		return c.refused(ec, err, "No incident "+id+": what failed may have been replayed since.")
	}
	if err != nil {
		return c.unavailable(ec, "read the incident", err)
	}
	audit, err := c.d.Incidents.Audit(ctx, id)
	if err != nil {
		return c.unavailable(ec, "read the incident's history", err)
	}
	if notice == "" {
		notice = ec.QueryParam("notice")
	}
	g := incidents.Describe(inc)
	d := incidentData{Incident: inc, Audit: audit, Preview: preview, Samples: sampleLinks(inc), Guide: g,
		Replayable: c.d.Replays != nil && inc.Count > 0 && g.Replayable}
	if c.d.Replays != nil && inc.Count > 0 && !g.Replayable {
		d.NoReplay = noReplay(inc)
	}
	return c.render(ec, status, "incident", view{Title: g.Title, Nav: "incidents", Notice: notice, Error: errMsg, Data: d})
}

// noReplay is why an incident offers no Replay.
func noReplay(inc incidents.Incident) string {
	switch {
	case inc.Kind == incidents.KindBilling:
		return "No Replay: a billing incident is settled by rerunning its job for the same date."
	case strings.HasPrefix(inc.Cause, "hydration."):
		return "No Replay: the hydrator fetches these thin events by itself."
	case strings.HasPrefix(inc.Cause, "rejected."):
		return "No Replay: a replay would be rejected again, since the payload and the code are unchanged. " +
			"Fix the cause first (see what to do above); once the fix is deployed, replay each event from its page, " +
			"or all of them with POST /internal/v1/replays {\"filter\":{\"incident\":\"" + inc.ID + "\"}}."
	}
	return "No Replay: a replay cannot succeed for this cause."
}

func (c *Console) incidentState(ec echo.Context) error {
	id := ec.Param("id")
	if !incidentIDRe.MatchString(id) {
		return c.fail(ec, http.StatusBadRequest, "That is not an incident id.")
	}
	to := incidents.State(ec.FormValue("state"))
	if to != incidents.Acknowledged && to != incidents.Resolved {
		return c.fail(ec, http.StatusBadRequest, "An incident can be acknowledged or resolved; nothing was changed.")
	}
	_, err := c.d.Incidents.SetState(ctxOf(ec), id, to, ConsoleActor)
	switch {
	case errors.Is(err, apperr.ErrNotFound):
		return c.refused(ec, err, "No incident "+id+"; nothing was changed.")
	case errors.Is(err, apperr.ErrConflict): // a resolved incident, the one conflict of SetState
		return c.showIncident(ec, statusOf(err), nil, "", "A resolved incident is not acknowledged: it reopens by itself when its cause comes back. Nothing was changed.")
	case err != nil:
		return c.unavailable(ec, "change the incident", err)
	}
	return ec.Redirect(http.StatusSeeOther, Prefix+"/incidents/"+id+"?notice="+url.QueryEscape("Incident "+string(to)+"."))
}

// incidentReplay is the two steps of a bulk replay: without confirm, a dry
// run shown on the incident page; with confirm, the replay starts.
func (c *Console) incidentReplay(ec echo.Context) error {
	id := ec.Param("id")
	if !incidentIDRe.MatchString(id) {
		return c.fail(ec, http.StatusBadRequest, "That is not an incident id.")
	}
	ctx := ctxOf(ec)
	f := replay.Filter{Incident: id}
	if ec.FormValue("confirm") != "yes" {
		p, err := c.d.Replays.DryRun(ctx, f)
		if errors.Is(err, apperr.ErrInvalid) {
			return c.showIncident(ec, statusOf(err), nil, "", filterMessage(err))
		}
		if err != nil {
			return c.unavailable(ec, "run the dry run", err)
		}
		return c.showIncident(ec, http.StatusOK, &p, "", "")
	}
	r, err := c.d.Replays.Start(ctx, f, ConsoleActor)
	// A filter the store refuses, or a replay over the most that run at
	// once: the operator's answer, on the incident's page.
	if errors.Is(err, apperr.ErrInvalid) || errors.Is(err, apperr.ErrConflict) {
		return c.showIncident(ec, statusOf(err), nil, "", filterMessage(err)+" Nothing was started.")
	}
	if err != nil {
		return c.unavailable(ec, "start the replay", err)
	}
	if c.d.ReplayNudge != nil {
		c.d.ReplayNudge()
	}
	return ec.Redirect(http.StatusSeeOther, Prefix+"/replays/"+r.ID)
}

// filterMessage is why a filter was refused.
func filterMessage(err error) string { return apperr.From(err).Message }

func (c *Console) replayPage(ec echo.Context) error {
	id := ec.Param("id")
	if !replayIDRe.MatchString(id) {
		return c.fail(ec, http.StatusBadRequest, "That is not a replay id.")
	}
	r, err := c.d.Replays.Get(ctxOf(ec), id)
	if errors.Is(err, apperr.ErrNotFound) {
		return c.refused(ec, err, "No replay "+id+".")
	}
	if err != nil {
		return c.unavailable(ec, "read the replay", err)
	}
	if r.Status == replay.StatusRunning {
		ec.Response().Header().Set("Refresh", "2")
	}
	d := replayData{Replay: r}
	// Why items failed again: the cause their incident still groups them
	// under (each event's own error is on its page).
	if r.Failed > 0 && r.Filter.Incident != "" {
		if inc, err := c.d.Incidents.Get(ctxOf(ec), r.Filter.Incident); err == nil && inc.Count > 0 {
			d.FailedCause, d.FailedSamples = inc.Cause, inc.SampleIDs
			d.FailedKind = string(inc.Kind)
		}
	}
	return c.render(ec, http.StatusOK, "replay", view{Title: "Replay " + id, Nav: "incidents", Data: d})
}

// replayData is a bulk replay's progress and, when items failed again, why.
type replayData struct {
	replay.Replay
	FailedCause   string
	FailedKind    string
	FailedSamples []string
}

// replayCancel stops a running replay; the page then shows it cancelled,
// with who and when.
func (c *Console) replayCancel(ec echo.Context) error {
	id := ec.Param("id")
	if !replayIDRe.MatchString(id) {
		return c.fail(ec, http.StatusBadRequest, "That is not a replay id.")
	}
	r, err := c.d.Replays.Cancel(ctxOf(ec), id, ConsoleActor)
	switch {
	case errors.Is(err, apperr.ErrNotFound):
		return c.refused(ec, err, "No replay "+id+"; nothing was changed.")
	case errors.Is(err, apperr.ErrConflict):
		return c.refused(ec, err, "Replay "+id+" is "+r.Status+": only a running replay can be cancelled. Nothing was changed.")
	case err != nil:
		return c.unavailable(ec, "cancel the replay", err)
	}
	return ec.Redirect(http.StatusSeeOther, Prefix+"/replays/"+id)
}
