package api

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
)

// TestClocks is the test-clock service (testclock.Service) behind the
// test-clock routes.
type TestClocks interface {
	CreateClock(ctx context.Context, frozen time.Time, name string) (billing.Clock, error)
	GetClock(ctx context.Context, id string, runs int32) (billing.Clock, []billing.ClockRun, error)
	ListClocks(ctx context.Context) ([]billing.Clock, error)
	AdvanceClock(ctx, life context.Context, id string, to time.Time) (billing.Clock, <-chan struct{}, error)
	DeleteClock(ctx context.Context, id string) error
}

// AdvanceWait is how long an advance request waits for the advance before
// answering 202 (docs/design.md §4: 10 s).
const AdvanceWait = 10 * time.Second

// clockRuns is how many runs a clock's JSON shows (the latest).
const clockRuns = 100

// registerTestClocks mounts the test-clock routes of docs/design.md §4. With a live
// Stripe key every one answers 403 livemode before looking at anything.
func registerTestClocks(g router, svc TestClocks, livemode bool, background context.Context, wait time.Duration) {
	h := clockRoutes{svc: svc, background: background, wait: wait}
	guard := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if livemode {
				return billing.ErrLivemode
			}
			return next(c)
		}
	}
	g.POST("/test_clocks", guard(h.create))
	g.GET("/test_clocks", guard(h.list))
	g.GET("/test_clocks/:id", guard(h.get))
	g.POST("/test_clocks/:id/advance", guard(h.advance))
	g.DELETE("/test_clocks/:id", guard(h.delete))
}

type clockRoutes struct {
	svc        TestClocks
	background context.Context
	wait       time.Duration
}

// TestClock is the JSON shape of a test clock (docs/design.md §4), after Stripe's.
type TestClock struct {
	ID         string `json:"id"`
	Object     string `json:"object"`
	FrozenTime string `json:"frozen_time"`
	Status     string `json:"status"`
	Name       string `json:"name"`
	Created    string `json:"created"`
	// AdvancedTo is how far the jobs have run (frozen_time once ready).
	AdvancedTo string `json:"advanced_to"`
	// Error says why the last advance stopped (status internal_failure).
	Error *string        `json:"error"`
	Runs  []TestClockRun `json:"runs"`
}

// TestClockRun is one day of an advance: the jobs run at time for date.
type TestClockRun struct {
	Time          string  `json:"time"`
	Date          string  `json:"date"`
	Entries       int     `json:"entries"`
	Reminded      int     `json:"reminders_sent"`
	Charged       int     `json:"charges_succeeded"`
	Processing    int     `json:"charges_processing"`
	Declined      int     `json:"declines"`
	Stale         int     `json:"stale"`
	PausedSkipped int     `json:"paused_skipped"`
	Unresolved    int     `json:"unresolved"`
	Errors        int     `json:"errors"`
	Error         *string `json:"error"`
	// DebitsSettled: bank debits whose outcome came while the clock stood
	// on their settlement day; DebitsUnsettled: those it waited for in vain.
	DebitsSettled   int `json:"debits_settled"`
	DebitsUnsettled int `json:"debits_unsettled"`
}

// TestClockJSON renders a clock and its latest runs.
func TestClockJSON(c billing.Clock, runs []billing.ClockRun) TestClock {
	out := TestClock{
		ID: c.ID, Object: "test_clock", FrozenTime: c.FrozenTime.UTC().Format(time.RFC3339), Status: string(c.Status),
		Name: c.Name, Created: c.CreatedAt.UTC().Format(time.RFC3339), AdvancedTo: c.ReachedTime.UTC().Format(time.RFC3339),
		Error: optString(c.Error), Runs: make([]TestClockRun, 0, len(runs)),
	}
	for _, r := range runs {
		out.Runs = append(out.Runs, TestClockRun{
			Time: r.Time.UTC().Format(time.RFC3339), Date: r.Date.String(), Entries: r.Entries, Reminded: r.Reminded,
			Charged: r.Charged, Processing: r.Processing, Declined: r.Declined, Stale: r.Stale,
			PausedSkipped: r.PausedSkipped, Unresolved: r.Unresolved, Errors: r.Errors, Error: optString(r.Error),
			DebitsSettled: r.DebitsSettled, DebitsUnsettled: r.DebitsUnsettled,
		})
	}
	return out
}

type clockRequest struct {
	FrozenTime *string `json:"frozen_time"`
	Name       *string `json:"name"`
}

func (r clockRequest) frozenTime() (time.Time, error) {
	if r.FrozenTime == nil {
		return time.Time{}, apperr.Invalid("frozen_time: required (RFC 3339)")
	}
	t, err := time.Parse(time.RFC3339, *r.FrozenTime)
	if err != nil {
		return time.Time{}, apperr.Invalid("frozen_time: an RFC 3339 time, e.g. 2027-01-01T00:00:00Z")
	}
	return t, nil
}

func (h clockRoutes) create(c echo.Context) error {
	var req clockRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	at, err := req.frozenTime()
	if err != nil {
		return err
	}
	name := ""
	if req.Name != nil {
		name = *req.Name
	}
	clock, err := h.svc.CreateClock(c.Request().Context(), at, name)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "billing is unavailable")
	}
	return c.JSON(http.StatusCreated, TestClockJSON(clock, nil))
}

// list answers every clock, newest first, without runs (a handful: no paging).
func (h clockRoutes) list(c echo.Context) error {
	if len(c.QueryParams()) > 0 {
		return apperr.Invalid("no query parameters are accepted")
	}
	clocks, err := h.svc.ListClocks(c.Request().Context())
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "billing is unavailable")
	}
	out := make([]TestClock, 0, len(clocks))
	for _, clock := range clocks {
		out = append(out, TestClockJSON(clock, nil))
	}
	return c.JSON(http.StatusOK, map[string]any{"data": out, "next_cursor": nil})
}

func (h clockRoutes) get(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	if len(c.QueryParams()) > 0 {
		return apperr.Invalid("no query parameters are accepted")
	}
	clock, runs, err := h.svc.GetClock(c.Request().Context(), id, clockRuns)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "billing is unavailable")
	}
	return c.JSON(http.StatusOK, TestClockJSON(clock, runs))
}

// advance answers 200 with the clock once the advance is done, or 202 with
// it advancing when that takes longer than h.wait; GET tells when it is
// ready. The advance goes on whatever the client does.
func (h clockRoutes) advance(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req clockRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.Name != nil {
		return apperr.Invalid("advance takes frozen_time only")
	}
	to, err := req.frozenTime()
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	_, done, err := h.svc.AdvanceClock(ctx, h.background, id, to)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "billing is unavailable")
	}
	status := http.StatusOK
	timer := time.NewTimer(h.wait)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		status = http.StatusAccepted
	case <-ctx.Done():
		return ctx.Err()
	}
	clock, runs, err := h.svc.GetClock(context.WithoutCancel(ctx), id, clockRuns)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "billing is unavailable")
	}
	return c.JSON(status, TestClockJSON(clock, runs))
}

func (h clockRoutes) delete(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	if len(c.QueryParams()) > 0 {
		return apperr.Invalid("no query parameters are accepted")
	}
	if err := h.svc.DeleteClock(c.Request().Context(), id); err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "billing is unavailable")
	}
	return c.JSON(http.StatusOK, map[string]any{"id": id, "object": "test_clock", "deleted": true})
}
