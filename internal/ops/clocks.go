package ops

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/testclock"
)

// Test clocks in the console: list, create, advance and delete, in test
// mode only (Stripe has no test clocks in live mode). An advance outlives its request (it runs within
// Deps.Clocks); the page then shows how far it got, and a refresh follows it.

// clockAdvanceWait is how long the console waits for an advance before
// showing the clock page with the advance still running: long enough for a
// few months of a handful of subscriptions, short enough for a page load.
const clockAdvanceWait = 3 * time.Second

// clockRuns is how many runs a clock page shows (the latest).
const clockRuns = 100

// clockTimeLayouts are the times a form may send, all read as UTC: what a
// datetime-local input sends (with or without seconds), RFC 3339, a date.
var clockTimeLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339, "2006-01-02"}

// clockTimeInput is how a time is written into a datetime-local input.
const clockTimeInput = "2006-01-02T15:04"

func parseClockTime(s string) (time.Time, string) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, "Enter a time (UTC), e.g. 2027-01-01T00:00."
	}
	for _, layout := range clockTimeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), ""
		}
	}
	return time.Time{}, "“" + s + "” is not a time: write it as 2027-01-01T00:00 (UTC)."
}

// clocksOn: the test-clock service is there; in live mode the routes refuse.
func (c *Console) clocksOn() bool { return c.d.TestClocks != nil && !c.d.Livemode }

func (c *Console) registerClocks(g *echo.Group) {
	testMode := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(ec echo.Context) error {
			if c.d.Livemode {
				return c.fail(ec, http.StatusForbidden, "Test clocks exist in test mode only: this service runs with a live Stripe key.")
			}
			return next(ec)
		}
	}
	g.GET("/clocks", c.clockList, c.auth, testMode)
	g.POST("/clocks", c.clockCreate, c.auth, testMode)
	g.GET("/clocks/:id", c.clockPage, c.auth, testMode)
	g.GET("/clocks/:id/confirm", c.clockConfirm, c.auth, testMode)
	g.POST("/clocks/:id/action", c.clockAction, c.auth, testMode)
}

func clockPath(id string) string { return Prefix + "/clocks/" + url.PathEscape(id) }

type clockListData struct {
	Clocks []billing.Clock
	// Form values to show again after a refused create.
	FrozenTime string
	Name       string
}

func (c *Console) clockList(ec echo.Context) error {
	return c.renderClockList(ec, http.StatusOK, "", clockListData{FrozenTime: c.d.Now().UTC().Format("2006-01-02") + "T00:00"})
}

func (c *Console) renderClockList(ec echo.Context, status int, msg string, d clockListData) error {
	clocks, err := c.d.TestClocks.ListClocks(ctxOf(ec))
	if err != nil {
		return c.unavailable(ec, "list the test clocks", err)
	}
	d.Clocks = clocks
	notice := ""
	if ec.QueryParam("done") == "delete" {
		notice = "The test clock is deleted; its subscriptions are cancelled."
	}
	return c.render(ec, status, "clocks", view{Title: "Test clocks", Nav: "clocks", Error: msg, Notice: notice, Data: d})
}

func (c *Console) clockCreate(ec echo.Context) error {
	r := ec.Request()
	form := clockListData{FrozenTime: r.PostFormValue("frozen_time"), Name: r.PostFormValue("name")}
	at, msg := parseClockTime(form.FrozenTime)
	if msg != "" {
		return c.renderClockList(ec, http.StatusBadRequest, msg+" No clock was created.", form)
	}
	clock, err := c.d.TestClocks.CreateClock(ctxOf(ec), at, strings.TrimSpace(form.Name))
	switch {
	case errors.Is(err, apperr.ErrInvalid), errors.Is(err, testclock.ErrTooManyClocks):
		return c.renderClockList(ec, statusOf(err), "Refused: "+reason(err)+". No clock was created.", form)
	case err != nil:
		return c.unavailable(ec, "create the test clock", err)
	}
	c.d.Log.Info("console test clock created", "test_clock", clock.ID)
	return ec.Redirect(http.StatusSeeOther, clockPath(clock.ID)+"?done=create")
}

type clockData struct {
	Clock billing.Clock
	Runs  []billing.ClockRun
	Subs  []billing.Subscription
	// Advance is the advance form's value: what was asked, or a month on.
	Advance string
}

// Busy: an advance runs; the forms wait for it.
func (d clockData) Busy() bool { return d.Clock.Status == billing.ClockAdvancing }

