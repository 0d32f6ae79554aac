package ops_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/browsertest"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

const (
	secret = "whsec_fake_test_ops_console"
	token  = "ops-console-test-token"
)

// fakeStripe is the tests' fake Stripe, whose off-session charges decline
// while decline is set. It holds the invoice the failed event names (about
// no subscription); setDown makes its lookups fail until the cause is fixed.
type fakeStripe struct {
	*stripetest.Stripe
	decline atomic.Bool
	// unknown: new charges get a 500 before Stripe acts (no answer to
	// trust: the attempt's outcome is unknown).
	unknown atomic.Bool
	// gate, while set, holds every new PaymentIntent until it is closed.
	gate atomic.Pointer[chan struct{}]
}

// consoleInvoice is the invoice of the event that fails while Stripe is down.
const consoleInvoice = "in_1OpsConsole"

func newFakeStripe(t *testing.T) *fakeStripe {
	f := &fakeStripe{Stripe: stripetest.New(t, stripetest.Options{})}
	f.Decide = func(p stripetest.PI) stripetest.Behavior {
		if g := f.gate.Load(); g != nil {
			<-*g
		}
		if b := stripetest.TestPaymentMethod(p.PaymentMethod).Behavior; b == stripetest.Process {
			return b // a bank debit (pm_usBankAccount): processing, settled by the test
		}
		if f.unknown.Load() {
			return stripetest.Fail500
		}
		if f.decline.Load() {
			return stripetest.Decline
		}
		return stripetest.Succeed
	}
	f.Put("acct_1Nv0FGQ9RKHgCVdK", map[string]any{"id": consoleInvoice, "object": "invoice", "subscription": nil, "livemode": false})
	return f
}

// setDown makes the invoice lookups fail (or work again).
func (f *fakeStripe) setDown(down bool) {
	if !down {
		f.Recover()
		return
	}
	f.Fail(http.MethodGet, "/v1/invoices/*", http.StatusBadRequest, "invalid_request_error", "", "test Stripe is down", -1)
}

// startApp runs the real program (internal/apptest) with this package's
// secret and token against stripeURL; overrides are name, value pairs.
func startApp(t testing.TB, stripeURL string, overrides ...string) *apptest.App {
	t.Helper()
	env := map[string]string{
		"STRIPE_WEBHOOK_SECRET": secret,
		"STRIPE_API_KEY":        "sk_test_fake_ops",
		"STRIPE_API_BASE":       stripeURL,
		"INTERNAL_API_TOKEN":    token,
	}
	for i := 0; i+1 < len(overrides); i += 2 {
		env[overrides[i]] = overrides[i+1]
	}
	return apptest.Start(t, apptest.Options{Env: env})
}

// deliver posts a signed event to the webhook and returns the status.
func deliver(t *testing.T, a *apptest.App, payload []byte) int {
	t.Helper()
	status, _ := a.Deliver(t, payload)
	return status
}

func apiJSON(t *testing.T, a *apptest.App, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, a.Admin.URL()+path, rd)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// browser is chromium for this test (internal/browsertest).
func browser(t *testing.T) context.Context { return browsertest.New(t) }

