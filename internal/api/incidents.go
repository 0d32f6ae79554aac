package api

import (
	"context"
	"encoding/base64"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/incidents"
)

// IncidentService is what the incident routes drive (incidents.Store).
type IncidentService interface {
	List(ctx context.Context, state incidents.State) ([]incidents.Incident, error)
	SetState(ctx context.Context, id string, to incidents.State, actor string) (incidents.Incident, error)
}

// APIActor is who an incident's audit row names for a change made through
// the internal API (the bearer token holder).
const APIActor = "internal-api"

// IncidentJSON is an incident (docs/design.md §4), plus who changed its state last
// and when (null while never changed).
type IncidentJSON struct {
	ID            string   `json:"id"`
	Kind          string   `json:"kind"`
	Cause         string   `json:"cause"`
	EventType     string   `json:"event_type"`
	StripeAccount *string  `json:"stripe_account"` // null for delivery and billing incidents
	Count         int64    `json:"count"`
	FirstSeen     *string  `json:"first_seen"` // null when nothing currently fails
	LastSeen      *string  `json:"last_seen"`
	State         string   `json:"state"`
	StateChanged  *string  `json:"state_changed_at"`
	StateBy       *string  `json:"state_changed_by"`
	SampleIDs     []string `json:"sample_ids"`
	// What the operator reads (incidents.Describe): the cause in words,
	// one line of what to do, the runbook's path in the repository, and
	// whether a replay can succeed now (false for a rejection: a replay is
	// rejected again until the cause is fixed).
	Title      string `json:"title"`
	Action     string `json:"action"`
	Runbook    string `json:"runbook"`
	Replayable bool   `json:"replayable"`
}

// IncidentToJSON renders an incident.
func IncidentToJSON(i incidents.Incident) IncidentJSON {
	ts := func(t time.Time) *string {
		if t.IsZero() {
			return nil
		}
		s := t.UTC().Format(time.RFC3339Nano)
		return &s
	}
	out := IncidentJSON{ID: i.ID, Kind: string(i.Kind), Cause: i.Cause, EventType: i.EventType, Count: i.Count,
		FirstSeen: ts(i.FirstSeen), LastSeen: ts(i.LastSeen), State: string(i.State), StateChanged: ts(i.StateAt),
		SampleIDs: i.SampleIDs}
	g := incidents.Describe(i)
	out.Title, out.Action, out.Runbook, out.Replayable = g.Title, g.Action, g.Runbook, g.Replayable
	if i.StripeAccount != "" {
		out.StripeAccount = &i.StripeAccount
	}
	if i.StateBy != "" {
		out.StateBy = &i.StateBy
	}
	if out.SampleIDs == nil {
		out.SampleIDs = []string{}
	}
	return out
}

var incidentIDPattern = regexp.MustCompile(`^inc_[0-9a-f]{20}$`)

type incidentRoutes struct{ svc IncidentService }

func registerIncidents(g router, svc IncidentService) {
	if svc == nil {
		return
	}
	r := incidentRoutes{svc: svc}
	g.GET("/incidents", r.list)
	g.PATCH("/incidents/:id", r.patch)
}

func (r incidentRoutes) list(c echo.Context) error {
	q, err := requestParams(c, "state", "limit", "cursor")
	if err != nil {
		return err
	}
	var state incidents.State
	if raw, given := q["state"]; given {
		var ok bool
		if state, ok = incidents.ParseState(raw); !ok {
			return apperr.Invalid("state must be open, acknowledged or resolved")
		}
	}
	limit, offset, err := pageOf(q, decodeOffsetCursor)
	if err != nil {
		return err
	}
	list, err := r.svc.List(c.Request().Context(), state)
	if err != nil {
		return apperr.Wrap(err, apperr.CodeUnavailable, "could not list incidents")
	}
	if offset > len(list) {
		offset = len(list)
	}
	page, next := list[offset:], ""
	if len(page) > int(limit) {
		page, next = page[:limit], encodeOffsetCursor(offset+int(limit))
	}
	return c.JSON(http.StatusOK, listOf(page, next, IncidentToJSON))
}

type patchIncidentRequest struct {
	State *string `json:"state"`
}

func (r incidentRoutes) patch(c echo.Context) error {
	id := c.Param("id")
	if !incidentIDPattern.MatchString(id) {
		return apperr.Invalid("id: an incident id (inc_ and 20 hex digits)")
	}
	var req patchIncidentRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.State == nil {
		return apperr.Invalid("state: required, acknowledged or resolved")
	}
	to, ok := incidents.ParseState(*req.State)
	if !ok || to == incidents.Open {
		return apperr.Invalid("state must be acknowledged or resolved (an incident reopens by itself when its cause comes back)")
	}
	inc, err := r.svc.SetState(c.Request().Context(), id, to, APIActor)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "could not change incident %s", id)
	}
	return c.JSON(http.StatusOK, IncidentToJSON(inc))
}

func encodeOffsetCursor(n int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("o" + strconv.Itoa(n)))
}

func decodeOffsetCursor(s string) (int, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(raw) < 2 || raw[0] != 'o' {
		return 0, apperr.Invalid("invalid cursor")
	}
	n, err := strconv.Atoi(string(raw[1:]))
	if err != nil || n < 0 {
		return 0, apperr.Invalid("invalid cursor")
	}
	return n, nil
}
