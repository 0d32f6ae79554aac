package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/api"
	"github.com/stripe-payments/stripe-payments/internal/httpserver"
	"github.com/stripe-payments/stripe-payments/internal/incidents"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

func TestIncidentRoutes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.Postgres(t)
	store := incidents.New(pool, incidents.Config{PlatformAccount: "acct_platform0001"})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httpserver.New(log, metrics.New(), nil)
	api.Register(srv.Echo, token, api.Deps{Incidents: store})
	ts := httptest.NewServer(srv.Echo)
	t.Cleanup(ts.Close)
	c := client{t: t, base: ts.URL + api.Prefix}

	now := time.Now().UTC()
	for i := 0; i < 50; i++ {
		_, err := pool.Exec(ctx, `INSERT INTO ops_event_problems (event_id, outcome, event_type, stripe_account, error, at)
			VALUES ($1, 'failed', 'invoice.paid', 'acct_A0000001', $2, $3)`,
			fmt.Sprintf("evt_fail%06d", i), fmt.Sprintf("Stripe unreachable: GET /v1/invoices/in_%08d: EOF", i), now.Add(-time.Duration(i)*time.Second))
		require.NoError(t, err)
	}
	_, err := pool.Exec(ctx, `INSERT INTO ops_event_problems (event_id, outcome, event_type, stripe_account, error, at)
		VALUES ('evt_rej0000001', 'rejected', 'charge.succeeded', 'acct_A0000001', 'unknown purchase pur_X1234567', $1)`, now.Add(-time.Hour))
	require.NoError(t, err)
	id := incidents.ID(incidents.KindEvent, "stripe_unreachable", "invoice.paid", "acct_A0000001")

	status, body := c.do(http.MethodGet, "/incidents", nil)
	require.Equal(t, http.StatusOK, status, body)
	data := body["data"].([]any)
	require.Len(t, data, 2)
	first := data[0].(map[string]any)
	assert.Equal(t, id, first["id"])
	assert.Equal(t, "event", first["kind"])
	assert.Equal(t, "stripe_unreachable", first["cause"])
	assert.Equal(t, "invoice.paid", first["event_type"])
	assert.Equal(t, "acct_A0000001", first["stripe_account"])
	assert.EqualValues(t, 50, first["count"])
	assert.Equal(t, "open", first["state"])
	assert.Len(t, first["sample_ids"], incidents.MaxSamples)
	assert.Equal(t, "evt_fail000000", first["sample_ids"].([]any)[0])
	for _, k := range []string{"first_seen", "last_seen"} {
		_, err := time.Parse(time.RFC3339Nano, first[k].(string))
		assert.NoError(t, err, k)
	}
	assert.Nil(t, first["state_changed_by"])
	// What it is in words, what to do, where the runbook is, and that a
	// replay can succeed.
	assert.Equal(t, "Stripe unreachable", first["title"])
	assert.Contains(t, first["action"], "status.stripe.com")
	assert.Equal(t, "docs/runbooks/StripePaymentsEventsFailing.md", first["runbook"])
	assert.Equal(t, true, first["replayable"])

	// Paging.
	status, body = c.do(http.MethodGet, "/incidents?limit=1", nil)
	require.Equal(t, http.StatusOK, status)
	assert.Len(t, body["data"], 1)
	next := body["next_cursor"].(string)
	require.NotEmpty(t, next)
	status, body = c.do(http.MethodGet, "/incidents?limit=1&cursor="+next, nil)
	require.Equal(t, http.StatusOK, status)
	rejected := body["data"].([]any)[0].(map[string]any)
	assert.Equal(t, "rejected.other:unknown purchase <id>", rejected["cause"])
	assert.Equal(t, "Rejected: unknown purchase <id>", rejected["title"])
	assert.Contains(t, rejected["action"], "rejected again")
	assert.Equal(t, "docs/runbooks/StripePaymentsEventRejected.md", rejected["runbook"])
	assert.Equal(t, false, rejected["replayable"], "a rejected payload is rejected again")
	assert.Equal(t, "", body["next_cursor"])

	// Bad input: a clear 4xx, nothing changed.
	bad := []struct {
		name, method, path string
		body               any
		status             int
		want               string
	}{
		{"unknown state filter", http.MethodGet, "/incidents?state=closed", nil, 400, "state must be open, acknowledged or resolved"},
		{"empty state filter", http.MethodGet, "/incidents?state=", nil, 400, "state must be open, acknowledged or resolved"},
		{"state filter in capitals", http.MethodGet, "/incidents?state=OPEN", nil, 400, "state must be open, acknowledged or resolved"},
		{"limit 0", http.MethodGet, "/incidents?limit=0", nil, 400, "limit"},
		{"state null", http.MethodPatch, "/incidents/" + id, map[string]any{"state": nil}, 400, "state: required"},
		{"state not a string", http.MethodPatch, "/incidents/" + id, map[string]any{"state": 2}, 400, "invalid JSON body"},
		{"state in capitals", http.MethodPatch, "/incidents/" + id, map[string]any{"state": "RESOLVED"}, 400, "acknowledged or resolved"},
		{"query parameter on a change", http.MethodPatch, "/incidents/" + id + "?state=resolved", map[string]any{"state": "resolved"}, 400, "no query parameters"},
		{"empty body", http.MethodPatch, "/incidents/" + id, nil, 400, "invalid JSON body"},
		{"unknown parameter", http.MethodGet, "/incidents?status=open", nil, 400, "status"},
		{"bad cursor", http.MethodGet, "/incidents?cursor=zzz", nil, 400, "invalid cursor"},
		{"limit too big", http.MethodGet, "/incidents?limit=1001", nil, 400, "limit"},
		{"unknown target state", http.MethodPatch, "/incidents/" + id, map[string]any{"state": "closed"}, 400, "acknowledged or resolved"},
		{"open by hand", http.MethodPatch, "/incidents/" + id, map[string]any{"state": "open"}, 400, "reopens by itself"},
		{"no state", http.MethodPatch, "/incidents/" + id, map[string]any{}, 400, "state: required"},
		{"unknown field", http.MethodPatch, "/incidents/" + id, map[string]any{"state": "resolved", "who": "me"}, 400, "invalid JSON body"},
		{"not JSON", http.MethodPatch, "/incidents/" + id, "resolved", 400, "invalid JSON body"},
		{"malformed id", http.MethodPatch, "/incidents/evt_1", map[string]any{"state": "resolved"}, 400, "an incident id"},
		{"unknown id", http.MethodPatch, "/incidents/inc_00000000000000000000", map[string]any{"state": "resolved"}, 404, "not found"},
	}
	for _, tc := range bad {
		status, body := c.do(tc.method, tc.path, tc.body)
		assert.Equal(t, tc.status, status, tc.name)
		assert.Contains(t, body["error"].(map[string]any)["message"], tc.want, tc.name)
	}
	audit, err := store.Audit(ctx, id)
	require.NoError(t, err)
	assert.Empty(t, audit, "refused requests wrote nothing")
	var rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM incidents`).Scan(&rows))
	assert.Zero(t, rows)

	// open -> acknowledged -> resolved, each audited as the API caller.
	status, body = c.do(http.MethodPatch, "/incidents/"+id, map[string]any{"state": "acknowledged"})
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "acknowledged", body["state"])
	assert.Equal(t, api.APIActor, body["state_changed_by"])
	status, body = c.do(http.MethodGet, "/incidents?state=acknowledged", nil)
	require.Equal(t, http.StatusOK, status)
	require.Len(t, body["data"], 1)
	status, body = c.do(http.MethodGet, "/incidents?state=open", nil)
	require.Equal(t, http.StatusOK, status)
	require.Len(t, body["data"], 1)
	status, body = c.do(http.MethodPatch, "/incidents/"+id, map[string]any{"state": "resolved"})
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "resolved", body["state"])
	status, body = c.do(http.MethodPatch, "/incidents/"+id, map[string]any{"state": "acknowledged"})
	assert.Equal(t, http.StatusConflict, status, body)
	audit, err = store.Audit(ctx, id)
	require.NoError(t, err)
	require.Len(t, audit, 2)
	assert.Equal(t, incidents.AuditEntry{From: incidents.Open, To: incidents.Acknowledged, Actor: api.APIActor, At: audit[0].At}, audit[0])
	assert.Equal(t, incidents.AuditEntry{From: incidents.Acknowledged, To: incidents.Resolved, Actor: api.APIActor, At: audit[1].At}, audit[1])

	// The cause comes back: open again.
	_, err = pool.Exec(ctx, `INSERT INTO ops_event_problems (event_id, outcome, event_type, stripe_account, error, at)
		VALUES ('evt_again00001', 'failed', 'invoice.paid', 'acct_A0000001', 'Stripe unreachable: EOF', $1)`, time.Now().UTC().Add(time.Second))
	require.NoError(t, err)
	status, body = c.do(http.MethodGet, "/incidents?state=open", nil)
	require.Equal(t, http.StatusOK, status)
	require.Len(t, body["data"], 2, body)
	reopened := body["data"].([]any)[0].(map[string]any)
	assert.Equal(t, id, reopened["id"])
	assert.EqualValues(t, 51, reopened["count"])
	assert.Equal(t, incidents.SystemActor, reopened["state_changed_by"])
}
