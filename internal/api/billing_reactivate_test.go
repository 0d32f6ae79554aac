package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// POST …/reactivate (docs/design.md §4, §8 "Reactivation"): 409 when the
// subscription is not cancelled, a clear 400 for bad input — and nothing
// changes, history included —; a CANCELLED subscription is scheduled again
// by its rule from today, the first new period with process REACTIVATION
// and history cause user-reactivated.
func TestReactivateAPI(t *testing.T) {
	t.Parallel()
	c, e := newAPI(t)
	e.Clock.SetDate(dates.MustParse("2024-01-02"))
	const subs = "/accounts/acc-react/subscriptions"
	body := validCreate()
	body["payment_day"] = 10
	status, sub := c.do(http.MethodPost, subs, body)
	require.Equal(t, http.StatusCreated, status, sub)
	path := subs + "/" + sub["subscription_id"].(string)
	snapshot := func() (map[string]any, int) {
		t.Helper()
		_, s := c.do(http.MethodGet, path, nil)
		_, h := c.do(http.MethodGet, path+"/history", nil)
		return s, len(h["data"].([]any))
	}

	before, entries := snapshot()
	status, got := c.send(http.MethodPost, path+"/reactivate", "application/json", `{}`)
	assert.Equal(t, http.StatusConflict, status, got)
	assert.Equal(t, "conflict", errCode(got))
	after, n := snapshot()
	assert.Equal(t, before, after, "an ACTIVE subscription is not changed")
	assert.Equal(t, entries, n)

	e.Clock.SetDate(dates.MustParse("2024-01-05"))
	status, got = c.do(http.MethodPatch, path, map[string]any{"action": "cancel"})
	require.Equal(t, http.StatusOK, status, got)
	require.Equal(t, "CANCELLED", got["status"])
	e.Clock.SetDate(dates.MustParse("2024-03-20"))
	before, entries = snapshot()

	tests := []struct {
		name, contentType, body, query, path string
		names                                string
		also                                 string // a second problem the same message names
	}{
		{name: "amount 0", body: `{"amount":0}`, names: "amount"},
		{name: "amount negative", body: `{"amount":-5}`, names: "amount"},
		{name: "amount too large", body: `{"amount":100000000}`, names: "amount"},
		{name: "amount a string", body: `{"amount":"5"}`, names: "amount"},
		{name: "payment_method not pm_", body: `{"payment_method":"card_123"}`, names: "payment_method"},
		{name: "payment_method empty", body: `{"payment_method":""}`, names: "payment_method"},
		{name: "sku without its amount", body: `{"sku":"platinum"}`, names: "sku"},
		{name: "sku that cannot be a key", body: `{"sku":"plat#1","amount":2500}`, names: "sku"},
		{name: "unknown field", body: `{"amont":5}`, names: `"amont"`},
		{name: "field Amount", body: `{"Amount":5}`, names: `"Amount"`},
		{name: "trailing data", body: `{} {}`, names: "trailing"},
		{name: "not an object", body: `[1]`, names: "JSON"},
		{name: "text/plain", contentType: "text/plain", body: `{"amount":5}`, names: "Content-Type"},
		{name: "a query parameter", body: ``, query: "?amount=5", names: "query"},
		{name: "bad account id", path: "/accounts/acc%23x/subscriptions/x/reactivate", body: `{}`, names: "account_id"},
		{name: "every problem at once", body: `{"payment_method":"x","amount":0}`, names: "payment_method", also: "amount"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ct := tc.contentType
			if ct == "" {
				ct = "application/json"
			}
			p := tc.path
			if p == "" {
				p = path + "/reactivate" + tc.query
			}
			status, got := c.send(http.MethodPost, p, ct, tc.body)
			assert.Equal(t, http.StatusBadRequest, status, got)
			assert.Equal(t, "invalid_parameter", errCode(got))
			e, _ := got["error"].(map[string]any)
			msg, _ := e["message"].(string)
			assert.Contains(t, msg, tc.names)
			assert.Contains(t, msg, tc.also)
		})
	}
	after, n = snapshot()
	assert.Equal(t, before, after, "bad input changes nothing")
	assert.Equal(t, entries, n, "history untouched")
	status, got = c.send(http.MethodPost, subs+"/nope/reactivate", "application/json", `{}`)
	assert.Equal(t, http.StatusNotFound, status, got)

	// Mar 20: the rule's first date on or after today is Apr 10.
	status, got = c.send(http.MethodPost, path+"/reactivate", "application/json", `{"amount":2500,"payment_method":"pm_new"}`)
	require.Equal(t, http.StatusOK, status, got)
	assert.Equal(t, "ACTIVE", got["status"])
	assert.Equal(t, "2024-04-10", got["next_payment_date"])
	assert.Equal(t, "2024-04-03", got["next_reminder_date"])
	assert.Equal(t, float64(2500), got["amount"])
	_, h := c.do(http.MethodGet, path+"/history?limit=1000", nil)
	var last map[string]any
	for _, it := range h["data"].([]any) {
		if it.(map[string]any)["billing_date"] == "2024-04-10" {
			last = it.(map[string]any)
		}
	}
	require.NotNil(t, last, "the new period's history entry")
	assert.Equal(t, "SCHEDULED", last["billing_status"])
	assert.Equal(t, "REACTIVATION", last["process"])
	assert.Equal(t, "user-reactivated", last["updated_event"])

	// Active again: a second reactivation is refused.
	status, got = c.send(http.MethodPost, path+"/reactivate", "", ``)
	assert.Equal(t, http.StatusConflict, status, got)
}
