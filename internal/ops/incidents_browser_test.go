package ops_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/browsertest"
	"github.com/stripe-payments/stripe-payments/internal/incidents"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// TestConsoleIncidentInARealBrowser: 50 events fail for one cause (Stripe
// down during their invoice lookup) and the overview leads with one open
// incident of 50; the operator acknowledges it, Stripe comes back, a dry
// run shows 50 events that would apply, the confirmed replay runs in the
// background to done with 50 applied, and the operator resolves the
// incident. Each page at 1280 and 390 px.
func TestConsoleIncidentInARealBrowser(t *testing.T) {
	const n = 50
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
	shot := func(name string) {
		t.Helper()
		for _, vp := range []struct {
			suffix string
			w, h   int64
		}{{"", 1280, 900}, {"-phone", 390, 844}} {
			step("viewport", chromedp.EmulateViewport(vp.w, vp.h))
			png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "incident-"+name+vp.suffix+".png"), png, 0o644))
		}
		step("viewport", chromedp.EmulateViewport(1280, 900))
	}

	stripe.setDown(true)
	for range n {
		payload := stripetest.Event{Fixture: "payment_intent.succeeded", Object: map[string]any{"invoice": consoleInvoice}}.Build(t)
		require.GreaterOrEqual(t, deliver(t, a, payload), 500, "fails while Stripe is down")
	}
	list, err := a.Incidents.List(context.Background(), incidents.Open)
	require.NoError(t, err)
	require.Len(t, list, 1, "%+v", list)
	inc := list[0]
	require.EqualValues(t, n, inc.Count)

	step("login", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SetValue(chromedp.ID("token"), token), chromedp.Click(chromedp.CSS(`form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.ID("open-incidents")))
	row := `#open-incidents tr[data-id="` + inc.ID + `"]`
	assert.Contains(t, text(row), "50")
	assert.Contains(t, text(row), "open")
	assert.Contains(t, text(row), "Stripe refused a request as invalid", "the list reads the cause in words")
	shot("01-overview")

	step("open the incident", chromedp.Click(chromedp.CSS(row+" a")), chromedp.WaitVisible(chromedp.ID("incident-state")))
	assert.Equal(t, "open", text("#incident-state"))
	assert.Equal(t, "50", text("#incident-count"))
	// What broke in words, what to do, and its runbook.
	// (The fake Stripe, down, answers 400 invalid_request_error.)
	assert.Equal(t, "Stripe refused a request as invalid", text("h1"))
	assert.Contains(t, text("#incident-action"), "read a sample event's error")
	assert.Contains(t, text("#incident-action"), "Then replay them")
	assert.Equal(t, "stripe_invalid_request_error", text("#incident-cause"))
	shot("02-incident")
	step("open its runbook", chromedp.Click(chromedp.ID("incident-runbook")), chromedp.WaitVisible(chromedp.ID("doc")))
	assert.Contains(t, text("#doc"), "StripePaymentsEventsFailing")
	assert.Contains(t, text("#doc"), "What to do")
	step("back to the incident", chromedp.Navigate(base+"/incidents/"+inc.ID), chromedp.WaitVisible(chromedp.ID("incident-state")))
	step("acknowledge", chromedp.Click(chromedp.ID("acknowledge")), chromedp.WaitVisible(chromedp.CSS(`#incident-state[data-state="acknowledged"]`)))
	assert.Contains(t, text("#audit"), "open → acknowledged by console")

	stripe.setDown(false)
	step("dry run", chromedp.Click(chromedp.ID("replay-dry-run")), chromedp.WaitVisible(chromedp.ID("dry-matched")))
	assert.Equal(t, "50", text("#dry-matched"))
	assert.Contains(t, text("#replay-form table"), "apply")
	shot("03-dry-run")
	// The dry run changed nothing.
	status, body := apiJSON(t, a, http.MethodGet, "/internal/v1/incidents?state=acknowledged", nil)
	require.Equal(t, http.StatusOK, status)
	require.Len(t, body["data"], 1)
	assert.EqualValues(t, n, body["data"].([]any)[0].(map[string]any)["count"])

	step("confirm", chromedp.Click(chromedp.ID("replay-confirm")), chromedp.WaitVisible(chromedp.ID("replay-status")))
	require.Eventually(t, func() bool {
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`((document.querySelector("#replay-status")||{}).textContent||"")`))
		return err == nil && s == "done"
	}, 60*time.Second, 200*time.Millisecond, "the progress page reaches done (it refreshes itself)")
	assert.Equal(t, "50", text("#replay-done"))
	assert.Equal(t, "50", text("#replay-applied"))
	assert.Equal(t, "0", text("#replay-failed"))
	shot("04-replay-done")

	step("back to the incident", chromedp.Navigate(base+"/incidents/"+inc.ID), chromedp.WaitVisible(chromedp.ID("incident-state")))
	assert.Equal(t, "0", text("#incident-count"), "nothing fails any more")
	step("resolve", chromedp.Click(chromedp.ID("resolve")), chromedp.WaitVisible(chromedp.CSS(`#incident-state[data-state="resolved"]`)))
	assert.Contains(t, text("#audit"), "acknowledged → resolved by console")
	shot("05-resolved")
	step("overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("open-incidents")))
	assert.Equal(t, "No incidents.", text("#no-incidents"))

	// A dead letter (a receiver that kept failing) is its own incident,
	// re-driven from its page after a dry run.
	dead := uuid.New()
	_, err = a.Pool.Exec(context.Background(), `INSERT INTO outbox (id, topic, type, dedupe_key, payload, attempts, last_error, dead_at)
		VALUES ($1, 'actions', 'purchase.completed', 'ops-incident-dead', '{}', 8, 'receiver answered 500', now())`, dead)
	require.NoError(t, err)
	step("overview with a dead letter", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#open-incidents tr[data-id]")))
	assert.Contains(t, text("#open-incidents tbody"), "delivery")
	step("open it", chromedp.Click(chromedp.CSS("#open-incidents tr[data-id] a")), chromedp.WaitVisible(chromedp.ID("replay-dry-run")))
	step("dry run", chromedp.Click(chromedp.ID("replay-dry-run")), chromedp.WaitVisible(chromedp.ID("dry-matched")))
	assert.Contains(t, text("#dry-run"), "1 dead letter(s) would be re-driven")
	shot("06-dead-letter-dry-run")
	step("re-drive", chromedp.Click(chromedp.ID("replay-confirm")), chromedp.WaitVisible(chromedp.ID("replay-status")))
	require.Eventually(t, func() bool {
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`((document.querySelector("#replay-status")||{}).textContent||"")`))
		return err == nil && s == "done"
	}, 60*time.Second, 200*time.Millisecond)
	assert.Equal(t, "1", text("#replay-applied"))
	var redrives int
	require.NoError(t, a.Pool.QueryRow(context.Background(), `SELECT redrives FROM outbox WHERE id = $1`, dead).Scan(&redrives))
	assert.Equal(t, 1, redrives)

	// A rejected event: its incident says what to do instead of offering a
	// Replay that would only be rejected again.
	rejectedID := stripetest.NewID()
	require.Equal(t, http.StatusOK, deliver(t, a, stripetest.Event{Fixture: "payment_intent.succeeded", ID: rejectedID,
		Object: map[string]any{"invoice": "not-an-invoice"}}.Build(t)), "rejected")
	list, err = a.Incidents.List(context.Background(), incidents.Open)
	require.NoError(t, err)
	var rejected incidents.Incident
	for _, i := range list {
		if strings.HasPrefix(i.Cause, "rejected.") {
			rejected = i
		}
	}
	require.NotEmpty(t, rejected.ID, "%+v", list)
	step("rejected incident", chromedp.Navigate(base+"/incidents/"+rejected.ID), chromedp.WaitVisible(chromedp.ID("incident-state")))
	assert.True(t, strings.HasPrefix(text("h1"), "Rejected: "), text("h1"))
	assert.NotContains(t, text("h1"), "rejected.", "words, not the class")
	assert.Contains(t, text("#incident-action"), "rejected again")
	assert.Contains(t, text("#no-replay"), "rejected again")
	replayButtons, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#replay-form, #replay-dry-run").length`))
	require.NoError(t, err)
	assert.Zero(t, replayButtons, "no Replay on a rejected incident")
	href, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#incident-runbook").getAttribute("href")`))
	require.NoError(t, err)
	assert.Equal(t, "/ops/docs/runbooks/StripePaymentsEventRejected.md", href)
	shot("07-rejected")
	step("its runbook", chromedp.Click(chromedp.ID("incident-runbook")), chromedp.WaitVisible(chromedp.ID("doc")))
	assert.Contains(t, text("#doc"), "StripePaymentsEventRejected")
}