// shots is where the screenshots go: OPS_SCREENSHOTS, else .dev/ops-screenshots
// at the repository root (ignored by git).
func shots(t *testing.T) string {
	dir := os.Getenv("OPS_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join("..", "..", ".dev", "ops-screenshots")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	abs, _ := filepath.Abs(dir)
	t.Logf("screenshots in %s", abs)
	return dir
}

func TestConsoleInARealBrowser(t *testing.T) {
	stripe := newFakeStripe(t)
	// The HTTP clients below reach the console as other addresses through
	// this "proxy" (X-Forwarded-For); the browser is 127.0.0.1 itself.
	a := startApp(t, stripe.URL, "TRUSTED_PROXIES", "127.0.0.1/32")
	base := a.Admin.URL() + "/ops"
	dir := shots(t)
	ctx := browser(t)
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		browsertest.Step(t, ctx, what, actions...)
	}
	text := func(sel string) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		s, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
		require.NoError(t, err, sel)
		return s
	}
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
		require.NoError(t, err)
		return n
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
	}

	// sessionCookie is the browser's console session; post sends a form
	// outside the browser, with that cookie or without.
	sessionCookie := func(t *testing.T) *network.Cookie {
		t.Helper()
		cookies, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{base + "/"}})
		require.NoError(t, err)
		for _, c := range cookies.Cookies {
			if c.Name == "ops_session" {
				return c
			}
		}
		t.Fatal("no session cookie")
		return nil
	}
	post := func(t *testing.T, path string, form url.Values, withCookie bool) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if withCookie {
			session := sessionCookie(t)
			req.AddCookie(&http.Cookie{Name: session.Name, Value: session.Value})
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}

	// Events the test sends now: applied ones on two accounts (one about a
	// subscription), a duplicate, an ignored one, a rejected one and a
	// failed one (Stripe down during its invoice lookup).
	acct := "acct_1OpsConsoleA"
	applied := stripetest.Event{Fixture: "customer.subscription.updated", Account: &acct}
	subPayload := applied.Build(t)
	require.Equal(t, http.StatusOK, deliver(t, a, subPayload))
	require.Equal(t, http.StatusOK, deliver(t, a, subPayload), "duplicate")
	var subEvent struct {
		ID   string
		Data struct{ Object struct{ ID string } }
	}
	require.NoError(t, json.Unmarshal(subPayload, &subEvent))
	for range 3 {
		require.Equal(t, http.StatusOK, deliver(t, a, stripetest.Event{Fixture: "customer.created", Account: &acct}.Build(t)))
	}
	live := true
	require.Equal(t, http.StatusOK, deliver(t, a, stripetest.Event{Fixture: "customer.created", Livemode: &live}.Build(t)), "ignored")
	rejectedID := stripetest.NewID()
	require.Equal(t, http.StatusOK, deliver(t, a, stripetest.Event{Fixture: "payment_intent.succeeded", ID: rejectedID,
		Object: map[string]any{"invoice": "not-an-invoice"}}.Build(t)), "rejected")
	stripe.setDown(true)
	failedID := stripetest.NewID()
	failedPayload := stripetest.Event{Fixture: "payment_intent.succeeded", ID: failedID, Object: map[string]any{"invoice": consoleInvoice}}.Build(t)
	require.GreaterOrEqual(t, deliver(t, a, failedPayload), 500, "failed")

	// A billing subscription to pause and resume.
	status, sub := apiJSON(t, a, http.MethodPost, "/internal/v1/accounts/merchant-ops/subscriptions", map[string]any{
		"sku": "gold", "email": "ops@example.com", "payment_day": 28, "amount": 1500, "currency": "usd",
		"term": "MONTHLY", "customer": "cus_ops", "payment_method": "pm_ops"})
	require.Equal(t, http.StatusCreated, status, sub)
	subID := sub["subscription_id"].(string)

	// A dead letter of the outbox (a receiver that kept failing).
	_, err := a.Pool.Exec(context.Background(), `INSERT INTO outbox (id, topic, type, dedupe_key, payload, attempts, last_error, dead_at)
		VALUES (gen_random_uuid(), 'actions', 'purchase.completed', 'ops-test-dead', '{}', 8, 'receiver answered 500', now())`)
	require.NoError(t, err)

	// A subscription whose charge today is declined (its period in ERROR),
	// for pay now; its collection run shows on the overview.
	status, paySub := apiJSON(t, a, http.MethodPost, "/internal/v1/accounts/merchant-pay/subscriptions", map[string]any{
		"sku": "silver", "email": "pay@example.com", "payment_day": 28, "amount": 2500, "currency": "usd",
		"term": "MONTHLY", "customer": "cus_pay", "payment_method": "pm_pay"})
	require.Equal(t, http.StatusCreated, status, paySub)
	paySubID := paySub["subscription_id"].(string)
	today := time.Now().UTC().Format("2006-01-02")
	status, moved := apiJSON(t, a, http.MethodPatch, "/internal/v1/accounts/merchant-pay/subscriptions/"+paySubID, map[string]any{"next_payment_date": today})
	require.Equal(t, http.StatusOK, status, moved)
	stripe.decline.Store(true)
	collectStarted := time.Now()
	collected, collectErr := a.Billing.CollectNow(context.Background())
	require.NoError(t, collectErr)
	require.Equal(t, 1, collected.Declined)
	a.RecordBillingRun(context.Background(), "collect", a.Billing.NowDate(), collectStarted, collected, collectErr)

	// The poller's checkpoint of the account (as a run leaves it) and a
	// real reminder run, recorded as serve's ticker records it.
	require.NoError(t, ledger.NewCheckpoints(a.Pool).Save(context.Background(), acct, time.Now().Add(-90*time.Second)))
	started := time.Now()
	rep, runErr := a.Billing.RemindNow(context.Background())
	require.NoError(t, runErr)
	a.RecordBillingRun(context.Background(), "remind", a.Billing.NowDate(), started, rep, runErr)

	t.Run("login refuses a wrong token, then accepts the right one", func(t *testing.T) {
		// Another address floods the login with wrong tokens first: it is
		// locked out, the browser's address is not.
		flood := newConsole(t, base)
		flood.xff = "203.0.113.99"
		for i := range 30 {
			flood.login(fmt.Sprintf("flood-%d", i))
		}
		require.Equal(t, http.StatusTooManyRequests, flood.login(token).status, "the flooding address is locked out")
		step("open", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("token")))
		shot("01-login")
		step("wrong token", chromedp.SetValue(chromedp.ID("token"), "not-the-token"), chromedp.Click(chromedp.CSS(`form button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(".alert.bad")))
		assert.Contains(t, text(".alert.bad"), "not the internal API token")
		shot("02-login-wrong-token")
		step("right token", chromedp.SetValue(chromedp.ID("token"), token), chromedp.Click(chromedp.CSS(`form button[type=submit]`)),
			chromedp.WaitVisible(chromedp.ID("events-chart")))
	})

	t.Run("the overview charts the events just sent", func(t *testing.T) {
		assert.GreaterOrEqual(t, count(`#events-chart rect[fill="#009E73"]`), 1, "applied bar")
		for _, colour := range []string{"#56B4E9", "#8C8C8C", "#E69F00", "#D55E00"} { // duplicate, ignored, rejected, failed
			assert.GreaterOrEqual(t, count(fmt.Sprintf(`#events-chart rect[fill="%s"]`, colour)), 1, colour)
		}
		legend := text(".legend")
		for _, want := range []string{"applied 4", "duplicate 1", "ignored 1", "rejected 1", "failed 1"} {
			assert.Contains(t, legend, want)
		}
		assert.Equal(t, "1", text("#failed-count"))
		assert.Equal(t, "1", text("#rejected-count"))
		assert.Contains(t, text("#ob-h + div table"), "actions")
		assert.Contains(t, text("#cp-h + div table"), acct, "the poller's checkpoint")
		assert.Contains(t, text("#br-h + div table"), "remind", "the billing run")
		assert.Contains(t, text("#br-h + div table"), "collect", "the declined collection")
		shot("03-overview")
		step("phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)))
		shot("04-overview-phone")
		step("laptop", chromedp.EmulateViewport(1280, 900))
	})

	t.Run("billing runs", func(t *testing.T) {
		step("runs", chromedp.Navigate(base+"/"), chromedp.Click(chromedp.CSS(`a[href="/ops/runs"]`)), chromedp.WaitVisible(chromedp.CSS("main table")))
		assert.Contains(t, text("main table"), "collect")
		shot("04c-billing-runs")
	})

	t.Run("outbox backlog and dead letters", func(t *testing.T) {
		step("dead letters", chromedp.Navigate(base+"/"), chromedp.Click(chromedp.CSS(`a[href="/ops/outbox?topic=actions&dead=1"]`)),
			chromedp.WaitVisible(chromedp.CSS("td.err")))
		assert.Contains(t, text("main"), "receiver answered 500")
		shot("04b-outbox-dead-letters")
	})

	t.Run("find an event by each index", func(t *testing.T) {
		step("by id", chromedp.Navigate(base+"/events"), chromedp.SetValue(chromedp.ID("q-id"), subEvent.ID),
			chromedp.Submit(chromedp.ID("q-id")), chromedp.WaitVisible(chromedp.ID("event-status")))
		assert.Contains(t, text("h1"), subEvent.ID)
		assert.Contains(t, text("pre.payload"), `"object": "subscription"`, "pretty-printed payload")
		shot("05-event")
		today := time.Now().UTC().Format("2006-01-02")
		step("by date", chromedp.Navigate(base+"/events"), chromedp.SetValue(chromedp.ID("q-date"), today),
			chromedp.Submit(chromedp.ID("q-date")), chromedp.WaitVisible(chromedp.ID("res-h")))
		assert.Contains(t, text("table.events"), subEvent.ID)
		shot("06-events-by-date")
		step("by account", chromedp.Navigate(base+"/events"), chromedp.SetValue(chromedp.ID("q-acct"), acct),
			chromedp.Submit(chromedp.ID("q-acct")), chromedp.WaitVisible(chromedp.ID("res-h")))
		assert.Contains(t, text("table.events"), subEvent.ID)
		assert.Equal(t, 4, count("table.events tbody tr"), "the account's four events")
		step("by subscription", chromedp.Navigate(base+"/events"), chromedp.SetValue(chromedp.ID("q-sub"), subEvent.Data.Object.ID),
			chromedp.Submit(chromedp.ID("q-sub")), chromedp.WaitVisible(chromedp.ID("res-h")))
		assert.Contains(t, text("table.events"), subEvent.ID)
		assert.Equal(t, 1, count("table.events tbody tr"))
		shot("07-events-by-subscription")
	})

	t.Run("open a failed event, replay it, see it processed", func(t *testing.T) {
		step("dead letters", chromedp.Navigate(base+"/"), chromedp.Click(chromedp.ID("failed-count")),
			chromedp.WaitVisible(chromedp.CSS("table.problems")))
		assert.Contains(t, text("table.problems"), failedID)
		assert.NotContains(t, text("table.problems"), rejectedID, "filtered to failed")
		shot("08-failed-events")
		step("open it", chromedp.Click(chromedp.CSS(`table.problems a[href$="`+failedID+`"]`)), chromedp.WaitVisible(chromedp.ID("last-error")))
		assert.Equal(t, "failed", text("#event-status"))
		assert.Contains(t, text("#last-error"), "test Stripe is down")
		shot("09-failed-event")
		stripe.setDown(false) // the cause is fixed
		step("replay", chromedp.Click(chromedp.ID("replay")), chromedp.WaitVisible(chromedp.ID("replay-results")))
		res := text("#replay-results")
		assert.Contains(t, res, failedID)
		assert.Contains(t, res, "applied")
		assert.Contains(t, res, "processed")
		shot("10-replayed")
		step("gone from the list", chromedp.Navigate(base+"/problems"), chromedp.WaitVisible(chromedp.ID("main")))
		assert.NotContains(t, text("main"), failedID)
	})

	t.Run("replay a selection and see each result", func(t *testing.T) {
		step("select", chromedp.Navigate(base+"/problems"), chromedp.WaitVisible(chromedp.CSS("table.problems")),
			chromedp.Click(chromedp.ID("sel-"+rejectedID)), chromedp.Click(chromedp.ID("replay-selected")),
			chromedp.WaitVisible(chromedp.ID("replay-results")))
		res := text("#replay-results")
		assert.Contains(t, res, rejectedID)
		assert.Contains(t, res, "still rejected", "still unprocessable: the reason is shown")
		shot("11-replayed-selection")
	})

	subURL := base + "/billing/merchant-ops/" + subID
	t.Run("pause and resume a billing subscription behind a confirmation", func(t *testing.T) {
		step("account", chromedp.Navigate(base+"/billing/merchant-ops"), chromedp.WaitVisible(chromedp.ID("subs-h")))
		assert.Contains(t, text("main"), subID)
		shot("12-billing-account")
		step("subscription", chromedp.Navigate(subURL), chromedp.WaitVisible(chromedp.ID("sub-status")))
		assert.Equal(t, "ACTIVE", text("#sub-status"))
		shot("13-billing-subscription")
		step("pause", chromedp.SetValue(chromedp.ID("a-months"), "2"), chromedp.Click(chromedp.ID("pause")), chromedp.WaitVisible(chromedp.ID("confirm")))
		assert.Contains(t, text("main"), "Pause billing for 2 month")
		shot("14-confirm-pause")
		step("confirm", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("sub-status")))
		assert.Equal(t, "PAUSED", text("#sub-status"))
		_, got := apiJSON(t, a, http.MethodGet, "/internal/v1/accounts/merchant-ops/subscriptions/"+subID, nil)
		assert.Equal(t, "PAUSED", got["status"])
		shot("15-paused")
		step("resume", chromedp.Click(chromedp.ID("resume")), chromedp.WaitVisible(chromedp.ID("confirm")),
			chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("sub-status")))
		assert.Equal(t, "ACTIVE", text("#sub-status"))
	})

	t.Run("pay now charges the period in ERROR behind a confirmation", func(t *testing.T) {
		step("subscription", chromedp.Navigate(base+"/billing/merchant-pay/"+paySubID), chromedp.WaitVisible(chromedp.ID("pay")))
		assert.Contains(t, text("main"), "insufficient funds")
		step("pay", chromedp.Click(chromedp.ID("pay")), chromedp.WaitVisible(chromedp.ID("confirm")))
		assert.Contains(t, text("main"), "Pay now")
		stripe.decline.Store(false) // the customer fixed the card
		step("confirm", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.CSS(".alert.ok")))
		assert.Contains(t, text(".alert.ok"), "COMPLETED")
		assert.Contains(t, text("main"), "MANUAL_REPAYMENT")
		shot("16-paid-now")
		_, receipts := apiJSON(t, a, http.MethodGet, "/internal/v1/accounts/merchant-pay/receipts", nil)
		assert.Len(t, receipts["data"], 1, "one receipt")
	})

	t.Run("test clocks: create, a subscription on it, advance months, see runs and charges, delete", func(t *testing.T) {
		step("clocks page", chromedp.Navigate(base+"/"), chromedp.Click(chromedp.CSS(`nav a[href="/ops/clocks"]`)),
			chromedp.WaitVisible(chromedp.ID("c-time")))
		step("create", chromedp.SetValue(chromedp.ID("c-time"), "2027-01-01T00:00"), chromedp.SetValue(chromedp.ID("c-name"), "console demo"),
			chromedp.Click(chromedp.ID("create")), chromedp.WaitVisible(chromedp.ID("clock-status")))
		assert.Equal(t, "ready", text("#clock-status"))
		assert.Equal(t, "2027-01-01 00:00:00 UTC", text("#clock-frozen"))
		loc, err := chromedp.Run(ctx, chromedp.Location())
		require.NoError(t, err)
		clockID := loc[strings.LastIndex(loc, "/")+1 : strings.Index(loc, "?")]
		require.True(t, strings.HasPrefix(clockID, "clock_"), loc)
		clockURL := base + "/clocks/" + clockID

		// A day-31 card subscription on the clock, through the internal API
		// as an integrator creates it: first payment on the clock's Jan 31.
		status, sub := apiJSON(t, a, http.MethodPost, "/internal/v1/accounts/merchant-clock/subscriptions", map[string]any{
			"sku": "gold", "email": "clock@example.com", "payment_day": 31, "amount": 2500, "currency": "usd",
			"term": "MONTHLY", "customer": "cus_clock", "payment_method": "pm_clock", "test_clock": clockID})
		require.Equal(t, http.StatusCreated, status, sub)
		clockSubID := sub["subscription_id"].(string)
		require.Equal(t, "2027-01-31", sub["next_payment_date"])

		step("listed", chromedp.Navigate(base+"/clocks"), chromedp.WaitVisible(chromedp.CSS("table.clocks")))
		assert.Contains(t, text("table.clocks"), clockID)
		assert.Contains(t, text("table.clocks"), "console demo")
		shot("18-test-clocks")
		step("its subscription", chromedp.Click(chromedp.CSS(`table.clocks a[href$="`+clockID+`"]`)), chromedp.WaitVisible(chromedp.ID("subs-h")))
		assert.Contains(t, text("table.clock-subs"), clockSubID)
		assert.Contains(t, text("table.clock-subs"), "2027-01-31")
		shot("19-test-clock-new")

		unchanged := func(what string) {
			t.Helper()
			_, got := apiJSON(t, a, http.MethodGet, "/internal/v1/test_clocks/"+clockID, nil)
			assert.Equal(t, "2027-01-01T00:00:00Z", got["frozen_time"], what)
			assert.Equal(t, "ready", got["status"], what)
			assert.Empty(t, got["runs"], what)
		}

		// Bad input shows why on the clock page and changes nothing: the
		// form itself, then a hand-made confirmation link.
		step("a past time", chromedp.SetValue(chromedp.ID("a-time"), "2026-12-01T00:00"), chromedp.Click(chromedp.ID("advance")),
			chromedp.WaitVisible(chromedp.CSS(".alert.bad")))
		assert.Contains(t, text(".alert.bad"), "later than the clock's 2027-01-01T00:00:00Z")
		assert.Contains(t, text(".alert.bad"), "Nothing was changed")
		shot("20-test-clock-bad-input")
		unchanged("a past time")
		for _, bad := range []struct{ name, value, want string }{
			{"not a time", "next tuesday", "is not a time"},
			{"empty", "", "Enter a time"},
			{"the same time", "2027-01-01T00:00", "later than the clock's"},
			{"more than 3 years", "2030-01-01T00:01", "at most 3 years"},
		} {
			step(bad.name, chromedp.Navigate(clockURL+"/confirm?"+url.Values{"action": {"advance"}, "frozen_time": {bad.value}}.Encode()),
				chromedp.WaitVisible(chromedp.CSS(".alert.bad")))
			assert.Contains(t, text(".alert.bad"), bad.want, bad.name)
			assert.Equal(t, 0, count("#confirm"), "no confirmation for %s", bad.name)
			unchanged(bad.name)
		}
		// The same, posted with the session and its CSRF token (as a
		// forged-free but stale or hand-edited form would be).
		csrf, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("input[name=csrf]").value`))
		require.NoError(t, err)
		for _, v := range []string{"yesterday", "2026-01-01T00:00", "2031-01-01T00:00"} {
			assert.Equal(t, http.StatusBadRequest, post(t, "/clocks/"+clockID+"/action", url.Values{"csrf": {csrf}, "action": {"advance"}, "frozen_time": {v}}, true), v)
		}
		unchanged("posted bad times")
		_, before := apiJSON(t, a, http.MethodGet, "/internal/v1/test_clocks", nil)
		for _, v := range []string{"", "soon", "1999-12-31T23:00"} {
			assert.Equal(t, http.StatusBadRequest, post(t, "/clocks", url.Values{"csrf": {csrf}, "frozen_time": {v}, "name": {"bad"}}, true), v)
		}
		// Without the CSRF token, or without the cookie, nothing happens.
		assert.Equal(t, http.StatusForbidden, post(t, "/clocks/"+clockID+"/action", url.Values{"action": {"advance"}, "frozen_time": {"2027-06-01T00:00"}}, true))
		assert.Equal(t, http.StatusForbidden, post(t, "/clocks/"+clockID+"/action", url.Values{"action": {"delete"}, "csrf": {"forged"}}, true))
		assert.Equal(t, http.StatusUnauthorized, post(t, "/clocks/"+clockID+"/action", url.Values{"action": {"delete"}, "csrf": {csrf}}, false))
		assert.Equal(t, http.StatusForbidden, post(t, "/clocks", url.Values{"frozen_time": {"2027-01-01T00:00"}, "name": {"forged"}}, true))
		_, after := apiJSON(t, a, http.MethodGet, "/internal/v1/test_clocks", nil)
		assert.Len(t, after["data"], len(before["data"].([]any)), "no clock created")
		unchanged("CSRF-less posts")

		// Advance three months from the console, behind a confirmation.
		step("advance", chromedp.Navigate(clockURL), chromedp.WaitVisible(chromedp.ID("a-time")),
			chromedp.SetValue(chromedp.ID("a-time"), "2027-04-01T00:00"), chromedp.Click(chromedp.ID("advance")),
			chromedp.WaitVisible(chromedp.ID("confirm")))
		assert.Contains(t, text("main"), "Advance the clock to 2027-04-01T00:00:00Z (90 days)")
		assert.Contains(t, text("main"), "1 subscription")
		shot("21-test-clock-confirm-advance")
		// The fake Stripe holds the first charge: the console gives up
		// waiting after a few seconds and shows the clock advancing, with
		// no action offered until it is ready; a refresh follows it.
		gate := make(chan struct{})
		stripe.gate.Store(&gate)
		release := sync.OnceFunc(func() { stripe.gate.Store(nil); close(gate) })
		defer release()
		step("confirm", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("clock-status")))
		assert.Equal(t, "advancing", text("#clock-status"))
		assert.Contains(t, text("#clock-busy"), "Advancing to 2027-04-01 00:00:00 UTC")
		assert.Equal(t, 0, count("#advance")+count("#delete"), "no action while it advances")
		assert.Equal(t, http.StatusConflict, post(t, "/clocks/"+clockID+"/action", url.Values{"csrf": {csrf}, "action": {"delete"}}, true), "busy")
		shot("22-test-clock-advancing")
		release()
		for deadline := time.Now().Add(2 * time.Minute); text("#clock-status") == "advancing"; {
			require.True(t, time.Now().Before(deadline), "the advance did not end in 2 minutes")
			assert.Contains(t, text("#clock-busy"), "Refresh")
			step("refresh", chromedp.Sleep(500*time.Millisecond), chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("clock-status")))
		}
		require.Equal(t, "ready", text("#clock-status"))
		assert.Equal(t, "2027-04-01 00:00:00 UTC", text("#clock-frozen"))
		assert.Equal(t, "2027-04-01 00:00:00 UTC", text("#clock-reached"))
		// Day 31: charged Jan 31, Feb 28, Mar 31, each reminded 7 days before.
		sum := func(sel string) int {
			t.Helper()
			n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(
				`[...document.querySelectorAll(%q)].reduce((s, td) => s + Number(td.textContent), 0)`, sel)))
			require.NoError(t, err)
			return n
		}
		assert.Equal(t, 3, sum("table.clock-runs td.charged"), "charges in the runs")
		assert.Equal(t, 3, sum("table.clock-runs td.reminded"), "reminders in the runs")
		assert.Equal(t, 0, sum("table.clock-runs td.declined"))
		assert.Equal(t, "2027-03-31", text("table.clock-subs td.last-payment"))
		assert.Contains(t, text("table.clock-subs"), "2027-04-30", "next payment")
		shot("23-test-clock-advanced")
		step("phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)))
		shot("24-test-clock-advanced-phone")
		step("laptop", chromedp.EmulateViewport(1280, 900))
		_, receipts := apiJSON(t, a, http.MethodGet, "/internal/v1/accounts/merchant-clock/receipts", nil)
		var billed []string
		for _, r := range receipts["data"].([]any) {
			billed = append(billed, r.(map[string]any)["billing_date"].(string))
		}
		assert.ElementsMatch(t, []string{"2027-01-31", "2027-02-28", "2027-03-31"}, billed, "one receipt per charge")

		step("the subscription's page", chromedp.Click(chromedp.CSS(`table.clock-subs a`)), chromedp.WaitVisible(chromedp.ID("sub-status")))
		assert.Contains(t, text("main"), clockID, "links back to its clock")
		assert.Contains(t, text("#per-h + div table"), "2027-03-31")
		assert.GreaterOrEqual(t, count(`#per-h + div table .tag.ok`), 3, "three COMPLETED periods")
		shot("25-test-clock-subscription")

		// The clock's days are billing runs too, marked as the clock's:
		// the overview no longer says that none was recorded.
		step("overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("br-h")))
		assert.NotContains(t, text("#br-h + div"), "No billing run recorded yet")
		assert.Positive(t, count(`#br-h + div a.clock-run[href$="`+clockID+`"]`), "the overview's last runs include the clock's, marked")
		step("all runs", chromedp.Navigate(base+"/runs"), chromedp.WaitVisible(chromedp.CSS("table.runs")))
		assert.GreaterOrEqual(t, count(`table.runs a.clock-run[href$="`+clockID+`"]`), 6, "three reminders and three charges, each a run of the clock")
		assert.Contains(t, text("table.runs"), "2027-03-31", "dated on the clock")

		step("delete", chromedp.Navigate(clockURL), chromedp.WaitVisible(chromedp.ID("delete")), chromedp.Click(chromedp.ID("delete")),
			chromedp.WaitVisible(chromedp.ID("confirm")))
		assert.Contains(t, text("main"), "the 1 subscription on it is cancelled")
		step("confirm delete", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("c-time")))
		assert.Contains(t, text(".alert.ok"), "deleted")
		assert.NotContains(t, text("main"), clockID)
		shot("26-test-clocks-after-delete")
		_, got := apiJSON(t, a, http.MethodGet, "/internal/v1/accounts/merchant-clock/subscriptions/"+clockSubID, nil)
		assert.Equal(t, "CANCELLED", got["status"])
		status, _ = apiJSON(t, a, http.MethodGet, "/internal/v1/test_clocks/"+clockID, nil)
		assert.Equal(t, http.StatusNotFound, status)
	})

	t.Run("test clocks: a bank debit is COMPLETED in its own month, on the clock's settlement day", func(t *testing.T) {
		status, clock := apiJSON(t, a, http.MethodPost, "/internal/v1/test_clocks", map[string]any{"frozen_time": "2027-01-01T00:00:00Z", "name": "bank debit"})
		require.Equal(t, http.StatusCreated, status, clock)
		clockID := clock["id"].(string)
		status, sub := apiJSON(t, a, http.MethodPost, "/internal/v1/accounts/merchant-ach/subscriptions", map[string]any{
			"sku": "bronze", "email": "ach@example.com", "payment_day": 15, "amount": 2500, "currency": "usd",
			"term": "MONTHLY", "customer": "cus_ach", "payment_method": "pm_usBankAccount", "test_clock": clockID})
		require.Equal(t, http.StatusCreated, status, sub)
		achSub := sub["subscription_id"].(string)

		// Stripe settles each debit a while after it started processing
		// (longer than the clock needs to reach the settlement day) and
		// sends the signed webhook, on its own, during the advance.
		stop := make(chan struct{})
		var settling sync.WaitGroup
		settling.Add(1)
		go func() {
			defer settling.Done()
			seen := map[string]time.Time{}
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				for _, pi := range stripe.PIs() {
					if pi.Status != "processing" {
						continue
					}
					if first, ok := seen[pi.ID]; !ok {
						seen[pi.ID] = time.Now()
						continue
					} else if time.Since(first) < 1500*time.Millisecond {
						continue
					}
					p, err := stripe.Settle(pi.ID, true)
					if !assert.NoError(t, err) {
						return
					}
					payload := stripe.Event(p, "payment_intent.succeeded", time.Now())
					req, _ := http.NewRequest(http.MethodPost, a.URL+"/webhooks/stripe", bytes.NewReader(payload))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Stripe-Signature", a.Sign(payload))
					if resp, err := http.DefaultClient.Do(req); assert.NoError(t, err) {
						resp.Body.Close()
						assert.Equal(t, http.StatusOK, resp.StatusCode)
					}
				}
			}
		}()
		defer func() { close(stop); settling.Wait() }()

		status, clock = apiJSON(t, a, http.MethodPost, "/internal/v1/test_clocks/"+clockID+"/advance", map[string]any{"frozen_time": "2027-04-01T00:00:00Z"})
		require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, status, clock)
		require.Eventually(t, func() bool {
			_, clock = apiJSON(t, a, http.MethodGet, "/internal/v1/test_clocks/"+clockID, nil)
			return clock["status"] != "advancing"
		}, 3*time.Minute, 200*time.Millisecond)
		require.Equal(t, "ready", clock["status"], clock)

		step("the clock's runs", chromedp.Navigate(base+"/clocks/"+clockID), chromedp.WaitVisible(chromedp.CSS("table.clock-runs")))
		settled, err := chromedp.Run(ctx, chromedp.Evaluate[int](
			`[...document.querySelectorAll("table.clock-runs td.debits")].reduce((s, td) => s + parseInt(td.textContent, 10), 0)`))
		require.NoError(t, err)
		assert.Equal(t, 3, settled, "three debits settled while the clock waited")
		assert.Zero(t, count("table.clock-runs .unsettled"), "none missed its day")
		shot("27-test-clock-bank-debits")

		step("the subscription's page", chromedp.Click(chromedp.CSS(`table.clock-subs a`)), chromedp.WaitVisible(chromedp.ID("history")))
		assert.Contains(t, text("main"), achSub)
		for _, period := range []string{"2027-01-15", "2027-02-15", "2027-03-15"} {
			assert.Equal(t, "COMPLETED", text(`table.periods tr[data-date="`+period+`"] .tag`), period)
		}
		// The history dates each COMPLETED entry on the clock's day: Jan 15
		// (a Friday) four business days later is Jan 21; Feb 15 and Mar 15
		// (Mondays) the Friday after.
		completed, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#history li")]
			.filter(li => li.querySelector(".tag").textContent === "COMPLETED")
			.map(li => li.querySelector("time").textContent.slice(0, 10) + " for " + li.textContent.match(/period (\d{4}-\d\d-\d\d)/)[1])
			.sort()`))
		require.NoError(t, err)
		assert.Equal(t, []string{"2027-01-21 for 2027-01-15", "2027-02-19 for 2027-02-15", "2027-03-19 for 2027-03-15"}, completed,
			"each bank debit COMPLETED in its own month")
		shot("28-test-clock-bank-debit-subscription")
		status, _ = apiJSON(t, a, http.MethodDelete, "/internal/v1/test_clocks/"+clockID, nil)
		assert.Equal(t, http.StatusOK, status)
	})

	t.Run("a request without the cookie or with a bad CSRF token changes nothing", func(t *testing.T) {
		session := sessionCookie(t)
		assert.True(t, session.HTTPOnly, "HttpOnly")
		assert.Equal(t, network.CookieSameSiteStrict, session.SameSite)
		pause := url.Values{"action": {"pause"}, "months": {"1"}}
		assert.Equal(t, http.StatusUnauthorized, post(t, "/billing/merchant-ops/"+subID+"/action", pause, false))
		pause.Set("csrf", "forged")
		assert.Equal(t, http.StatusForbidden, post(t, "/billing/merchant-ops/"+subID+"/action", pause, true))
		assert.Equal(t, http.StatusForbidden, post(t, "/billing/merchant-ops/"+subID+"/action", url.Values{"action": {"cancel"}}, true))
		_, got := apiJSON(t, a, http.MethodGet, "/internal/v1/accounts/merchant-ops/subscriptions/"+subID, nil)
		assert.Equal(t, "ACTIVE", got["status"], "nothing changed")

		before, err := a.Events.Get(context.Background(), rejectedID)
		require.NoError(t, err)
		assert.Equal(t, http.StatusForbidden, post(t, "/problems/replay", url.Values{"id": {rejectedID}, "csrf": {"forged"}}, true))
		assert.Equal(t, http.StatusUnauthorized, post(t, "/events/"+rejectedID+"/replay", url.Values{}, false))
		after, err := a.Events.Get(context.Background(), rejectedID)
		require.NoError(t, err)
		assert.Equal(t, before.Attempts, after.Attempts, "no replay ran")
	})

	t.Run("keyboard: skip link, focus order, a form submitted with Enter", func(t *testing.T) {
		active := func() string {
			t.Helper()
			s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.activeElement.className + "|" + document.activeElement.textContent.trim()`))
			require.NoError(t, err)
			return s
		}
		step("tab", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("events-chart")), chromedp.KeyEvent(kb.Tab))
		assert.Equal(t, "skip|Skip to content", active(), "the first Tab reaches the skip link")
		step("tab", chromedp.KeyEvent(kb.Tab))
		assert.Equal(t, "|Overview", active(), "then the navigation")
		step("search by keyboard", chromedp.Navigate(base+"/events"), chromedp.Focus(chromedp.ID("q-acct")),
			chromedp.KeyEvent(acct+kb.Enter), chromedp.WaitVisible(chromedp.ID("res-h")))
		assert.Contains(t, text("table.events"), subEvent.ID)
	})

	t.Run("log out ends the session: a copied cookie is refused", func(t *testing.T) {
		copied := newConsole(t, base)
		copied.cookies["ops_session"] = sessionCookie(t).Value
		require.Equal(t, http.StatusOK, copied.get("/").status, "the copy works before logout")
		csrf, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("input[name=csrf]").value`))
		require.NoError(t, err)
		step("logout", chromedp.Navigate(base+"/"), chromedp.Click(chromedp.CSS(".logout button")), chromedp.WaitVisible(chromedp.CSS(".alert.ok")))
		shot("17-logged-out")
		step("back to login", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("token")))
		r := copied.get("/")
		assert.Equal(t, http.StatusSeeOther, r.status, "the copied cookie is refused after logout")
		assert.Equal(t, "/ops/login", r.header.Get("Location"))
		r = copied.do(http.MethodPost, "/billing/merchant-ops/"+subID+"/action", url.Values{"csrf": {csrf}, "action": {"cancel"}})
		assert.Equal(t, http.StatusUnauthorized, r.status, "and cannot change anything")
		_, got := apiJSON(t, a, http.MethodGet, "/internal/v1/accounts/merchant-ops/subscriptions/"+subID, nil)
		assert.Equal(t, "ACTIVE", got["status"])
	})
}

// With a live Stripe key the console has no test clocks: no navigation
// entry, and every /ops/clocks route answers 403 and creates nothing.
func TestConsoleTestClocksAreOffInLiveMode(t *testing.T) {
	a := startApp(t, "http://127.0.0.1:1", "STRIPE_API_KEY", "sk_"+"live_"+"not_a_real_key",
		// a live key refuses the development defaults
		"DYNAMODB_ENDPOINT", strings.Replace(testenv.DynamoEndpoint(t), "127.0.0.1", "localhost", 1),
		"STRIPE_PLATFORM_ACCOUNT", "acct_1OpsLive", "ACTIONS_SECRET", "ops-live-actions-secret")
	require.True(t, a.Config.Livemode())
	base := a.Admin.URL() + "/ops"
	c := login(t, base)
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := c.Get(base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	status, page := get("/")
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, page, `href="/ops/billing"`)
	assert.NotContains(t, page, "/ops/clocks", "no navigation entry")
	csrf := csrfField.FindStringSubmatch(page)
	require.NotNil(t, csrf)
	for _, path := range []string{"/clocks", "/clocks/clock_0123456789abcdef01234567", "/clocks/clock_0123456789abcdef01234567/confirm?action=delete"} {
		status, page := get(path)
		assert.Equal(t, http.StatusForbidden, status, path)
		assert.Contains(t, page, "test mode only", path)
	}
	resp, err := c.PostForm(base+"/clocks", url.Values{"csrf": {csrf[1]}, "frozen_time": {"2027-01-01T00:00"}})
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	ids, err := a.Billing.Store().ListClockIDs(context.Background())
	require.NoError(t, err)
	assert.Empty(t, ids, "nothing created")
}

// The console is off whenever the internal API is.
func TestConsoleIsOffWithTheInternalAPI(t *testing.T) {
	a := startApp(t, "http://127.0.0.1:1", "INTERNAL_API_TOKEN", "disabled")
	for _, path := range []string{"/ops/", "/ops/login", "/ops/static/style.css"} {
		resp, err := http.Get(a.Admin.URL() + path)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, path)
	}
}

// A clock past TEST_CLOCKS_MAX is refused on the console as on the API
// (409, "too many test clocks"), not taken for an outage (503), and
// nothing is created.
func TestConsoleRefusesAClockPastTheMaximum(t *testing.T) {
	a := startApp(t, "http://127.0.0.1:1", "TEST_CLOCKS_MAX", "1")
	base := a.Admin.URL() + "/ops"
	c := login(t, base)
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Get(base + "/clocks")
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	csrf := csrfField.FindStringSubmatch(string(page))
	require.NotNil(t, csrf)
	create := func(name string) (int, string) {
		t.Helper()
		resp, err := c.PostForm(base+"/clocks", url.Values{"csrf": {csrf[1]}, "frozen_time": {"2027-01-01T00:00"}, "name": {name}})
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	status, _ := create("first")
	require.Equal(t, http.StatusSeeOther, status, "the first clock is created")
	status, body := create("second")
	assert.Equal(t, http.StatusConflict, status)
	assert.Contains(t, body, "too many test clocks")
	assert.Contains(t, body, "No clock was created.")
	ids, err := a.Billing.Store().ListClockIDs(context.Background())
	require.NoError(t, err)
	assert.Len(t, ids, 1, "the second clock was not created")
}
