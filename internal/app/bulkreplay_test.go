package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/app"
	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/browsertest"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/handler"
	"github.com/stripe-payments/stripe-payments/internal/incidents"
	"github.com/stripe-payments/stripe-payments/internal/replay"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// crashAfter replays through the real path, and after the n-th replay
// "crashes" the process (cancels the runner's context) before the runner
// can record that item.
type crashAfter struct {
	inner  replay.One
	n      int32
	calls  atomic.Int32
	cancel context.CancelFunc
	// inHand is the event re-driven when the process died.
	inHand string
}

func (c *crashAfter) Replay(ctx context.Context, id, account string) (string, error) {
	res, err := c.inner.Replay(ctx, id, account)
	if c.calls.Add(1) == c.n {
		c.inHand = id
		c.cancel()
	}
	return res.Outcome, err
}

func replayCall(t *testing.T, method, url string, body any) (int, map[string]any) {
	t.Helper()
	var r *bytes.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		r = bytes.NewReader(raw)
	} else {
		r = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, url, r)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	return do(t, req)
}

// TestBulkReplayResumesAfterRestartAndAppliesOnce: 30 events failed for one
// cause (recorded failed and listed, their effects never applied) form one
// incident. A dry run of the incident matches 30 and changes nothing; the
// replay starts, the process dies after the 12th re-drive (applied, not yet
// recorded as done), and a new process on the same DynamoDB table and
// Postgres database resumes it to done: every event processed, each in the
// ledger once, the re-driven-but-unrecorded one answered duplicate.
func TestBulkReplayResumesAfterRestartAndAppliesOnce(t *testing.T) {
	const n, crashAt = 30, 12
	first := apptest.New(t, apptest.Options{Env: map[string]string{"INTERNAL_API_TOKEN": token}, App: countedEffects()})
	ctx := context.Background()
	ids := failEvents(t, first, n, func(id string) error {
		return errors.New("Stripe unreachable: Get \"https://api.stripe.com/v1/customers/cus_" + id[4:] + "\": EOF")
	})
	list, err := first.Incidents.List(ctx, incidents.Open)
	require.NoError(t, err)
	require.Len(t, list, 1)
	inc := list[0]
	assert.EqualValues(t, n, inc.Count)
	assert.Equal(t, "stripe_unreachable", inc.Cause)

	// Dry run: 30, a sample, nothing changes.
	preview, err := first.Replays.Store.DryRun(ctx, replay.Filter{Incident: inc.ID})
	require.NoError(t, err)
	assert.Equal(t, n, preview.Matched)
	require.Len(t, preview.Sample, replay.SampleSize)
	assert.Equal(t, "apply", preview.Sample[0].Would)
	var ledger int
	require.NoError(t, first.Pool.QueryRow(ctx, `SELECT count(*) FROM processed_events WHERE event_id = ANY($1)`, ids).Scan(&ledger))
	assert.Zero(t, ledger)

	r, err := first.Replays.Store.Start(ctx, replay.Filter{Incident: inc.ID}, "test")
	require.NoError(t, err)
	assert.Equal(t, n, r.Matched)

	// The first process: its runner dies after the crashAt-th re-drive.
	runCtx, cancel := context.WithCancel(ctx)
	crash := &crashAfter{inner: replay.One{Events: first.Events, Handler: first.Handler, Platform: first.Config.PlatformAccount}, n: crashAt, cancel: cancel}
	runner := replay.NewRunner(first.Replays.Store, crash, replay.RunnerConfig{Lease: time.Second})
	worked, err := runner.RunOnce(runCtx)
	assert.True(t, worked)
	assert.ErrorIs(t, err, context.Canceled)
	require.NotEmpty(t, crash.inHand)
	assert.Equal(t, 1, effectsOf(t, first, crash.inHand), "the event re-driven at the crash was applied, once")
	mid, err := first.Replays.Store.Get(ctx, r.ID)
	require.NoError(t, err)
	assert.Equal(t, replay.StatusRunning, mid.Status)
	assert.Equal(t, crashAt-1, mid.Done, "the item re-driven at the crash is not recorded")
	first.Close()

	// The restarted process resumes the replay on its own.
	second := apptest.Start(t, apptest.Options{Env: first.Env, Stripe: first.Fake, App: countedEffects()})
	// An operator watching the console's progress page of the restarted
	// service sees it reach done (the page refreshes itself while running).
	ui := browsertest.New(t)
	browsertest.LogIn(t, ui, second.AdminURL+"/ops", token)
	browsertest.Step(t, ui, "open the replay's progress page",
		chromedp.Navigate(second.AdminURL+"/ops/replays/"+r.ID), chromedp.WaitVisible(chromedp.ID("replay-status")))
	require.Eventually(t, func() bool { return browsertest.Text(ui, "#replay-status") == replay.StatusDone },
		60*time.Second, 200*time.Millisecond, "the progress page reaches done after the restart")
	assert.Equal(t, strconv.Itoa(n), browsertest.Text(ui, "#replay-done"), "the page counts every item done")
	assert.Equal(t, "0", browsertest.Text(ui, "#replay-failed"))
	var progress map[string]any
	require.Eventually(t, func() bool {
		status, body := replayCall(t, http.MethodGet, second.AdminURL+"/internal/v1/replays/"+r.ID, nil)
		require.Equal(t, http.StatusOK, status, body)
		progress = body
		return body["status"] == replay.StatusDone
	}, 30*time.Second, 100*time.Millisecond)
	assert.EqualValues(t, n, progress["matched"])
	assert.EqualValues(t, n, progress["done"])
	assert.EqualValues(t, 0, progress["failed"])
	assert.EqualValues(t, n-1, progress["applied"], "the item applied before the crash is a duplicate on resumption")

	var outcomes []string
	rows, err := second.Pool.Query(ctx, `SELECT outcome FROM replay_items WHERE replay_id = $1 ORDER BY seq`, r.ID)
	require.NoError(t, err)
	for rows.Next() {
		var o string
		require.NoError(t, rows.Scan(&o))
		outcomes = append(outcomes, o)
	}
	require.NoError(t, rows.Err())
	require.Len(t, outcomes, n)
	for i, o := range outcomes {
		if i == crashAt-1 {
			assert.Equal(t, "duplicate", o, "item %d", i)
		} else {
			assert.Contains(t, []string{"applied", "completed"}, o, "item %d", i)
		}
	}
	// Each event's effects applied once: one ledger row each, the record
	// processed, and the incident gone (nothing fails any more).
	appliedOnce(t, second, ids)
	open, err := second.Incidents.List(ctx, incidents.Open)
	require.NoError(t, err)
	assert.Empty(t, open)
}

