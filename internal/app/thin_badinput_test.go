package app_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// thinRows counts what a thin notification may write: the events table and
// the hydration queue (and the registry).
func thinRows(t *testing.T, e *purchaseEnv) map[string]int {
	t.Helper()
	rows := map[string]int{"events table": int(countItems(t, e.app))}
	for _, table := range []string{"thin_hydrations", "connected_accounts", "processed_events"} {
		var n int
		require.NoError(t, e.app.Pool.QueryRow(t.Context(), `SELECT count(*) FROM `+table).Scan(&n))
		rows[table] = n
	}
	return rows
}

// TestThinNotificationsRefusedRecordNothing: a thin notification is
// verified exactly as a snapshot event (rotation, ±300 s, future refused),
// and a signed body that is not a thin event is a clear 400; none of them
// writes anything. A livemode mismatch is the same 200 "ignored" as for
// snapshot events, also writing nothing.
func TestThinNotificationsRefusedRecordNothing(t *testing.T) {
	fake, sink := stripetest.New(t, stripetest.Options{}), newActionSink(t)
	e := startThinApp(t, fake, sink, nil)
	url := e.app.Server.URL()
	valid := stripetest.Thin{Fixture: "v1.payment_intent.succeeded"}.Build(t)
	now := time.Now()
	variant := func(change func(map[string]any)) []byte {
		var doc map[string]any
		require.NoError(t, json.Unmarshal(valid, &doc))
		change(doc)
		b, err := json.Marshal(doc)
		require.NoError(t, err)
		return b
	}
	signed := func(b []byte) string { return stripetest.Sign(b, secret, now) }
	cases := []struct {
		name   string
		body   []byte
		header string
		code   string
	}{
		{"missing signature", valid, "", "missing_signature"},
		{"wrong secret", valid, stripetest.Sign(valid, "whsec_fake_test_other", now), "invalid_signature"},
		{"stale timestamp", valid, stripetest.Sign(valid, secret, now.Add(-10*time.Minute)), "timestamp_out_of_tolerance"},
		{"future timestamp", valid, stripetest.Sign(valid, secret, now.Add(10*time.Minute)), "timestamp_out_of_tolerance"},
	}
	for _, bad := range []struct {
		name   string
		change func(map[string]any)
	}{
		{"wrong object", func(d map[string]any) { d["object"] = "v2.core.events" }},
		{"bad id", func(d map[string]any) { d["id"] = "evt_/../1" }},
		{"id of another object", func(d map[string]any) { d["id"] = "pi_123" }},
		{"created as seconds", func(d map[string]any) { d["created"] = now.Unix() }},
		{"created in another format", func(d map[string]any) { d["created"] = "25/11/2026 15:03" }},
		{"context not an account", func(d map[string]any) { d["context"] = "cus_123" }},
		{"missing type", func(d map[string]any) { delete(d, "type") }},
	} {
		b := variant(bad.change)
		cases = append(cases, struct {
			name   string
			body   []byte
			header string
			code   string
		}{bad.name, b, signed(b), "invalid_event"})
	}
	before := thinRows(t, e)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body := post(t, url, tc.body, tc.header)
			assert.Equal(t, http.StatusBadRequest, status, body)
			assert.Equal(t, tc.code, errorCode(body))
			assert.NotEmpty(t, body["error"].(map[string]any)["message"])
		})
	}
	t.Run("rotated-out secret still verifies", func(t *testing.T) {
		// The rotation's other secret is accepted, as for snapshots: a
		// livemode mismatch then answers 200 ignored and records nothing.
		live := variant(func(d map[string]any) { d["livemode"] = true })
		status, body := post(t, url, live, stripetest.Sign(live, "whsec_fake_test_rotated_out", now))
		assert.Equal(t, http.StatusOK, status, body)
		assert.Equal(t, "ignored", body["outcome"])
		assert.Equal(t, "thin", body["payload_kind"])
	})
	assert.Equal(t, before, thinRows(t, e), "a refused or ignored notification wrote something")
}
