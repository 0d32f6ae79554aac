package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/replay"
	"github.com/stripe-payments/stripe-payments/internal/stripeid"
)

// ReplayService is what the bulk replay routes drive (replay.Store, with
// Nudge waking the background runner).
type ReplayService interface {
	DryRun(ctx context.Context, f replay.Filter) (replay.Preview, error)
	Start(ctx context.Context, f replay.Filter, actor string) (replay.Replay, error)
	Get(ctx context.Context, id string) (replay.Replay, error)
	Cancel(ctx context.Context, id, actor string) (replay.Replay, error)
}

// Replays are the bulk replay routes' dependencies.
type Replays struct {
	Service ReplayService
	// Nudge wakes the runner after a start (nil: it finds the replay on
	// its next poll).
	Nudge func()
}

type replayFilterJSON struct {
	Incident      string `json:"incident"`
	Status        string `json:"status"`
	Type          string `json:"type"`
	StripeAccount string `json:"stripe_account"`
	Since         string `json:"since"`
	Until         string `json:"until"`
}

type replayRequest struct {
	Filter *replayFilterJSON `json:"filter"`
	DryRun strictBool        `json:"dry_run"`
}

// strictBool is a bool that refuses JSON null: "dry_run": null must not
// quietly mean "start the replay".
type strictBool bool

func (b *strictBool) UnmarshalJSON(raw []byte) error {
	if string(raw) == "null" {
		return errors.New("dry_run must be true or false, not null")
	}
	var v bool
	if err := json.Unmarshal(raw, &v); err != nil {
		return errors.New("dry_run must be true or false")
	}
	*b = strictBool(v)
	return nil
}

// ReplaySampleJSON is one matched event of a dry run.
type ReplaySampleJSON struct {
	EventID       string `json:"event_id"`
	EventType     string `json:"event_type"`
	StripeAccount string `json:"stripe_account"`
	Status        string `json:"status"`
	Error         string `json:"error"`
	At            string `json:"at"`
	Would         string `json:"would"` // apply or duplicate
}

// ReplayJSON is a bulk replay's progress (docs/design.md §4), with its filter and
// who asked for it when.
type ReplayJSON struct {
	ID         string        `json:"id"`
	Status     string        `json:"status"`
	Matched    int           `json:"matched"`
	Done       int           `json:"done"`
	Applied    int           `json:"applied"`
	Failed     int           `json:"failed"`
	Filter     replay.Filter `json:"filter"`
	CreatedBy  string        `json:"created_by"`
	CreatedAt  string        `json:"created_at"`
	FinishedAt *string       `json:"finished_at"`
	// CancelledBy: who cancelled it (null unless status is cancelled);
	// finished_at says when.
	CancelledBy *string `json:"cancelled_by"`
}

// ReplayToJSON renders a replay.
func ReplayToJSON(r replay.Replay) ReplayJSON {
	out := ReplayJSON{ID: r.ID, Status: r.Status, Matched: r.Matched, Done: r.Done, Applied: r.Applied, Failed: r.Failed,
		Filter: r.Filter, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt.UTC().Format(time.RFC3339Nano)}
	if !r.FinishedAt.IsZero() {
		s := r.FinishedAt.UTC().Format(time.RFC3339Nano)
		out.FinishedAt = &s
	}
	if r.CancelledBy != "" {
		out.CancelledBy = &r.CancelledBy
	}
	return out
}

var (
	replayIDPattern  = regexp.MustCompile(`^rpl_[0-9a-f]{24}$`)
	eventTypePattern = regexp.MustCompile(`^[a-z0-9_]+(\.[a-z0-9_]+)+$`)
	deadTypePattern  = regexp.MustCompile(`^[a-z0-9_]+/[a-z0-9_.-]+$`)
)

type replayRoutes struct{ r Replays }

func registerReplays(g router, r *Replays) {
	if r == nil || r.Service == nil {
		return
	}
	rr := replayRoutes{r: *r}
	g.POST("/replays", rr.create)
	g.GET("/replays/:id", rr.get)
	g.POST("/replays/:id/cancel", rr.cancel)
}