// Bad input to the bulk replay API: a clear 400, nothing written.
func TestBulkReplayAPIBadInput(t *testing.T) {
	a := startApp(t, nil, nil)
	ctx := context.Background()
	url := a.Admin.URL() + "/internal/v1/replays"
	// A billing incident (charges with an unknown outcome) is not replayed:
	// a rerun of the job settles it.
	_, err := a.Pool.Exec(ctx, `INSERT INTO ops_billing_runs (job, date, started_at, finished_at, report) VALUES ('collect', now(), now(), now(), '{"unknown": 1, "unresolved": 1}')`)
	require.NoError(t, err)
	billingIncident := incidents.ID(incidents.KindBilling, incidents.CauseChargeOutcomeUnknown, "collect", "")
	cases := []struct {
		name string
		body any
		want string
	}{
		{"no filter", map[string]any{"dry_run": true}, "filter: required"},
		{"empty filter", map[string]any{"filter": map[string]any{}}, "an empty filter without a time range"},
		{"unknown status", map[string]any{"filter": map[string]any{"status": "processed"}}, "status must be failed, rejected or dead"},
		{"bad account", map[string]any{"filter": map[string]any{"stripe_account": "cus_1"}}, "acct_"},
		{"bad since", map[string]any{"filter": map[string]any{"since": "yesterday"}}, "RFC 3339"},
		{"since after until", map[string]any{"filter": map[string]any{"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}}, "before"},
		{"unknown incident", map[string]any{"filter": map[string]any{"incident": "inc_00000000000000000000"}, "dry_run": true}, "no incident"},
		{"unknown field", map[string]any{"filter": map[string]any{"type": "invoice.paid"}, "force": true}, "invalid JSON body"},
		{"matches nothing", map[string]any{"filter": map[string]any{"type": "invoice.paid"}}, "matches no failed or rejected event"},
		{"empty filter, dry run", map[string]any{"filter": map[string]any{}, "dry_run": true}, "an empty filter without a time range"},
		{"empty strings only", map[string]any{"filter": map[string]any{"incident": "", "status": "", "type": ""}, "dry_run": true}, "an empty filter without a time range"},
		{"null filter", map[string]any{"filter": nil, "dry_run": true}, "filter: required"},
		{"filter not an object", map[string]any{"filter": []any{"invoice.paid"}, "dry_run": true}, "invalid JSON body"},
		{"dry run of 0", map[string]any{"filter": map[string]any{"type": "invoice.paid"}, "dry_run": 0}, "dry_run must be true or false"},
		{"dry run as a string", map[string]any{"filter": map[string]any{"type": "invoice.paid"}, "dry_run": "true"}, "dry_run must be true or false"},
		{"dry run null", map[string]any{"filter": map[string]any{"type": "invoice.paid"}, "dry_run": nil}, "not null"},
		{"bad type", map[string]any{"filter": map[string]any{"type": "Invoice Paid"}, "dry_run": true}, "a Stripe event type"},
		{"malformed incident", map[string]any{"filter": map[string]any{"incident": "inc_1"}, "dry_run": true}, "an incident id"},
		{"until only, bad", map[string]any{"filter": map[string]any{"until": "2026-13-01T00:00:00Z"}, "dry_run": true}, "RFC 3339"},
		{"dead letters of an account", map[string]any{"filter": map[string]any{"status": "dead", "stripe_account": "acct_A0000001"}, "dry_run": true}, "dead letters have no stripe_account"},
		{"dead letters of an event type", map[string]any{"filter": map[string]any{"status": "dead", "type": "invoice.paid"}, "dry_run": true}, "topic/type"},
		{"billing incident", map[string]any{"filter": map[string]any{"incident": billingIncident}, "dry_run": true}, "only failed and rejected events and dead letters are replayed"},
		{"billing incident, start", map[string]any{"filter": map[string]any{"incident": billingIncident}}, "only failed and rejected events and dead letters are replayed"},
	}
	for _, tc := range cases {
		status, body := replayCall(t, http.MethodPost, url, tc.body)
		assert.Equal(t, http.StatusBadRequest, status, tc.name)
		assert.Contains(t, body["error"].(map[string]any)["message"], tc.want, tc.name)
	}
	var replays, items, states int
	require.NoError(t, a.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM replays), (SELECT count(*) FROM replay_items), (SELECT count(*) FROM incidents)`).Scan(&replays, &items, &states))
	assert.Zero(t, replays, "nothing started")
	assert.Zero(t, items)
	assert.Zero(t, states, "no incident state written")

	// A dry run matching nothing is a clear answer.
	status, body := replayCall(t, http.MethodPost, url, map[string]any{"filter": map[string]any{"type": "invoice.paid"}, "dry_run": true})
	require.Equal(t, http.StatusOK, status, body)
	assert.EqualValues(t, 0, body["matched"])
	assert.Equal(t, []any{}, body["sample"])

	status, _ = replayCall(t, http.MethodGet, url+"/rpl_000000000000000000000000", nil)
	assert.Equal(t, http.StatusNotFound, status)
	status, _ = replayCall(t, http.MethodGet, url+"/nope", nil)
	assert.Equal(t, http.StatusBadRequest, status)

	// While replay.MaxRunning replays run (held by another instance's
	// runner), a further one is a 409 that writes nothing; a dry run still
	// answers.
	for i := range replay.MaxRunning {
		_, err := a.Pool.Exec(ctx, `INSERT INTO replays (id, filter, status, matched, created_by, created_at, lease_owner, leased_until)
			VALUES ($1, '{"type":"invoice.paid"}', 'running', 1, 't', now(), 'another-instance', now() + interval '1 hour')`,
			fmt.Sprintf("rpl_%024d", i+1))
		require.NoError(t, err)
	}
	_, err = a.Pool.Exec(ctx, `INSERT INTO ops_event_problems (event_id, outcome, event_type, stripe_account, error, at) VALUES ('evt_capped', 'failed', 'invoice.paid', $1, 'x', now())`, replayMerchant)
	require.NoError(t, err)
	status, body = replayCall(t, http.MethodPost, url, map[string]any{"filter": map[string]any{"type": "invoice.paid"}})
	require.Equal(t, http.StatusConflict, status, body)
	assert.Equal(t, "conflict", body["error"].(map[string]any)["code"])
	assert.Contains(t, body["error"].(map[string]any)["message"], fmt.Sprintf("%d replays are running", replay.MaxRunning))
	require.NoError(t, a.Pool.QueryRow(ctx, `SELECT count(*) FROM replays`).Scan(&replays))
	assert.Equal(t, replay.MaxRunning, replays, "the refused replay wrote nothing")
	status, body = replayCall(t, http.MethodPost, url, map[string]any{"filter": map[string]any{"type": "invoice.paid"}, "dry_run": true})
	require.Equal(t, http.StatusOK, status, body)
	assert.EqualValues(t, 1, body["matched"])
}

// replayMerchant is the connected account of the events failEvents records.
const replayMerchant = "acct_1ReplayMerchant01"

// countedEffects adds to payment_intent.succeeded's route an applier that
// writes one replay_effects row per application, in the ledger's
// transaction: an event applied twice has two.
func countedEffects() []app.Option {
	return []app.Option{app.WithRoutes(func(r handler.Routes) handler.Routes {
		return r.With("payment_intent.succeeded", func(ctx context.Context, tx handler.Tx, ev *stripe.Event) error {
			_, err := tx.Exec(ctx, `INSERT INTO replay_effects (event_id) VALUES ($1)`, ev.ID)
			return err
		})
	})}
}

// failEvents records n payment_intent.succeeded events as failed with
// cause(id), each paying a legacy purchase of its own not yet fulfilled
// (their effect, the purchase's fulfilment and its one purchase.fulfilled
// action, never applied), and returns their ids.
func failEvents(t *testing.T, a *apptest.App, n int, cause func(id string) error) []string {
	t.Helper()
	ctx := context.Background()
	failing := handler.TrackProblems(a.Events, a.OpsProblems, slog.New(slog.DiscardHandler))
	_, err := a.Pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS replay_effects (event_id text NOT NULL)`) // countedEffects'
	require.NoError(t, err)
	ids := make([]string, n)
	for i := range ids {
		purchase, account := uuid.New(), uuid.New()
		_, err := a.Pool.Exec(ctx, `INSERT INTO purchases (id, account, stripe_account, kind) VALUES ($1, $2, $3, 'legacy')`,
			purchase, account, replayMerchant)
		require.NoError(t, err)
		pi := "pi_3Replay" + strings.ReplaceAll(uuid.NewString(), "-", "")[:16]
		payload := stripetest.Event{Fixture: "payment_intent.succeeded", Account: stripetest.Ptr(replayMerchant), Created: time.Now().Add(-time.Hour),
			Object: map[string]any{"id": pi, "metadata": map[string]any{"purchase_id": purchase.String(), "account": account.String()}}}.Build(t)
		ev, err := stripeevent.Parse(payload)
		require.NoError(t, err)
		ids[i] = ev.ID
		rec := events.NewRecord(ev, payload, a.Config.PlatformAccount, a.Config.EventTTL, stripeevent.SourceWebhook, time.Now())
		require.NoError(t, failing.RecordFailure(ctx, rec, cause(ev.ID)))
	}
	return ids
}

// appliedOnce checks that every event of ids was applied exactly once
// (one counted application, its purchase fulfilled with exactly one
// purchase.fulfilled action in the outbox) and is recorded processed.
func appliedOnce(t *testing.T, a *apptest.App, ids []string) {
	t.Helper()
	ctx := context.Background()
	for _, id := range ids {
		assert.Equal(t, 1, effectsOf(t, a, id), "event %s applied exactly once", id)
		assert.Equal(t, 1, actionsOf(t, a, id), "event %s's purchase.fulfilled action, once", id)
		rec, err := a.Events.Get(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, events.StatusProcessed, rec.Status, id)
	}
}

// effectsOf counts event id's applications (countedEffects).
func effectsOf(t *testing.T, a *apptest.App, id string) int {
	t.Helper()
	var n int
	require.NoError(t, a.Pool.QueryRow(context.Background(), `SELECT count(*) FROM replay_effects WHERE event_id = $1`, id).Scan(&n))
	return n
}

// actionsOf counts the purchase.fulfilled actions of the purchase event id
// fulfilled (0 when it fulfilled none).
func actionsOf(t *testing.T, a *apptest.App, id string) int {
	t.Helper()
	var n int
	require.NoError(t, a.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox o
		WHERE o.topic = 'action' AND o.type = 'purchase.fulfilled'
		  AND o.payload->>'purchase_id' IN (SELECT p.id::text FROM purchases p WHERE p.last_event_id = $1)`, id).Scan(&n))
	return n
}