// readClock reads a clock page's data; ok false when it answered already.
func (c *Console) readClock(ec echo.Context) (clockData, bool, error) {
	id := ec.Param("id")
	if !billingIDPattern.MatchString(id) {
		return clockData{}, false, c.fail(ec, http.StatusBadRequest, "Not a test clock id.")
	}
	ctx := ctxOf(ec)
	clock, runs, err := c.d.TestClocks.GetClock(ctx, id, clockRuns)
	if isNotFound(err) {
		return clockData{}, false, c.refused(ec, err, "No test clock "+id+" (deleted, or never created).")
	}
	if err != nil {
		return clockData{}, false, c.unavailable(ec, "read the test clock", err)
	}
	subs, err := c.d.TestClocks.ClockSubscriptions(ctx, id)
	if err != nil {
		return clockData{}, false, c.unavailable(ec, "read the test clock's subscriptions", err)
	}
	return clockData{Clock: clock, Runs: runs, Subs: subs,
		Advance: clock.FrozenTime.AddDate(0, 1, 0).Format(clockTimeInput)}, true, nil
}

func (c *Console) clockPage(ec echo.Context) error {
	d, ok, err := c.readClock(ec)
	if !ok {
		return err
	}
	notice := ""
	switch ec.QueryParam("done") {
	case "create":
		notice = "The test clock is created. Create subscriptions on it with \"test_clock\": \"" + d.Clock.ID + "\", then advance it."
	case "advance":
		switch d.Clock.Status {
		case billing.ClockReady:
			notice = "Advanced: every day's reminders and collections up to " + d.Clock.FrozenTime.Format(time.RFC3339) + " ran."
		} // advancing: the page says so and how far it got
	}
	return c.renderClock(ec, http.StatusOK, "", notice, d)
}

func (c *Console) renderClock(ec echo.Context, status int, msg, notice string, d clockData) error {
	title := "Test clock " + d.Clock.ID
	if d.Clock.Name != "" {
		title = "Test clock “" + d.Clock.Name + "”"
	}
	return c.render(ec, status, "clock", view{Title: title, Nav: "clocks", Error: msg, Notice: notice, Data: d})
}

// clockAct is an operator's change to a clock, from a query or a form.
type clockAct struct {
	Name string
	To   time.Time
}

func readClockAct(get func(string) string) (clockAct, string) {
	a := clockAct{Name: get("action")}
	switch a.Name {
	case "advance":
		to, msg := parseClockTime(get("frozen_time"))
		if msg != "" {
			return a, msg
		}
		a.To = to.Truncate(time.Second)
	case "delete":
	default:
		return a, "Unknown action."
	}
	return a, ""
}

// advanceRefused says why an advance of clock to to would be refused, as
// AdvanceClock decides (it decides again when confirmed), or "".
func advanceRefused(clock billing.Clock, to time.Time) string {
	current := clock.FrozenTime
	if clock.Status != billing.ClockReady {
		current = clock.ReachedTime // a stopped advance goes on from where it got
	}
	switch {
	case clock.Status == billing.ClockAdvancing:
		return "The clock is advancing; wait until it is ready (refresh this page)."
	case !to.After(current):
		return "Advance to a time later than the clock's " + current.Format(time.RFC3339) + "."
	case to.After(clock.ReachedTime.AddDate(testclock.MaxAdvanceYears, 0, 0)):
		return "One advance is at most 3 years: advance to " + clock.ReachedTime.AddDate(testclock.MaxAdvanceYears, 0, 0).Format(time.RFC3339) + " or earlier, then again."
	}
	return ""
}

type clockConfirmData struct {
	Clock  billing.Clock
	Action clockAct
	Subs   int
}

// Describe says what the action does, for the confirmation page.
func (d clockConfirmData) Describe() string {
	switch d.Action.Name {
	case "advance":
		days := int(d.Action.To.Sub(d.Clock.ReachedTime).Hours() / 24)
		return "Advance the clock to " + d.Action.To.Format(time.RFC3339) + " (" + plural(days, "day") +
			"): every reminder and collection due in between runs for its " + plural(d.Subs, "subscription") +
			", charging their payment methods on the test key."
	case "delete":
		verb := " are"
		if d.Subs == 1 {
			verb = " is"
		}
		return "Delete the clock: the " + plural(d.Subs, "subscription") + " on it" + verb +
			" cancelled (their history says test-clock-deleted) and the clock is removed. This cannot be undone."
	}
	return ""
}