// ParseReplayFilter validates a filter as the API and the console take it.
func ParseReplayFilter(in replayFilterJSON) (replay.Filter, error) {
	f := replay.Filter{Incident: in.Incident, Status: in.Status, Type: in.Type, StripeAccount: in.StripeAccount}
	if f.Incident != "" && !incidentIDPattern.MatchString(f.Incident) {
		return f, apperr.Invalid("filter.incident: an incident id (inc_ and 20 hex digits)")
	}
	if !replay.ValidFilterStatus(f.Status) {
		return f, apperr.Invalid("filter.status must be failed, rejected or dead (outbox dead letters)")
	}
	switch {
	case f.Type == "":
	case f.Status == replay.StatusDead && (len(f.Type) > 200 || !deadTypePattern.MatchString(f.Type)):
		return f, apperr.Invalid("filter.type of dead letters: an outbox topic/type such as actions/purchase.completed")
	case f.Status != replay.StatusDead && (len(f.Type) > 100 || !eventTypePattern.MatchString(f.Type)):
		return f, apperr.Invalid("filter.type: a Stripe event type such as invoice.paid")
	}
	if f.Status == replay.StatusDead && f.StripeAccount != "" {
		return f, apperr.Invalid("filter.stripe_account: dead letters have no stripe_account")
	}
	if f.StripeAccount != "" && !stripeid.Valid(f.StripeAccount, "acct_") {
		return f, apperr.Invalid("filter.stripe_account must be an acct_ id")
	}
	for _, tc := range []struct {
		name, raw string
		dst       **time.Time
	}{{"since", in.Since, &f.Since}, {"until", in.Until, &f.Until}} {
		if tc.raw == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, tc.raw)
		if err != nil {
			return f, apperr.Invalid("filter.%s must be an RFC 3339 timestamp", tc.name)
		}
		t = t.UTC()
		*tc.dst = &t
	}
	if f.Since != nil && f.Until != nil && !f.Since.Before(*f.Until) {
		return f, apperr.Invalid("filter.since must be before filter.until")
	}
	if f.Empty() {
		return f, apperr.Invalid("an empty filter without a time range would replay everything: name an incident, status, type, stripe_account, since or until")
	}
	return f, nil
}

func (h replayRoutes) create(c echo.Context) error {
	var req replayRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.Filter == nil {
		return apperr.Invalid("filter: required")
	}
	f, err := ParseReplayFilter(*req.Filter)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if req.DryRun {
		p, err := h.r.Service.DryRun(ctx, f)
		if err != nil {
			return apperr.Ensure(err, apperr.CodeUnavailable, "could not read or start the replay")
		}
		sample := make([]ReplaySampleJSON, 0, len(p.Sample))
		for _, it := range p.Sample {
			sample = append(sample, ReplaySampleJSON{EventID: it.EventID, EventType: it.EventType, StripeAccount: it.StripeAccount,
				Status: it.Status, Error: it.Error, At: it.At.UTC().Format(time.RFC3339Nano), Would: it.Would})
		}
		return c.JSON(http.StatusOK, map[string]any{"matched": p.Matched, "sample": sample})
	}
	r, err := h.r.Service.Start(ctx, f, APIActor)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "could not read or start the replay")
	}
	if h.r.Nudge != nil {
		h.r.Nudge()
	}
	return c.JSON(http.StatusAccepted, map[string]any{"id": r.ID, "status": r.Status, "matched": r.Matched})
}

// replayPath reads a replay route's id (no query parameter is taken).
func replayPath(c echo.Context) (string, error) {
	if _, err := requestParams(c); err != nil {
		return "", err
	}
	id := c.Param("id")
	if !replayIDPattern.MatchString(id) {
		return "", apperr.Invalid("id: a replay id (rpl_ and 24 hex digits)")
	}
	return id, nil
}

func (h replayRoutes) get(c echo.Context) error {
	id, err := replayPath(c)
	if err != nil {
		return err
	}
	r, err := h.r.Service.Get(c.Request().Context(), id)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "could not read or start the replay")
	}
	return c.JSON(http.StatusOK, ReplayToJSON(r))
}

// cancel stops a running replay (200 with it, status cancelled); 409 when
// it is done or cancelled already, and nothing changes.
func (h replayRoutes) cancel(c echo.Context) error {
	id, err := replayPath(c)
	if err != nil {
		return err
	}
	r, err := h.r.Service.Cancel(c.Request().Context(), id, APIActor)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "could not read or start the replay")
	}
	return c.JSON(http.StatusOK, ReplayToJSON(r))
}
