package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// PATCH …/subscriptions/{id} with sku and amount (docs/design.md §4, §8 "Plan
// change"): bad input is a clear 400 naming the field, a cancelled
// subscription 400, and nothing changes (history included); a change to a
// lower amount answers the subscription at its new plan with
// pending_downgrade true; reactivate takes a plan too.
func TestPlanChangeAPI(t *testing.T) {
	t.Parallel()
	c, e := newAPI(t)
	e.Clock.SetDate(dates.MustParse("2024-01-02"))
	const subs = "/accounts/acc-plan/subscriptions"
	body := validCreate()
	body["payment_day"] = 10
	status, sub := c.do(http.MethodPost, subs, body)
	require.Equal(t, http.StatusCreated, status, sub)
	assert.Equal(t, false, sub["pending_downgrade"], "always present")
	path := subs + "/" + sub["subscription_id"].(string)
	snapshot := func() (map[string]any, int) {
		t.Helper()
		_, s := c.do(http.MethodGet, path, nil)
		_, h := c.do(http.MethodGet, path+"/history?limit=1000", nil)
		return s, len(h["data"].([]any))
	}
	before, entries := snapshot()
	tests := []struct{ name, body, names string }{
		{name: "sku without amount", body: `{"sku":"silver"}`, names: "sku"},
		{name: "sku empty", body: `{"sku":"","amount":999}`, names: "sku"},
		{name: "sku with #", body: `{"sku":"sil#ver","amount":999}`, names: "sku"},
		{name: "sku with /", body: `{"sku":"sil/ver","amount":999}`, names: "sku"},
		{name: "sku with a space", body: `{"sku":"sil ver","amount":999}`, names: "sku"},
		{name: "sku too long", body: `{"sku":"` + strings.Repeat("s", 129) + `","amount":999}`, names: "sku"},
		{name: "sku a number", body: `{"sku":5,"amount":999}`, names: "sku"},
		{name: "amount 0", body: `{"sku":"silver","amount":0}`, names: "amount"},
		{name: "amount negative", body: `{"sku":"silver","amount":-1}`, names: "amount"},
		{name: "sku with an action", body: `{"action":"cancel","sku":"silver","amount":999}`, names: "action"},
		{name: "field SKU", body: `{"SKU":"silver","amount":999}`, names: `"SKU"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, got := c.send(http.MethodPatch, path, "application/json", tc.body)
			assert.Equal(t, http.StatusBadRequest, status, got)
			assert.Equal(t, "invalid_parameter", errCode(got))
			e, _ := got["error"].(map[string]any)
			msg, _ := e["message"].(string)
			assert.Contains(t, msg, tc.names)
		})
	}
	after, n := snapshot()
	assert.Equal(t, before, after, "bad input changes nothing")
	assert.Equal(t, entries, n, "history untouched")

	status, got := c.send(http.MethodPatch, path, "application/json", `{"sku":"silver","amount":999}`)
	require.Equal(t, http.StatusOK, status, got)
	assert.Equal(t, "silver", got["sku"])
	assert.Equal(t, float64(999), got["amount"])
	assert.Equal(t, true, got["pending_downgrade"])
	assert.Equal(t, "2024-01-10", got["next_payment_date"], "the schedule does not move")
	_, read := c.do(http.MethodGet, path, nil)
	assert.Equal(t, got, read)
	_, list := c.do(http.MethodGet, subs, nil)
	require.Len(t, list["data"], 1, "one subscription, at its new key")
	assert.Equal(t, "silver", list["data"].([]any)[0].(map[string]any)["sku"])

	status, got = c.send(http.MethodPatch, path, "application/json", `{"sku":"gold","amount":2999}`)
	require.Equal(t, http.StatusOK, status, got)
	assert.Equal(t, false, got["pending_downgrade"], "an upgrade supersedes the downgrade")

	// Cancelled: refused, nothing changes; a reactivation may change the plan.
	status, got = c.do(http.MethodPatch, path, map[string]any{"action": "cancel"})
	require.Equal(t, http.StatusOK, status, got)
	before, entries = snapshot()
	status, got = c.send(http.MethodPatch, path, "application/json", `{"sku":"silver","amount":999}`)
	assert.Equal(t, http.StatusBadRequest, status, got)
	assert.Contains(t, got["error"].(map[string]any)["message"], "CANCELLED")
	after, n = snapshot()
	assert.Equal(t, before, after)
	assert.Equal(t, entries, n)
	status, got = c.send(http.MethodPost, path+"/reactivate", "application/json", `{"sku":"bronze","amount":500}`)
	require.Equal(t, http.StatusOK, status, got)
	assert.Equal(t, "bronze", got["sku"])
	assert.Equal(t, float64(500), got["amount"])
	assert.Equal(t, true, got["pending_downgrade"])
}
