package ops_test

import (
	"context"
	"errors"
	"fmt"
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

// While replay.MaxRunning replays run, the console's replay of an incident
// is refused with a 409 on the incident's page that says why, and starts
// nothing (it used to be shown as the service being unavailable).
func TestConsoleReplayRefusedWhileTheMostReplaysRun(t *testing.T) {
	a := apptest.New(t, apptest.Options{}) // no runner: replays stay running
	srv := httptest.NewServer(a.Admin.Echo)
	t.Cleanup(srv.Close)
	ctx := context.Background()
	failing := handler.TrackProblems(a.Events, a.OpsProblems, slog.New(slog.DiscardHandler))
	payload := stripetest.Event{Fixture: "customer.created", Created: time.Now().Add(-time.Hour)}.Build(t)
	ev, err := stripeevent.Parse(payload)
	require.NoError(t, err)
	rec := events.NewRecord(ev, payload, a.Config.PlatformAccount, a.Config.EventTTL, stripeevent.SourceWebhook, time.Now())
	require.NoError(t, failing.RecordFailure(ctx, rec, errors.New("Stripe unreachable: EOF")))
	open, err := a.Incidents.List(ctx, incidents.Open)
	require.NoError(t, err)
	require.Len(t, open, 1)
	for range replay.MaxRunning {
		_, err := a.Replays.Store.Start(ctx, replay.Filter{Incident: open[0].ID}, "test")
		require.NoError(t, err)
	}

	c := newConsole(t, srv.URL+"/ops")
	c.mustLogin(a.Config.InternalAPIToken)
	refused := c.do(http.MethodPost, "/incidents/"+open[0].ID+"/replay", url.Values{"csrf": {c.csrf()}, "confirm": {"yes"}})
	assert.Equal(t, http.StatusConflict, refused.status)
	assert.Contains(t, refused.body, fmt.Sprintf("%d replays are running", replay.MaxRunning))
	assert.Contains(t, refused.body, "Nothing was started.")
	var n int
	require.NoError(t, a.Pool.QueryRow(ctx, `SELECT count(*) FROM replays`).Scan(&n))
	assert.Equal(t, replay.MaxRunning, n)
}
