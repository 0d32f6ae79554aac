package app_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/api"
	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/incidents"
	"github.com/stripe-payments/stripe-payments/internal/replay"
)

// cancelAfter replays through the real path and, right after the n-th
// re-drive (applied, not yet recorded), has an operator cancel the replay
// through the API.
type cancelAfter struct {
	t      *testing.T
	inner  replay.One
	n      int32
	calls  atomic.Int32
	cancel func() (int, map[string]any)
	// inHand is the event re-driven when the cancel came.
	inHand string
}

func (c *cancelAfter) Replay(ctx context.Context, id, account string) (string, error) {
	res, err := c.inner.Replay(ctx, id, account)
	if c.calls.Add(1) == c.n {
		c.inHand = id
		status, body := c.cancel()
		require.Equal(c.t, http.StatusOK, status, body)
	}
	return res.Outcome, err
}

// TestBulkReplayCancelMidRunThenNewReplayAppliesOnce: a bulk replay of an
// incident's 20 failed events is cancelled through the API while its 8th
// event is being re-driven. The runner stops there (no 9th re-drive), the
// replay says cancelled, by whom and when; cancelling it again, an unknown
// or a malformed id is a clear 4xx that changes nothing. A new replay of the
// incident then matches only the 12 events never re-driven and applies
// them: every event's effects applied exactly once.
func TestBulkReplayCancelMidRunThenNewReplayAppliesOnce(t *testing.T) {
	const n, cancelAt = 20, 8
	a := apptest.New(t, apptest.Options{Env: map[string]string{"INTERNAL_API_TOKEN": token}, App: countedEffects()})
	srv := httptest.NewServer(a.Admin.Echo)
	t.Cleanup(srv.Close)
	base := srv.URL + "/internal/v1/replays"
	ctx := context.Background()

	ids := failEvents(t, a, n, func(string) error { return errors.New("Stripe unreachable: EOF") })
	list, err := a.Incidents.List(ctx, incidents.Open)
	require.NoError(t, err)
	require.Len(t, list, 1)
	inc := list[0].ID

	status, body := replayCall(t, http.MethodPost, base, map[string]any{"filter": map[string]any{"incident": inc}})
	require.Equal(t, http.StatusAccepted, status, body)
	id := body["id"].(string)

	replayer := &cancelAfter{t: t, n: cancelAt,
		inner: replay.One{Events: a.Events, Handler: a.Handler, Platform: a.Config.PlatformAccount},
		cancel: func() (int, map[string]any) {
			return replayCall(t, http.MethodPost, base+"/"+id+"/cancel", nil)
		}}
	worked, err := replay.NewRunner(a.Replays.Store, replayer, replay.RunnerConfig{Lease: time.Minute}).RunOnce(ctx)
	require.NoError(t, err, "a cancel stops the runner quietly")
	assert.True(t, worked)
	assert.EqualValues(t, cancelAt, replayer.calls.Load(), "nothing is re-driven after the cancel")
	require.NotEmpty(t, replayer.inHand)
	assert.Equal(t, 1, effectsOf(t, a, replayer.inHand), "the event in hand at the cancel was applied, once")

	status, body = replayCall(t, http.MethodGet, base+"/"+id, nil)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, replay.StatusCancelled, body["status"])
	assert.EqualValues(t, cancelAt-1, body["done"], "the item in hand at the cancel is not recorded")
	assert.Equal(t, api.APIActor, body["cancelled_by"])
	assert.NotNil(t, body["finished_at"])
	cancelled := body

	// Bad input: a clear 4xx, nothing changed.
	for _, tc := range []struct {
		name, url string
		status    int
		want      string
	}{
		{"cancel twice", base + "/" + id + "/cancel", http.StatusConflict, "only a running replay can be cancelled"},
		{"unknown replay", base + "/rpl_000000000000000000000000/cancel", http.StatusNotFound, "replay not found"},
		{"malformed id", base + "/rpl_x/cancel", http.StatusBadRequest, "a replay id"},
		{"query parameter", base + "/" + id + "/cancel?force=1", http.StatusBadRequest, "force"},
	} {
		status, body := replayCall(t, http.MethodPost, tc.url, nil)
		assert.Equal(t, tc.status, status, tc.name)
		assert.Contains(t, body["error"].(map[string]any)["message"], tc.want, tc.name)
	}
	_, after := replayCall(t, http.MethodGet, base+"/"+id, nil)
	assert.Equal(t, cancelled, after, "the refused requests changed nothing")
	var unrecorded int
	require.NoError(t, a.Pool.QueryRow(ctx, `SELECT count(*) FROM replay_items WHERE replay_id = $1 AND outcome IS NULL`, id).Scan(&unrecorded))
	assert.Equal(t, n-cancelAt+1, unrecorded)

	// A new replay: only the events never re-driven still fail.
	status, body = replayCall(t, http.MethodPost, base, map[string]any{"filter": map[string]any{"incident": inc}, "dry_run": true})
	require.Equal(t, http.StatusOK, status, body)
	assert.EqualValues(t, n-cancelAt, body["matched"])
	status, body = replayCall(t, http.MethodPost, base, map[string]any{"filter": map[string]any{"incident": inc}})
	require.Equal(t, http.StatusAccepted, status, body)
	second := body["id"].(string)
	var finished []string
	runner := replay.NewRunner(a.Replays.Store, replay.Outcomes{One: replay.One{Events: a.Events, Handler: a.Handler, Platform: a.Config.PlatformAccount}},
		replay.RunnerConfig{Finished: func(r string) { finished = append(finished, r) }})
	worked, err = runner.RunOnce(ctx)
	require.NoError(t, err)
	assert.True(t, worked)
	worked, err = runner.RunOnce(ctx)
	require.NoError(t, err)
	assert.False(t, worked, "the cancelled replay is not taken up again")
	status, body = replayCall(t, http.MethodGet, base+"/"+second, nil)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, replay.StatusDone, body["status"])
	assert.EqualValues(t, n-cancelAt, body["applied"])
	assert.EqualValues(t, 0, body["failed"])
	assert.Equal(t, []string{"clean"}, finished)

	appliedOnce(t, a, ids)
	assert.Equal(t, 1, effectsOf(t, a, replayer.inHand), "the event in hand at the cancel, left unrecorded, is not applied again")
	status, _ = replayCall(t, http.MethodGet, base+"/"+id, nil)
	assert.Equal(t, http.StatusOK, status)
}
