package ops_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/authlimit"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// inlineHandler is an HTML attribute such as onclick= or onload=.
var inlineHandler = regexp.MustCompile(`(?i)<[^>]*\son[a-z]+\s*=`)

// longToken is an INTERNAL_API_TOKEN production mode accepts (32+
// characters).
const longToken = "ops-console-production-test-token-0123456789"

// console is a browser-like client of the console that keeps its cookies
// by hand: Go's cookie jar never sends a Secure cookie over plain HTTP,
// and outside development mode every console cookie is Secure.
type console struct {
	t       *testing.T
	base    string // .../ops
	cookies map[string]string
	xff     string // X-Forwarded-For sent with every request ("" none)
}

func newConsole(t *testing.T, base string) *console {
	return &console{t: t, base: base, cookies: map[string]string{}}
}

type answer struct {
	status int
	header http.Header
	body   string
	set    []*http.Cookie
}

func (c *console) do(method, path string, form url.Values) answer {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	require.NoError(c.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if c.xff != "" {
		req.Header.Set("X-Forwarded-For", c.xff)
	}
	for k, v := range c.cookies {
		req.AddCookie(&http.Cookie{Name: k, Value: v})
	}
	client := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for _, ck := range resp.Cookies() {
		if ck.MaxAge < 0 {
			delete(c.cookies, ck.Name)
		} else {
			c.cookies[ck.Name] = ck.Value
		}
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: string(raw), set: resp.Cookies()}
}

func (c *console) get(path string) answer { c.t.Helper(); return c.do(http.MethodGet, path, nil) }

// login opens the login page and posts tok with the page's CSRF field;
// it returns the login's answer (303 to /ops/ on success).
func (c *console) login(tok string) answer {
	c.t.Helper()
	page := c.get("/login")
	require.Equal(c.t, http.StatusOK, page.status)
	m := csrfField.FindStringSubmatch(page.body)
	require.NotNil(c.t, m, "login form")
	return c.do(http.MethodPost, "/login", url.Values{"csrf": {m[1]}, "token": {tok}})
}

func (c *console) mustLogin(tok string) {
	c.t.Helper()
	a := c.login(tok)
	require.Equal(c.t, http.StatusSeeOther, a.status, a.body)
	require.Equal(c.t, "/ops/", a.header.Get("Location"))
	require.NotEmpty(c.t, c.cookies["ops_session"])
}

// csrf is the session's CSRF token, read from a page.
func (c *console) csrf() string {
	c.t.Helper()
	m := csrfField.FindStringSubmatch(c.get("/").body)
	require.NotNil(c.t, m)
	return m[1]
}

// Every console page, in development and in production mode, carries the
// security headers (a CSP that allows no script, X-Frame-Options DENY,
// nosniff, no-store, same-origin referrer and opener policies; HSTS outside
// development mode) and has no inline script or style; cookies are HttpOnly
// and SameSite=Strict, and Secure outside development mode even over plain
// HTTP (or behind TLS in development mode).
func TestConsoleHeadersAndNoInlineCode(t *testing.T) {
	for _, mode := range []string{"development", "production"} {
		t.Run(mode, func(t *testing.T) {
			overrides := []string{"INTERNAL_API_TOKEN", longToken, "STRIPE_PLATFORM_ACCOUNT", "acct_1OpsHeaders"}
			if mode == "production" {
				// Outside development mode Stripe is reached over https only.
				overrides = append(overrides, "APP_ENV", "production", "STRIPE_API_BASE", "https://127.0.0.1:1")
			}
			a := startApp(t, "http://127.0.0.1:1", overrides...)
			require.Equal(t, mode == "development", a.Config.Development)
			c := newConsole(t, a.AdminURL+"/ops")

			check := func(what string, r answer) {
				t.Helper()
				csp := r.header.Get("Content-Security-Policy")
				assert.Contains(t, csp, "default-src 'none'", what)
				assert.Contains(t, csp, "frame-ancestors 'none'", what)
				assert.NotContains(t, csp, "unsafe-inline", what)
				assert.NotContains(t, csp, "script-src", "%s: no script source at all: default-src 'none' forbids scripts", what)
				assert.Equal(t, "DENY", r.header.Get("X-Frame-Options"), what)
				assert.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"), what)
				assert.Equal(t, "no-store", r.header.Get("Cache-Control"), what)
				assert.Equal(t, "same-origin", r.header.Get("Referrer-Policy"), what)
				assert.Equal(t, "same-origin", r.header.Get("Cross-Origin-Opener-Policy"), what)
				if mode == "production" {
					assert.Contains(t, r.header.Get("Strict-Transport-Security"), "max-age=31536000", what)
				} else {
					assert.Empty(t, r.header.Get("Strict-Transport-Security"), "%s: no HSTS on a development console (plain HTTP on loopback)", what)
				}
				assert.NotContains(t, r.body, "<script", what)
				assert.NotContains(t, r.body, "style=", what)
				assert.NotRegexp(t, inlineHandler, r.body, "%s: no inline event handler", what)
				for _, ck := range r.set {
					assert.True(t, ck.HttpOnly, "%s: %s HttpOnly", what, ck.Name)
					assert.Equal(t, http.SameSiteStrictMode, ck.SameSite, "%s: %s", what, ck.Name)
					assert.Equal(t, mode == "production", ck.Secure, "%s: %s Secure outside development mode", what, ck.Name)
				}
			}

			// Before login: the login page, a wrong token, a page that
			// redirects, a refused post, a static file.
			check("GET /ops/login", c.get("/login"))
			check("GET /ops", c.get(""))
			r := c.get("/")
			assert.Equal(t, http.StatusSeeOther, r.status)
			assert.Equal(t, "/ops/login", r.header.Get("Location"), "no session: the login page")
			check("GET /ops/ without a session", r)
			check("POST /ops/login with a wrong token", c.login("not-the-token"))
			check("POST /ops/events/x/replay without a session", c.do(http.MethodPost, "/events/evt_x/replay", url.Values{}))
			check("GET /ops/static/style.css", c.get("/static/style.css"))
			if mode == "development" {
				behindTLS := newConsole(t, c.base)
				req, err := http.NewRequest(http.MethodGet, c.base+"/login", nil)
				require.NoError(t, err)
				req.Header.Set("X-Forwarded-Proto", "https")
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				resp.Body.Close()
				require.NotEmpty(t, resp.Cookies())
				for _, ck := range resp.Cookies() {
					assert.True(t, ck.Secure, "behind TLS: Secure")
				}
				_ = behindTLS
			}

			// Logged in: every page of the console.
			r = c.login(longToken)
			require.Equal(t, http.StatusSeeOther, r.status, r.body)
			check("POST /ops/login", r)
			status, sub := apiCall(t, a.AdminURL, longToken, http.MethodPost, "/internal/v1/accounts/merchant-hdr/subscriptions", map[string]any{
				"sku": "gold", "email": "hdr@example.com", "payment_day": 28, "amount": 1500, "currency": "usd",
				"term": "MONTHLY", "customer": "cus_hdr", "payment_method": "pm_hdr"})
			require.Equal(t, http.StatusCreated, status, sub)
			subID := sub["subscription_id"].(string)
			status, clock := apiCall(t, a.AdminURL, longToken, http.MethodPost, "/internal/v1/test_clocks", map[string]any{"frozen_time": "2027-01-01T00:00:00Z"})
			require.Equal(t, http.StatusCreated, status, clock)
			clockID := clock["id"].(string)
			pages := []string{"/", "/events", "/events?by=account&account=acct_1Hdr", "/events/evt_1MissingHeaders", "/events/not-an-id",
				"/problems", "/problems?outcome=failed", "/outbox", "/outbox?dead=1", "/runs", "/billing", "/billing/merchant-hdr",
				"/billing/merchant-hdr/" + subID, "/billing/merchant-hdr/" + subID + "/confirm?action=pause&months=1",
				"/clocks", "/clocks/" + clockID, "/clocks/" + clockID + "/confirm?action=delete", "/no-such-page"}
			for _, p := range pages {
				r := c.get(p)
				assert.Less(t, r.status, 500, "GET /ops%s: %s", p, r.body)
				check("GET /ops"+p, r)
			}
			csrf := c.csrf()
			check("POST /ops/events/x/replay", c.do(http.MethodPost, "/events/evt_1MissingHeaders/replay", url.Values{"csrf": {csrf}}))
			check("POST /ops/problems/replay", c.do(http.MethodPost, "/problems/replay", url.Values{"csrf": {csrf}, "id": {"evt_1MissingHeaders"}}))
			check("POST with a forged CSRF token", c.do(http.MethodPost, "/billing/merchant-hdr/"+subID+"/action", url.Values{"csrf": {"forged"}, "action": {"pause"}}))
			check("POST /ops/logout", c.do(http.MethodPost, "/logout", url.Values{"csrf": {csrf}}))
		})
	}
}

// apiCall calls the internal API on base with tok.
func apiCall(t *testing.T, base, tok, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var raw []byte
	if body != nil {
		var err error
		raw, err = json.Marshal(body)
		require.NoError(t, err)
	}
	req, err := http.NewRequest(method, base+path, bytes.NewReader(raw))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// hostile is what a merchant or an attacker can put in Stripe data (a
// description, an error message Stripe echoes): markup that must reach the
// operator as text.
const hostile = `<script>alert("pwned")</script><img src=x onerror=alert(1)>'`

// escaped is hostile as html/template writes it in text.
const escaped = `&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;&#39;`

// Every page that shows Stripe data shows a hostile string from it as
// text: an event's payload and type, the error Stripe answered while it
// was processed (the event, the search results, the dead-letter list, a
// replay's result), a decline message on a billing period, a dead letter's
// error and a billing run's error.
func TestConsoleEscapesHostileStripeData(t *testing.T) {
	stripe := newFakeStripe(t)
	a := startApp(t, stripe.URL)
	c := newConsole(t, a.AdminURL+"/ops")
	ctx := context.Background()
	acct := "acct_1OpsHostile"

	// An event whose object carries the string (JSON-escaped by
	// encoding/json; the raw body carries it as is, as Stripe may).
	described := stripetest.Event{Fixture: "customer.created", Account: &acct, Object: map[string]any{"description": hostile}}.Build(t)
	described = bytes.ReplaceAll(bytes.ReplaceAll(bytes.ReplaceAll(described, []byte(`\u003c`), []byte("<")), []byte(`\u003e`), []byte(">")), []byte(`\u0026`), []byte("&"))
	require.Contains(t, string(described), "<script>")
	require.Equal(t, http.StatusOK, deliver(t, a, described))
	describedID := eventID(t, described)

	// An event whose processing fails with Stripe's error message.
	stripe.Fail(http.MethodGet, "/v1/invoices/*", http.StatusBadRequest, "invalid_request_error", "", hostile, -1)
	failed := stripetest.Event{Fixture: "payment_intent.succeeded", Account: &acct, Object: map[string]any{"invoice": consoleInvoice}}.Build(t)
	require.GreaterOrEqual(t, deliver(t, a, failed), 500)
	failedID := eventID(t, failed)

	// A billing charge Stripe declines with that message.
	status, sub := apiJSON(t, a, http.MethodPost, "/internal/v1/accounts/merchant-hostile/subscriptions", map[string]any{
		"sku": "gold", "email": "hostile@example.com", "payment_day": 28, "amount": 1500, "currency": "usd",
		"term": "MONTHLY", "customer": "cus_hostile", "payment_method": "pm_hostile"})
	require.Equal(t, http.StatusCreated, status, sub)
	subID := sub["subscription_id"].(string)
	status, moved := apiJSON(t, a, http.MethodPatch, "/internal/v1/accounts/merchant-hostile/subscriptions/"+subID,
		map[string]any{"next_payment_date": time.Now().UTC().Format("2006-01-02")})
	require.Equal(t, http.StatusOK, status, moved)
	stripe.Fail(http.MethodPost, "/v1/payment_intents", http.StatusPaymentRequired, "card_error", "card_declined", hostile, -1)
	started := time.Now()
	rep, err := a.Billing.CollectNow(ctx)
	require.NoError(t, err)
	a.RecordBillingRun(ctx, "collect", a.Billing.NowDate(), started, rep, errors.New("Stripe said: "+hostile))

	// A dead letter whose receiver answered with it.
	_, err = a.Pool.Exec(ctx, `INSERT INTO outbox (id, topic, type, dedupe_key, payload, attempts, last_error, dead_at)
		VALUES (gen_random_uuid(), 'actions', 'purchase.completed', 'ops-hostile-dead', '{}', 8, $1, now())`, "receiver answered: "+hostile)
	require.NoError(t, err)

	c.mustLogin(token)
	csrf := c.csrf()
	shown := func(what, body string, json bool) {
		t.Helper()
		assert.NotContains(t, body, "<script", what)
		assert.NotContains(t, body, "<img", what)
		if json {
			// JSON already turned < and > into \u003c and \u003e; the
			// quotes show whether the page escaped the rest: \" must
			// come out as \&#34;, ' as &#39;.
			assert.Contains(t, body, `alert(\&#34;pwned\&#34;)`, "%s shows the string as text", what)
			return
		}
		assert.Contains(t, body, escaped, "%s shows the string as text", what)
	}
	for _, p := range []struct {
		path string
		json bool // the string sits in JSON: the payload, or Stripe's error body that stripe-go quotes
	}{
		{"/events/" + describedID, true},
		{"/events/" + failedID, true},
		{"/problems", true},
		{"/billing/merchant-hostile/" + subID, false},
		{"/outbox?dead=1", false},
		{"/runs", false},
		{"/", false}, // the overview's last billing runs
	} {
		r := c.get(p.path)
		require.Equal(t, http.StatusOK, r.status, p.path)
		shown(p.path, r.body, p.json)
		if !strings.Contains(r.body, "pwned") {
			t.Logf("%s:\n%s", p.path, r.body)
		}
	}
	// A replay that fails again (its result names no Stripe text).
	r := c.do(http.MethodPost, "/problems/replay", url.Values{"csrf": {csrf}, "id": {failedID}})
	require.Equal(t, http.StatusOK, r.status)
	assert.Contains(t, r.body, "could not be processed")
	assert.NotContains(t, r.body, "<script")
	// The search pages show no free text from Stripe (types and ids are
	// validated on the way in), and the payload's description reaches no
	// other page unescaped either.
	today := time.Now().UTC().Format("2006-01-02")
	for _, p := range []string{"/events?" + url.Values{"by": {"date"}, "date": {today}}.Encode(),
		"/events?" + url.Values{"by": {"account"}, "account": {acct}}.Encode()} {
		r := c.get(p)
		require.Equal(t, http.StatusOK, r.status, p)
		assert.NotContains(t, r.body, "<script", p)
		assert.Contains(t, r.body, describedID, p)
	}
}

// A copied session cookie is refused once its session logged out, on the
// instance that logged out and on another replica sharing the database:
// sessions live in Postgres, not in the cookie.
func TestConsoleLogoutRevokesACopiedCookie(t *testing.T) {
	a := startApp(t, "http://127.0.0.1:1")
	replica := startApp(t, "http://127.0.0.1:1", "DATABASE_URL", a.Env["DATABASE_URL"],
		"EVENTS_TABLE", a.Env["EVENTS_TABLE"], "BILLING_TABLE", a.Env["BILLING_TABLE"],
		"BILLING_HISTORY_TABLE", a.Env["BILLING_HISTORY_TABLE"], "LOCKS_TABLE", a.Env["LOCKS_TABLE"])
	c := newConsole(t, a.AdminURL+"/ops")
	c.mustLogin(token)
	copied := newConsole(t, replica.AdminURL+"/ops") // the cookie, copied elsewhere
	copied.cookies["ops_session"] = c.cookies["ops_session"]
	require.Equal(t, http.StatusOK, copied.get("/").status, "the copy works while the session lives, on any replica")
	require.Equal(t, http.StatusOK, c.get("/").status)

	r := c.do(http.MethodPost, "/logout", url.Values{"csrf": {c.csrf()}})
	require.Equal(t, http.StatusOK, r.status, r.body)
	assert.Empty(t, c.cookies["ops_session"], "the browser's cookie is cleared")

	for name, cl := range map[string]*console{"same instance": newConsole(t, c.base), "other replica": copied} {
		cl.cookies["ops_session"] = copied.cookies["ops_session"]
		r := cl.get("/")
		assert.Equal(t, http.StatusSeeOther, r.status, name)
		assert.Equal(t, "/ops/login", r.header.Get("Location"), name)
		r = cl.do(http.MethodPost, "/billing/x/y/action", url.Values{"csrf": {"anything"}, "action": {"pause"}})
		assert.Equal(t, http.StatusUnauthorized, r.status, name)
	}
}

// A session unused for OPS_SESSION_IDLE_TIMEOUT ends; using it keeps it.
func TestConsoleSessionIdleTimeout(t *testing.T) {
	a := startApp(t, "http://127.0.0.1:1", "OPS_SESSION_IDLE_TIMEOUT", "2s")
	c := newConsole(t, a.AdminURL+"/ops")
	c.mustLogin(token)
	for range 3 { // used every second for 3 s: alive
		time.Sleep(time.Second)
		require.Equal(t, http.StatusOK, c.get("/").status)
	}
	time.Sleep(2500 * time.Millisecond)
	r := c.get("/")
	assert.Equal(t, http.StatusSeeOther, r.status, "2.5 s without use")
	assert.Equal(t, "/ops/login", r.header.Get("Location"))
}

// The login page is no oracle for the token: its CSRF value is the random
// nonce of its own cookie (double submit), nothing computed from the
// token, and a login needs both to match.
func TestConsoleLoginCSRFIsADoubleSubmittedNonce(t *testing.T) {
	a := startApp(t, "http://127.0.0.1:1")
	c := newConsole(t, a.AdminURL+"/ops")
	first := c.get("/login")
	m := csrfField.FindStringSubmatch(first.body)
	require.NotNil(t, m)
	assert.Equal(t, c.cookies["ops_login"], m[1], "the form carries the cookie's nonce, nothing else")
	assert.GreaterOrEqual(t, len(m[1]), 43, "32 random bytes")
	second := csrfField.FindStringSubmatch(c.get("/login").body)
	assert.NotEqual(t, m[1], second[1], "a new nonce each time")
	assert.NotContains(t, first.body, token)

	// A form whose value is not the cookie's is refused, right token or not.
	r := c.do(http.MethodPost, "/login", url.Values{"csrf": {m[1]}, "token": {token}})
	assert.Equal(t, http.StatusForbidden, r.status, "an old nonce")
	delete(c.cookies, "ops_login")
	r = c.do(http.MethodPost, "/login", url.Values{"csrf": {second[1]}, "token": {token}})
	assert.Equal(t, http.StatusForbidden, r.status, "no cookie")
	c.mustLogin(token)
}

// Many addresses guessing the token together (here at the internal API,
// which shares the console's count of failures) go over the ceiling of
// failures from all addresses; an operator still logs in, and a wrong
// token at the login is then answered 429.
func TestConsoleLoginIsNotLockedOutByManyGuessers(t *testing.T) {
	a := apptest.Start(t, apptest.Options{Env: map[string]string{
		"STRIPE_WEBHOOK_SECRET": secret, "STRIPE_API_KEY": "sk_test_fake_ops", "STRIPE_API_BASE": "http://127.0.0.1:1",
		"INTERNAL_API_TOKEN": token, "TRUSTED_PROXIES": "127.0.0.1/32"}})
	limited := false
	for i := 0; !limited && i < 2*authlimit.GlobalBurst; i++ {
		req, err := http.NewRequest(http.MethodGet, a.AdminURL+"/internal/v1/events/evt_missing", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer guess")
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("203.0.%d.%d", i/200, i%200+1))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		limited = resp.StatusCode == http.StatusTooManyRequests
	}
	require.True(t, limited, "the guesses went over the global ceiling")

	operator := newConsole(t, a.AdminURL+"/ops")
	operator.xff = "198.51.100.8"
	operator.mustLogin(token)
	assert.Equal(t, http.StatusOK, operator.get("/").status)
	// The ceiling refilled a little meanwhile (10 a second): wrong tokens
	// from fresh addresses use that up, then are answered 429.
	var r answer
	for i := range 100 {
		other := newConsole(t, a.AdminURL+"/ops")
		other.xff = fmt.Sprintf("198.51.101.%d", i+1)
		if r = other.login("typo"); r.status != http.StatusUnauthorized {
			break
		}
	}
	assert.Equal(t, http.StatusTooManyRequests, r.status, "over the ceiling a wrong token is limited")
	assert.Contains(t, r.body, "Too many wrong tokens")
	assert.NotEmpty(t, r.header.Get("Retry-After"))
}

// A flood of wrong tokens from one address locks that address out of the
// login (429, whatever it sends) while another address logs in at once;
// the refusals are logged with the address X-Forwarded-For gave through a
// trusted proxy.
func TestConsoleLoginFloodFromOneAddressLeavesOthersIn(t *testing.T) {
	logs := &testenv.Logs{}
	a := apptest.Start(t, apptest.Options{Logs: logs, Env: map[string]string{
		"STRIPE_WEBHOOK_SECRET": secret, "STRIPE_API_KEY": "sk_test_fake_ops", "STRIPE_API_BASE": "http://127.0.0.1:1",
		"INTERNAL_API_TOKEN": token, "TRUSTED_PROXIES": "127.0.0.1/32"}})
	attacker := newConsole(t, a.AdminURL+"/ops")
	attacker.xff = "203.0.113.66"
	for i := range 50 {
		r := attacker.login(fmt.Sprintf("guess-%d", i))
		want := http.StatusUnauthorized
		if i >= 10 {
			want = http.StatusTooManyRequests
		}
		require.Equal(t, want, r.status, "guess %d", i)
	}
	r := attacker.login(token)
	assert.Equal(t, http.StatusTooManyRequests, r.status, "the flooding address is refused even with the right token")
	assert.Contains(t, r.body, "Too many wrong tokens")
	assert.NotEmpty(t, r.header.Get("Retry-After"))

	operator := newConsole(t, a.AdminURL+"/ops")
	operator.xff = "198.51.100.7"
	assert.Equal(t, http.StatusUnauthorized, operator.login("typo").status, "the operator's own typo: 401, not 429")
	operator.mustLogin(token)
	assert.Equal(t, http.StatusOK, operator.get("/").status)

	out := logs.String()
	assert.Contains(t, out, `"msg":"console login refused: wrong token"`)
	assert.Contains(t, out, `"msg":"console login refused: too many failed tokens"`)
	assert.Contains(t, out, `"remote":"203.0.113.66"`, "refusals carry the address they were counted under")
	assert.NotContains(t, out, "guess-", "no submitted token is logged")
}

func eventID(t *testing.T, payload []byte) string {
	t.Helper()
	var ev struct{ ID string }
	require.NoError(t, json.Unmarshal(payload, &ev))
	return ev.ID
}
