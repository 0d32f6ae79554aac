package ops_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/handler"
	"github.com/stripe-payments/stripe-payments/internal/incidents"
	"github.com/stripe-payments/stripe-payments/internal/replay"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// The replay's page has a Cancel replay button while it runs; pressing it
// cancels the replay (recorded as the console's, with when) and the page
// then shows it cancelled without the button; pressing it again is a 409
// that changes nothing. A billing incident of unknown charge outcomes says
// what that means and links its runs.
func TestConsoleCancelsAReplayAndShowsUnknownOutcomes(t *testing.T) {
	a := apptest.New(t, apptest.Options{}) // no runner: the replay stays running until cancelled
	srv := httptest.NewServer(a.Admin.Echo)
	t.Cleanup(srv.Close)
	ctx := context.Background()
	failing := handler.TrackProblems(a.Events, a.OpsProblems, slog.New(slog.DiscardHandler))
	for range 3 {
		payload := stripetest.Event{Fixture: "customer.created", Created: time.Now().Add(-time.Hour)}.Build(t)
		ev, err := stripeevent.Parse(payload)
		require.NoError(t, err)
		rec := events.NewRecord(ev, payload, a.Config.PlatformAccount, a.Config.EventTTL, stripeevent.SourceWebhook, time.Now())
		require.NoError(t, failing.RecordFailure(ctx, rec, errors.New("Stripe unreachable: EOF")))
	}
	open, err := a.Incidents.List(ctx, incidents.Open)
	require.NoError(t, err)
	require.Len(t, open, 1)
	r, err := a.Replays.Store.Start(ctx, replay.Filter{Incident: open[0].ID}, "test")
	require.NoError(t, err)

	c := newConsole(t, srv.URL+"/ops")
	c.mustLogin(a.Config.InternalAPIToken)
	page := c.get("/replays/" + r.ID)
	require.Equal(t, http.StatusOK, page.status)
	assert.Contains(t, page.body, `id="replay-cancel"`)
	assert.Contains(t, page.body, `action="/ops/replays/`+r.ID+`/cancel"`)

	// Without the session's CSRF token: refused, nothing changed.
	refused := c.do(http.MethodPost, "/replays/"+r.ID+"/cancel", url.Values{})
	assert.GreaterOrEqual(t, refused.status, 400)
	got, err := a.Replays.Store.Get(ctx, r.ID)
	require.NoError(t, err)
	assert.Equal(t, replay.StatusRunning, got.Status)

	csrf := c.csrf()
	done := c.do(http.MethodPost, "/replays/"+r.ID+"/cancel", url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, done.status, done.body)
	assert.Equal(t, "/ops/replays/"+r.ID, done.header.Get("Location"))
	got, err = a.Replays.Store.Get(ctx, r.ID)
	require.NoError(t, err)
	assert.Equal(t, replay.StatusCancelled, got.Status)
	assert.Equal(t, "console", got.CancelledBy)
	assert.False(t, got.FinishedAt.IsZero())
	page = c.get("/replays/" + r.ID)
	require.Equal(t, http.StatusOK, page.status)
	assert.Contains(t, page.body, `id="replay-cancelled"`)
	assert.NotContains(t, page.body, `id="replay-cancel"`)

	again := c.do(http.MethodPost, "/replays/"+r.ID+"/cancel", url.Values{"csrf": {csrf}})
	assert.Equal(t, http.StatusConflict, again.status)
	assert.Contains(t, again.body, "only a running replay can be cancelled")
	unknown := c.do(http.MethodPost, "/replays/rpl_000000000000000000000000/cancel", url.Values{"csrf": {csrf}})
	assert.Equal(t, http.StatusNotFound, unknown.status)
	after, err := a.Replays.Store.Get(ctx, r.ID)
	require.NoError(t, err)
	assert.Equal(t, got, after, "the refused presses changed nothing")

	// An older report names no subscription: the sample is the run.
	_, err = a.Pool.Exec(ctx, `INSERT INTO ops_billing_runs (job, date, started_at, finished_at, report) VALUES ('collect', now(), now() - interval '1 hour', now(), '{"unknown": 2, "unresolved": 2}')`)
	require.NoError(t, err)
	incPath := "/incidents/" + incidents.ID(incidents.KindBilling, incidents.CauseChargeOutcomeUnknown, "collect", "")
	inc := c.get(incPath)
	require.Equal(t, http.StatusOK, inc.status, inc.body)
	assert.Contains(t, inc.body, `id="unknown-outcome-hint"`)
	assert.Contains(t, inc.body, `href="/ops/runs"`)
	assert.NotContains(t, inc.body, `id="replay-dry-run"`, "a billing incident is not replayed")
	// A newer one names them: each links its subscription's page.
	_, err = a.Pool.Exec(ctx, `INSERT INTO ops_billing_runs (job, date, started_at, finished_at, report) VALUES ('collect', now(), now(), now(),
		'{"unresolved": 1, "unresolved_samples": ["acc-1/sub_0123456789"]}')`)
	require.NoError(t, err)
	inc = c.get(incPath)
	require.Equal(t, http.StatusOK, inc.status, inc.body)
	assert.Contains(t, inc.body, `href="/ops/billing/acc-1/sub_0123456789"`)
}