// clockConfirm asks before a change; bad input shows on the clock page.
func (c *Console) clockConfirm(ec echo.Context) error {
	d, ok, err := c.readClock(ec)
	if !ok {
		return err
	}
	a, msg := readClockAct(ec.QueryParam)
	if a.Name == "advance" && msg == "" {
		msg = advanceRefused(d.Clock, a.To)
	}
	if msg != "" {
		if raw := ec.QueryParam("frozen_time"); raw != "" {
			d.Advance = raw
		}
		return c.renderClock(ec, http.StatusBadRequest, msg+" Nothing was changed.", "", d)
	}
	if a.Name == "delete" && d.Busy() {
		return c.renderClock(ec, http.StatusConflict, "The clock is advancing; delete it once it is ready. Nothing was changed.", "", d)
	}
	return c.render(ec, http.StatusOK, "clockconfirm", view{Title: "Confirm " + a.Name, Nav: "clocks",
		Data: clockConfirmData{Clock: d.Clock, Action: a, Subs: len(d.Subs)}})
}

func (c *Console) clockAction(ec echo.Context) error {
	id := ec.Param("id")
	if !billingIDPattern.MatchString(id) {
		return c.fail(ec, http.StatusBadRequest, "Not a test clock id.")
	}
	a, msg := readClockAct(ec.Request().PostFormValue)
	if msg != "" {
		return c.clockRefused(ec, http.StatusBadRequest, msg+" Nothing was changed.")
	}
	ctx := ctxOf(ec)
	if a.Name == "delete" {
		err := c.d.TestClocks.DeleteClock(ctx, id)
		if err == nil {
			c.d.Log.Info("console test clock deleted", "test_clock", id)
			return ec.Redirect(http.StatusSeeOther, Prefix+"/clocks?done=delete")
		}
		return c.clockError(ec, "delete the test clock", err)
	}
	_, done, err := c.d.TestClocks.AdvanceClock(ctx, c.d.Clocks, id, a.To)
	if err != nil {
		return c.clockError(ec, "advance the test clock", err)
	}
	c.d.Log.Info("console test clock advance", "test_clock", id, "to", a.To.Format(time.RFC3339))
	timer := time.NewTimer(clockAdvanceWait)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	case <-ctx.Done():
	}
	return ec.Redirect(http.StatusSeeOther, clockPath(id)+"?done=advance")
}

// clockRefused shows msg on the clock page, or alone when the clock cannot
// be read.
func (c *Console) clockRefused(ec echo.Context, status int, msg string) error {
	clock, runs, err := c.d.TestClocks.GetClock(ctxOf(ec), ec.Param("id"), clockRuns)
	if err != nil {
		return c.fail(ec, status, msg)
	}
	subs, err := c.d.TestClocks.ClockSubscriptions(ctxOf(ec), clock.ID)
	if err != nil {
		return c.fail(ec, status, msg)
	}
	return c.renderClock(ec, status, msg, "", clockData{Clock: clock, Runs: runs, Subs: subs,
		Advance: clock.FrozenTime.AddDate(0, 1, 0).Format(clockTimeInput)})
}

func (c *Console) clockError(ec echo.Context, what string, err error) error {
	// A delete cancels the subscriptions one by one, then removes the
	// clock: refused half-way, the clock stays and a retry finishes it.
	unchanged := " Nothing was changed."
	if strings.HasPrefix(what, "delete") {
		unchanged = " The clock is kept (a subscription it cancelled already stays cancelled); try again."
	}
	switch {
	case isNotFound(err):
		return c.refused(ec, err, "No such test clock."+unchanged)
	case errors.Is(err, testclock.ErrBusy):
		return c.clockRefused(ec, statusOf(err), "The clock is advancing; try again once it is ready."+unchanged)
	case errors.Is(err, testclock.ErrTooManyClocks), errors.Is(err, testclock.ErrTooManyAdvances), errors.Is(err, apperr.ErrInvalid):
		return c.clockRefused(ec, statusOf(err), "Refused: "+reason(err)+"."+unchanged)
	case errors.Is(err, billing.ErrLocked), errors.Is(err, billing.ErrConflict):
		return c.clockRefused(ec, statusOf(err), "A subscription of the clock is being billed or changed right now, or has a payment attempt still without an outcome; try again later."+unchanged)
	case errors.Is(err, billing.ErrLivemode):
		return c.refused(ec, err, "Test clocks exist in test mode only."+unchanged)
	}
	return c.unavailable(ec, what, err)
}

// reason is why billing refused: the message of its apperr error.
func reason(err error) string { return apperr.From(err).Message }

func plural(n int, word string) string {
	s := strconv.Itoa(n) + " " + word
	if n != 1 {
		s += "s"
	}
	return s
}

// clocksContext defaults the advances' lifetime.
func clocksContext(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}
