package ops_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/browsertest"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// TestConsoleBillingDangerousStatesInARealBrowser: a charge
// whose outcome is unknown is visible on the account and subscription pages
// (attempt n, since when, idempotency key, "outcome unknown: the next
// collection asks Stripe first") and the actions the API would refuse are
// not offered; a subscription's history reads newest first, each entry says
// what changed, and "Older history" leads to older entries; subscriptions
// are found by id, customer and email; a dead letter is re-driven from its
// button. Each page at 1280 and 390 px.
func TestConsoleBillingDangerousStatesInARealBrowser(t *testing.T) {
	stripe := newFakeStripe(t)
	a := startApp(t, stripe.URL)
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
		return strings.TrimSpace(s)
	}
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
		require.NoError(t, err)
		return n
	}
	// shot saves the page at 1280 and at 390 px, and checks that at both
	// nothing is wider than the screen (no table hiding its status or
	// error off to the right).
	shot := func(name string) {
		t.Helper()
		for _, vp := range []struct {
			suffix string
			w, h   int64
		}{{"", 1280, 900}, {"-phone", 390, 844}} {
			step("viewport", chromedp.EmulateViewport(vp.w, vp.h))
			wide, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
			require.NoError(t, err)
			assert.LessOrEqual(t, wide, int(vp.w), "%s: the page is wider than %d px", name, vp.w)
			hidden, err := chromedp.Run(ctx, chromedp.Evaluate[int](
				`[...document.querySelectorAll("main table")].filter(t => t.scrollWidth > t.parentElement.clientWidth + 1).length`))
			require.NoError(t, err)
			assert.Zero(t, hidden, "%s: a table scrolls sideways at %d px", name, vp.w)
			png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "billing-"+name+vp.suffix+".png"), png, 0o644))
		}
		step("viewport", chromedp.EmulateViewport(1280, 900))
	}
	today := time.Now().UTC().Format("2006-01-02")
	create := func(account, customer, email string) string {
		t.Helper()
		status, sub := apiJSON(t, a, http.MethodPost, "/internal/v1/accounts/"+account+"/subscriptions", map[string]any{
			"sku": "gold", "email": email, "payment_day": 28, "amount": 1500, "currency": "usd",
			"term": "MONTHLY", "customer": customer, "payment_method": "pm_" + customer})
		require.Equal(t, http.StatusCreated, status, sub)
		return sub["subscription_id"].(string)
	}

	// Beside it, on the same account: a healthy subscription not yet due
	// (no tag at all), and one whose card declined today (unpaid).
	healthySub := create("merchant-unknown", "cus_healthy", "healthy@example.com")
	later := time.Now().UTC().AddDate(0, 0, 20).Format("2006-01-02")
	status, moved := apiJSON(t, a, http.MethodPatch, "/internal/v1/accounts/merchant-unknown/subscriptions/"+healthySub, map[string]any{"next_payment_date": later})
	require.Equal(t, http.StatusOK, status, moved)
	declinedSub := create("merchant-unknown", "cus_declined", "declined@example.com")
	status, moved = apiJSON(t, a, http.MethodPatch, "/internal/v1/accounts/merchant-unknown/subscriptions/"+declinedSub, map[string]any{"next_payment_date": today})
	require.Equal(t, http.StatusOK, status, moved)
	stripe.decline.Store(true)
	_, err := a.Billing.CollectNow(context.Background())
	require.NoError(t, err)
	stripe.decline.Store(false)

	// A charge today gets a 500 before Stripe acts: its outcome is unknown.
	unknownSub := create("merchant-unknown", "cus_unknown", "unknown@example.com")
	status, moved = apiJSON(t, a, http.MethodPatch, "/internal/v1/accounts/merchant-unknown/subscriptions/"+unknownSub, map[string]any{"next_payment_date": today})
	require.Equal(t, http.StatusOK, status, moved)
	stripe.unknown.Store(true)
	started := time.Now()
	rep, err := a.Billing.CollectNow(context.Background())
	require.NotNil(t, rep, "%v", err)
	require.Equal(t, 1, rep.Unknown)
	a.RecordBillingRun(context.Background(), "collect", a.Billing.NowDate(), started, rep, err)
	stripe.unknown.Store(false)
	status, refused := apiJSON(t, a, http.MethodPatch, "/internal/v1/accounts/merchant-unknown/subscriptions/"+unknownSub, map[string]any{"action": "cancel"})
	require.Equal(t, http.StatusConflict, status, "the API refuses a change while the outcome is unknown: %v", refused)

	// A subscription with a long history: paused, resumed, its rule and
	// then its amount changed many times (more than a page).
	histSub := create("merchant-history", "cus_history", "History@Example.com")
	patch := func(body map[string]any) {
		t.Helper()
		status, out := apiJSON(t, a, http.MethodPatch, "/internal/v1/accounts/merchant-history/subscriptions/"+histSub, body)
		require.Equal(t, http.StatusOK, status, "%v: %v", body, out)
	}
	patch(map[string]any{"action": "pause", "months": 1})
	patch(map[string]any{"action": "resume"})
	patch(map[string]any{"payment_day": 12})
	for i := range 55 {
		patch(map[string]any{"amount": 2000 + i})
	}
	patch(map[string]any{"payment_day": 14}) // the newest change

	step("login", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SetValue(chromedp.ID("token"), token), chromedp.Click(chromedp.CSS(`form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.ID("events-chart")))

	t.Run("an unknown outcome on the account page", func(t *testing.T) {
		step("account", chromedp.Navigate(base+"/billing/merchant-unknown"), chromedp.WaitVisible(chromedp.ID("account-unknown")))
		banner := text("#account-unknown")
		assert.Contains(t, banner, "Outcome unknown: the next collection asks Stripe first")
		assert.Contains(t, banner, unknownSub)
		assert.Contains(t, banner, "attempt 1")
		assert.Contains(t, banner, "in flight since "+today)
		assert.Contains(t, banner, "idempotency key")
		assert.Contains(t, text(`tr[data-sub="`+unknownSub+`"]`), "attempt 1 outcome unknown")
		// Only where it is true: the healthy and the declined
		// subscriptions carry no unknown-outcome tag.
		for _, sub := range []string{healthySub, declinedSub} {
			assert.NotContains(t, text(`tr[data-sub="`+sub+`"]`), "outcome unknown", sub)
			assert.Zero(t, count(`tr[data-sub="`+sub+`"] .unknown`), sub)
		}
		// A declined card's subscription reads unpaid, not a plain ACTIVE;
		// the healthy one carries no tag but its status.
		assert.Contains(t, text(`tr[data-sub="`+declinedSub+`"]`), "unpaid: 1 ERROR")
		assert.Equal(t, 1, count(`tr[data-sub="`+declinedSub+`"] .tag.warn`), "its ACTIVE is not the green of a paying subscription")
		assert.Equal(t, 1, count(`tr[data-sub="`+healthySub+`"] .tag.ok`))
		assert.Zero(t, count(`tr[data-sub="`+healthySub+`"] .unpaid`))
		assert.Zero(t, count(`tr[data-sub="`+unknownSub+`"] .unpaid`), "an attempt in flight is not yet unpaid")
		assert.Equal(t, "ACTIVE", text(`tr[data-sub="`+healthySub+`"] td[data-label="Status"]`))
		shot("01-account-unknown-outcome")
	})

	t.Run("an unknown outcome on the subscription page, its actions hidden", func(t *testing.T) {
		step("subscription", chromedp.Click(chromedp.CSS(`#account-unknown a`)), chromedp.WaitVisible(chromedp.ID("sub-status")))
		assert.Equal(t, "ACTIVE", text("#sub-status"))
		assert.Equal(t, "payment outcome unknown", text("#sub-unknown"))
		assert.Contains(t, text(".in-flight"), "Outcome unknown: the next collection asks Stripe first")
		assert.Equal(t, "1", text(".in-flight .if-attempt"))
		assert.Contains(t, text(".in-flight .if-since"), today)
		key := text(".in-flight .if-key")
		assert.Contains(t, key, unknownSub, "the attempt's idempotency key")
		for _, id := range []string{"pause", "resume", "waive", "pay", "cancel"} {
			assert.Zero(t, count("#"+id), "%s is not offered while the outcome is unknown", id)
		}
		assert.Contains(t, text("#actions-refused"), "refused while a payment attempt's outcome is unknown")
		period, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector(".in-flight").dataset.period`))
		require.NoError(t, err)
		assert.Contains(t, text(`table.periods tr[data-date="`+period+`"]`), "attempt 1 outcome unknown")
		shot("02-subscription-unknown-outcome")
		// A hand-made confirmation link says why instead of confirming.
		step("confirm link", chromedp.Navigate(base+"/billing/merchant-unknown/"+unknownSub+"/confirm?action=cancel"),
			chromedp.WaitVisible(chromedp.CSS(".alert.bad")))
		assert.Contains(t, text(".alert.bad"), "unknown outcome")
		assert.Contains(t, text(".alert.bad"), key)
		assert.Zero(t, count("#confirm"))
		// A form posted from a page loaded before the attempt (a stale
		// page) is refused with the same reason, and changes nothing.
		csrf, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("input[name=csrf]").value`))
		require.NoError(t, err)
		cookies, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{base + "/"}})
		require.NoError(t, err)
		for _, action := range []url.Values{{"action": {"cancel"}}, {"action": {"pause"}, "months": {"1"}}, {"action": {"pay"}}} {
			action.Set("csrf", csrf)
			req, err := http.NewRequest(http.MethodPost, base+"/billing/merchant-unknown/"+unknownSub+"/action", strings.NewReader(action.Encode()))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", a.Admin.URL())
			for _, c := range cookies.Cookies {
				req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Equal(t, http.StatusConflict, resp.StatusCode, action.Get("action"))
			assert.Contains(t, string(body), "unknown outcome", action.Get("action"))
		}
		_, got := apiJSON(t, a, http.MethodGet, "/internal/v1/accounts/merchant-unknown/subscriptions/"+unknownSub, nil)
		assert.Equal(t, "ACTIVE", got["status"], "nothing changed")
	})

	t.Run("once the next collection settled it, the actions come back", func(t *testing.T) {
		_, err := a.Billing.CollectNow(context.Background())
		require.NoError(t, err)
		step("subscription", chromedp.Navigate(base+"/billing/merchant-unknown/"+unknownSub), chromedp.WaitVisible(chromedp.ID("sub-status")))
		assert.Zero(t, count(".in-flight"))
		assert.Equal(t, 1, count("#cancel"))
		step("account", chromedp.Navigate(base+"/billing/merchant-unknown"), chromedp.WaitVisible(chromedp.ID("subs-h")))
		assert.Zero(t, count("#account-unknown"))
	})

	t.Run("a decline retrying cannot fix is tagged not retried", func(t *testing.T) {
		hardSub := create("merchant-hard", "cus_hard", "hard@example.com")
		status, moved := apiJSON(t, a, http.MethodPatch, "/internal/v1/accounts/merchant-hard/subscriptions/"+hardSub, map[string]any{"next_payment_date": today})
		require.Equal(t, http.StatusOK, status, moved)
		stripe.DeclineAs = func(stripetest.PI) string { return "lost_card" }
		stripe.decline.Store(true)
		rep, err := a.Billing.CollectNow(context.Background())
		stripe.decline.Store(false)
		require.NoError(t, err)
		require.Equal(t, 1, rep.Declined)
		step("subscription", chromedp.Navigate(base+"/billing/merchant-hard/"+hardSub), chromedp.WaitVisible(chromedp.ID("per-h")))
		assert.Contains(t, text("table.periods"), "not retried: lost_card")
		assert.Contains(t, strings.Join(func() []string {
			out, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#history .change")].map(e => e.textContent)`))
			require.NoError(t, err)
			return out
		}(), "|"), "declined, not retried: lost_card")
		shot("02b-subscription-hard-decline")
	})

	t.Run("history newest first, what changed, pager labels that match", func(t *testing.T) {
		step("subscription", chromedp.Navigate(base+"/billing/merchant-history/"+histSub), chromedp.WaitVisible(chromedp.ID("history")))
		times := func() []string {
			t.Helper()
			out, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#history time")].map(e => e.textContent)`))
			require.NoError(t, err)
			return out
		}
		changes := func() []string {
			t.Helper()
			out, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#history .change")].map(e => e.textContent)`))
			require.NoError(t, err)
			return out
		}
		first := times()
		require.Len(t, first, 50, "a page of history")
		for i := 1; i < len(first); i++ {
			assert.GreaterOrEqual(t, first[i-1], first[i], "newest first")
		}
		assert.Contains(t, changes()[0], "rule changed", "the newest change leads")
		assert.Contains(t, strings.Join(changes(), "|"), "amount changed to 20.54 USD")
		assert.Zero(t, count("#newer-history"), "the first page has nothing newer")
		assert.Equal(t, "Older history →", text("#older-history"))
		shot("03-subscription-history")
		step("older", chromedp.Click(chromedp.ID("older-history")), chromedp.WaitVisible(chromedp.ID("newer-history")))
		older := times()
		require.NotEmpty(t, older)
		assert.LessOrEqual(t, older[0], first[len(first)-1], "Older history leads to older entries")
		all := strings.Join(changes(), "|")
		for _, want := range []string{"paused", "resumed", "rule changed", "scheduled (subscription created)"} {
			assert.Contains(t, all, want)
		}
		shot("04-subscription-older-history")
		step("newer", chromedp.Click(chromedp.ID("newer-history")), chromedp.WaitVisible(chromedp.ID("older-history")))
		assert.Equal(t, first, times(), "Newer history leads back")
	})

	t.Run("search by subscription id, customer and email", func(t *testing.T) {
		search := func(by, q string) {
			t.Helper()
			step("search "+by, chromedp.Navigate(base+"/billing"), chromedp.WaitVisible(chromedp.ID("b-q")),
				chromedp.SetValue(chromedp.ID("b-by"), by), chromedp.SetValue(chromedp.ID("b-q"), q),
				chromedp.Click(chromedp.ID("b-search")), chromedp.WaitVisible(chromedp.CSS("h1")))
		}
		search("subscription", histSub)
		step("opened", chromedp.WaitVisible(chromedp.ID("sub-status")))
		assert.Contains(t, text("h1"), histSub, "one subscription: its page")
		other := create("merchant-other", "cus_history", "someone@example.com") // the same customer on another account
		search("customer", "cus_history")
		step("found", chromedp.WaitVisible(chromedp.ID("found")))
		assert.Contains(t, text("#found"), histSub)
		assert.Contains(t, text("#found"), other)
		assert.Contains(t, text("#found"), "merchant-other")
		shot("05-search-by-customer")
		search("email", "history@EXAMPLE.com")
		step("found", chromedp.WaitVisible(chromedp.ID("found")))
		assert.Equal(t, 1, count("#found tbody tr"), "email matches whatever the case")
		assert.Contains(t, text("#found"), histSub)
		search("email", "nobody@example.com")
		step("none", chromedp.WaitVisible(chromedp.ID("found-none")))
		search("customer", "cus bad")
		step("bad input", chromedp.WaitVisible(chromedp.CSS(".alert.bad")))
		assert.Contains(t, text(".alert.bad"), "cus_")
	})

	t.Run("a dead letter is re-driven from its button", func(t *testing.T) {
		dead := uuid.New()
		_, err := a.Pool.Exec(context.Background(), `INSERT INTO outbox (id, topic, type, dedupe_key, payload, attempts, last_error, dead_at)
			VALUES ($1, 'actions', 'purchase.completed', 'ops-billing-dead', '{}', 8, 'receiver answered 500: a long error that must wrap on a phone instead of pushing the row off-screen', now())`, dead)
		require.NoError(t, err)
		step("dead letters", chromedp.Navigate(base+"/outbox?dead=1&topic=actions"), chromedp.WaitVisible(chromedp.ID("redrive-"+dead.String())))
		assert.NotContains(t, text("main"), "POST /internal", "no API instruction")
		shot("06-dead-letters")
		step("re-drive", chromedp.Click(chromedp.ID("redrive-"+dead.String())), chromedp.WaitVisible(chromedp.CSS(".alert.ok")))
		assert.Contains(t, text(".alert.ok"), "Re-driven: message "+dead.String())
		assert.Zero(t, count("#redrive-"+dead.String()), "no longer a dead letter")
		var redrives int
		var isDead bool
		require.NoError(t, a.Pool.QueryRow(context.Background(), `SELECT redrives, dead_at IS NOT NULL FROM outbox WHERE id = $1`, dead).Scan(&redrives, &isDead))
		assert.Equal(t, 1, redrives)
		assert.False(t, isDead)
		shot("07-dead-letter-redriven")
	})

	t.Run("a rejected event is not tagged processed; a failed replay says why", func(t *testing.T) {
		rejectedID := "evt_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:24]
		require.Equal(t, http.StatusOK, deliver(t, a, stripetest.Event{Fixture: "payment_intent.succeeded", ID: rejectedID,
			Object: map[string]any{"invoice": "not-an-invoice"}}.Build(t)))
		step("rejected event", chromedp.Navigate(base+"/events/"+rejectedID), chromedp.WaitVisible(chromedp.ID("event-status")))
		assert.Equal(t, "rejected", text("#event-status"))
		assert.Zero(t, count(".tag.ok"), "no green tag on a rejected event")
		shot("13-rejected-event")
		stripe.setDown(true)
		failedID := "evt_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:24]
		require.GreaterOrEqual(t, deliver(t, a, stripetest.Event{Fixture: "payment_intent.succeeded", ID: failedID,
			Object: map[string]any{"invoice": consoleInvoice}}.Build(t)), 500)
		step("failed event", chromedp.Navigate(base+"/events/"+failedID), chromedp.WaitVisible(chromedp.ID("replay")),
			chromedp.Click(chromedp.ID("replay")), chromedp.WaitVisible(chromedp.ID("replay-results")))
		assert.Contains(t, text("#replay-results"), "could not be processed")
		assert.Contains(t, text("#replay-results .replay-cause"), "test Stripe is down", "the cause, not only that it failed")
		shot("14-replay-failed-why")
		stripe.setDown(false)
	})

	t.Run("the other pages at both widths", func(t *testing.T) {
		for _, p := range []struct{ name, path, wait string }{
			{"08-overview", "/", "events-chart"}, {"09-problems", "/problems", "main"}, {"10-billing", "/billing", "b-q"},
			{"11-runs", "/runs", "main"}, {"12-outbox", "/outbox", "main"},
		} {
			step(p.name, chromedp.Navigate(base+p.path), chromedp.WaitVisible(chromedp.ID(p.wait)))
			shot(p.name)
		}
		step("overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("br-h")))
		assert.Contains(t, text("#br-h + div table"), "outcome unknown", "the run that left an unknown outcome says why")
	})
}
