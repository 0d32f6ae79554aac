// Package ops is the operator console at /ops/ (docs/design.md §4): server-rendered
// HTML pages over the events store, the dead-letter list, the outbox, the
// poller's checkpoints and the billing core, behind the internal API token
// entered once per browser session. Charts are SVG drawn on the server, so
// the pages run no script at all and the Content-Security-Policy forbids
// every script; everything they load is embedded in the binary.
package ops

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/authlimit"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/batchrun"
	"github.com/stripe-payments/stripe-payments/internal/billing/testclock"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/incidents"
	"github.com/stripe-payments/stripe-payments/internal/opsdata"
	"github.com/stripe-payments/stripe-payments/internal/reconcile"
	"github.com/stripe-payments/stripe-payments/internal/replay"
)

// Prefix of every console route.
const Prefix = "/ops"

//go:embed templates/*.html templates/partials/*.html static/*
var assets embed.FS

// CSP forbids scripts, inline styles, frames and every other origin.
const CSP = "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'"

// Deps are what the console reads and drives.
type Deps struct {
	// Token is INTERNAL_API_TOKEN; empty leaves the console off.
	Token    string
	Events   events.Reader
	Replayer Replayer
	Billing  *billing.Service // nil: no billing pages
	// TestClocks: the test clocks (nil: no clock pages).
	TestClocks *testclock.Service
	// Batches: batch collections (nil: no batch pages); BatchNudge wakes
	// the runner after a start.
	Batches    *batchrun.Store
	BatchNudge func()
	// Triggers lists an account's platform triggers and what they did
	// (trigger.Store; nil: the account page shows none).
	Triggers TriggerLister
	// Counter, Problems and Runs are the operator tables (opsdata);
	// Sessions holds the console's sessions.
	Counter  *opsdata.Counter
	Problems *opsdata.Problems
	Runs     *opsdata.Runs
	// QueueRuns: the billing queue runs' progress (nil: not shown).
	QueueRuns *opsdata.QueueRuns
	Sessions  SessionStore
	// Checkpoints lists the poller's checkpoints (tracking.Checkpoints),
	// Thin reads the hydration queue (thin.Queue) and Quarantine counts
	// the records the events table refused (recordq.Queue).
	Checkpoints CheckpointLister
	Thin        ThinReader
	Quarantine  QuarantineCounter
	Outbox      OutboxReader
	// Poller gives this instance's poller figures per account (nil: no
	// poller runs here).
	Poller PollerFigures
	Log    *slog.Logger
	Now    func() time.Time
	// Livemode: the Stripe key is live. Test clocks, which Stripe has in
	// test mode only, are then off: no navigation entry, and /ops/clocks
	// answers 403.
	Livemode bool
	// Clocks bounds the test clocks' advances, which outlive the request
	// that starts them: the process's lifetime. nil: context.Background().
	Clocks context.Context
	// Development (APP_ENV=development): only then may cookies go without
	// Secure over plain HTTP and pages without HSTS.
	Development bool
	// Failures limits wrong tokens per client address (shared with the
	// bearer API); nil: a limiter of the console's own.
	Failures *authlimit.Limiter
	// SessionIdle and SessionMaxAge end sessions (0: SessionIdle,
	// SessionTTL).
	SessionIdle   time.Duration
	SessionMaxAge time.Duration
	// Incidents and Replays (nil: no incident pages); ReplayNudge wakes
	// the bulk replay runner.
	Incidents   *incidents.Store
	Replays     *replay.Store
	ReplayNudge func()
	// Reconciliations (nil: no reconciliation pages); ReconcileNudge
	// wakes their runner.
	Reconciliations *reconcile.Store
	ReconcileNudge  func()
}

// Replayer re-drives one event (replay.One, as the internal API does).
type Replayer interface {
	Replay(ctx context.Context, id, account string) (replay.Result, error)
}

// Console serves the pages.
type Console struct {
	d        Deps
	sessions sessions
	pages    map[string]*template.Template
}

// Register mounts the console on e; nothing when the token is empty (the
// console is off whenever the internal API is).
func Register(e *echo.Echo, d Deps) error {
	if d.Token == "" {
		return nil
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	d.Clocks = clocksContext(d.Clocks)
	if d.Failures == nil {
		d.Failures = authlimit.New(authlimit.Config{})
	}
	if d.SessionIdle <= 0 {
		d.SessionIdle = SessionIdle
	}
	if d.SessionMaxAge <= 0 {
		d.SessionMaxAge = SessionTTL
	}
	c := &Console{d: d, pages: map[string]*template.Template{},
		sessions: sessions{store: d.Sessions, now: d.Now, idle: d.SessionIdle, maxAge: d.SessionMaxAge, tag: tokenTag(d.Token)}}
	if err := c.parse(); err != nil {
		return err
	}
	static, err := fs.Sub(assets, "static")
	if err != nil {
		return err
	}
	g := e.Group(Prefix, c.headers, middleware.BodyLimit("64K"))
	e.GET(Prefix, func(ec echo.Context) error { return ec.Redirect(http.StatusSeeOther, Prefix+"/") }, c.headers)
	g.GET("/static/*", echo.WrapHandler(http.StripPrefix(Prefix+"/static/", http.FileServer(http.FS(static)))))
	g.GET("/login", c.loginPage)
	g.POST("/login", c.login)
	g.POST("/logout", c.logout, c.auth)
	g.GET("/", c.overview, c.auth)
	g.GET("/events", c.eventSearch, c.auth)
	g.GET("/events/:id", c.eventPage, c.auth)
	g.POST("/events/:id/replay", c.replayOne, c.auth)
	g.GET("/problems", c.problems, c.auth)
	g.POST("/problems/replay", c.replaySelection, c.auth)
	g.GET("/outbox", c.outbox, c.auth)
	g.POST("/outbox/:id/redrive", c.redriveDead, c.auth)
	g.GET("/runs", c.runs, c.auth)
	g.GET("/docs/*", c.docPage, c.auth)
	c.registerIncidents(g)
	c.registerReconciliations(g)
	if d.Billing != nil {
		g.GET("/billing", c.billingSearch, c.auth)
		g.GET("/billing/:account", c.billingAccount, c.auth)
		g.GET("/billing/:account/:sub", c.billingSubscription, c.auth)
		g.GET("/billing/:account/:sub/confirm", c.billingConfirm, c.auth)
		g.POST("/billing/:account/:sub/action", c.billingAction, c.auth)
		c.registerBatches(g)
	}
	if d.TestClocks != nil {
		c.registerClocks(g)
	}
	return nil
}

func (c *Console) parse() error {
	pages, err := fs.Glob(assets, "templates/*.html")
	if err != nil {
		return err
	}
	for _, p := range pages {
		name := strings.TrimSuffix(strings.TrimPrefix(p, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.New(name).Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/partials/*.html", p)
		if err != nil {
			return err
		}
		c.pages[name] = t
	}
	return nil
}

// headers sets the security headers of every console response.
func (c *Console) headers(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ec echo.Context) error {
		h := ec.Response().Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin") // no-referrer would make Chrome send Origin: null on our own forms
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		if !c.d.Development {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		return next(ec)
	}
}

type ctxKey struct{}

// auth lets through requests with a valid session; a state-changing one
// also needs the session's CSRF token and a same-origin request. A page
// asked for without a session redirects to the login page; anything else is
// refused and changes nothing.
func (c *Console) auth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ec echo.Context) error {
		r := ec.Request()
		err := errNoSession
		var s session
		if ck, cerr := r.Cookie(sessionCookie); cerr == nil {
			s, err = c.sessions.check(ctxOf(ec), ck.Value)
		}
		if err != nil && !errors.Is(err, errNoSession) {
			return c.unavailable(ec, "check your session", err)
		}
		if err != nil {
			if r.Method == http.MethodGet {
				return ec.Redirect(http.StatusSeeOther, Prefix+"/login")
			}
			return c.fail(ec, http.StatusUnauthorized, "Your session has ended. Log in again; nothing was changed.")
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if !sameOrigin(r) || !equal(s.csrf, r.PostFormValue("csrf")) {
				return c.fail(ec, http.StatusForbidden, "This form is stale or did not come from the console (CSRF check failed); nothing was changed. Reload the page and try again.")
			}
		}
		ec.Set("ops.session", s)
		return next(ec)
	}
}

// view is what every page template gets.
type view struct {
	Title  string
	Nav    string
	CSRF   string
	Authed bool
	// Clocks: the navigation lists the test clocks (test mode).
	Clocks bool
	Error  string
	Notice string
	Data   any
}

func (c *Console) render(ec echo.Context, status int, page string, v view) error {
	if s, ok := ec.Get("ops.session").(session); ok && s.csrf != "" {
		v.Authed, v.CSRF = true, s.csrf
		v.Clocks = c.clocksOn()
	}
	t, ok := c.pages[page]
	if !ok {
		return echo.NewHTTPError(http.StatusInternalServerError, "no template "+page)
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", v); err != nil {
		c.d.Log.Error("render console page", "page", page, "error", err)
		return ec.String(http.StatusInternalServerError, "could not render the page")
	}
	return ec.HTMLBlob(status, buf.Bytes())
}

func (c *Console) fail(ec echo.Context, status int, msg string) error {
	return c.render(ec, status, "message", view{Title: http.StatusText(status), Error: msg})
}

// refused answers a request a service refused with err: the status of err's
// apperr code (statusOf) and the console's own words for it.
func (c *Console) refused(ec echo.Context, err error, msg string) error {
	return c.fail(ec, statusOf(err), msg)
}

// statusOf is the status of err's apperr code: apperr.Status, the one
// mapping, which the API answers with too. Call it on an error a branch
// matched (errors.Is with an apperr kind or a service's sentinel): an
// uncoded error is a 500.
func statusOf(err error) int { return apperr.Status(apperr.CodeOf(err)) }

// unavailable renders a dependency error without its details (they are
// logged).
func (c *Console) unavailable(ec echo.Context, what string, err error) error {
	c.d.Log.Error("console: "+what, "error", err)
	return c.fail(ec, http.StatusServiceUnavailable, "Could not "+what+" (see the service logs). Try again.")
}

// loginPage sets a random nonce as a cookie and as the form's CSRF field
// (double submit): nothing on it depends on INTERNAL_API_TOKEN, so the page
// answers nothing about the token.
func (c *Console) loginPage(ec echo.Context) error {
	return c.loginForm(ec, http.StatusOK, "")
}

func (c *Console) login(ec echo.Context) error {
	r := ec.Request()
	ck, err := r.Cookie(loginCookie)
	if err != nil || !sameOrigin(r) || !equal(ck.Value, r.PostFormValue("csrf")) {
		return c.fail(ec, http.StatusForbidden, "The login form is stale or did not come from the console; nothing was changed. Open the login page again.")
	}
	remote := ec.RealIP()
	done, allowed := c.d.Failures.Attempt("console", remote)
	if !allowed {
		c.d.Log.Warn("console login refused: too many failed tokens", "remote", remote)
		ec.Response().Header().Set("Retry-After", strconv.Itoa(int(c.d.Failures.RetryAfter().Seconds())))
		return c.loginForm(ec, http.StatusTooManyRequests, "Too many wrong tokens from your address; wait a minute and try again.")
	}
	if !tokenOK(c.d.Token, r.PostFormValue("token")) {
		if done(false) {
			c.d.Log.Warn("console login refused: wrong token over the ceiling of failures from all addresses", "remote", remote)
			ec.Response().Header().Set("Retry-After", strconv.Itoa(int(c.d.Failures.RetryAfter().Seconds())))
			return c.loginForm(ec, http.StatusTooManyRequests, "Too many wrong tokens; wait a minute and try again.")
		}
		c.d.Log.Warn("console login refused: wrong token", "remote", remote)
		return c.loginForm(ec, http.StatusUnauthorized, "That is not the internal API token.")
	}
	done(true)
	value, err := c.sessions.issue(ctxOf(ec), remote)
	if err != nil {
		return c.unavailable(ec, "start your session", err)
	}
	c.d.Log.Info("console login", "remote", remote)
	c.setCookie(ec.Response(), r, sessionCookie, value, int(c.d.SessionMaxAge/time.Second))
	c.setCookie(ec.Response(), r, loginCookie, "", -1)
	return ec.Redirect(http.StatusSeeOther, Prefix+"/")
}

func (c *Console) loginForm(ec echo.Context, status int, msg string) error {
	nonce := randomToken(32)
	c.setCookie(ec.Response(), ec.Request(), loginCookie, nonce, 600)
	return c.render(ec, status, "login", view{Title: "Log in", Error: msg, Data: loginView{
		CSRF: nonce, Idle: human(c.d.SessionIdle), MaxAge: human(c.d.SessionMaxAge)}})
}

type loginView struct{ CSRF, Idle, MaxAge string }

// human writes a duration in whole hours, minutes or seconds when it is one.
func human(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "hour"}, {time.Minute, "minute"}, {time.Second, "second"}} {
		if d%u.d == 0 {
			n := int64(d / u.d)
			if n == 1 {
				return "1 " + u.name
			}
			return strconv.FormatInt(n, 10) + " " + u.name + "s"
		}
	}
	return d.String()
}

// logout deletes the session's row: its cookie, wherever copied, is
// refused from now on by every replica.
func (c *Console) logout(ec echo.Context) error {
	s, _ := ec.Get("ops.session").(session)
	if err := c.sessions.revoke(ctxOf(ec), s.idHash); err != nil {
		return c.unavailable(ec, "end your session", err)
	}
	c.setCookie(ec.Response(), ec.Request(), sessionCookie, "", -1)
	ec.Set("ops.session", session{})
	return c.render(ec, http.StatusOK, "message", view{Title: "Logged out", Notice: "You are logged out. The session has ended on the server: this browser, or any copy of its cookie, no longer has access."})
}

func ctxOf(ec echo.Context) context.Context { return ec.Request().Context() }

func isNotFound(err error) bool { return errors.Is(err, apperr.ErrNotFound) }
