package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// send is client.do with the body's exact bytes and Content-Type ("" sends
// none).
func (c client) send(method, path, contentType, body string) (int, map[string]any) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	require.NoError(c.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if len(raw) > 0 {
		require.NoError(c.t, json.Unmarshal(raw, &out), string(raw))
	}
	return resp.StatusCode, out
}

// Strict input on the billing API (docs/design.md §4): currency one of
// Stripe's supported currencies as its API writes them (lowercase ISO
// 4217), term exactly MONTHLY or YEARLY when given (absent: MONTHLY, as
// before), field names exact (Go's decoder
// matches them case-insensitively), each given once, and a JSON
// Content-Type; the same on PATCH. A 400 naming the field, and nothing
// changed.
func TestBillingAPIInputIsStrict(t *testing.T) {
	t.Parallel()
	c, _ := newAPI(t)
	const subs = "/accounts/acc-strict/subscriptions"
	const good = `"sku":"gold","email":"a@example.com","payment_day":10,"amount":1999,"customer":"cus_1","payment_method":"pm_1"`
	status, sub := c.send(http.MethodPost, subs, "application/json", `{`+good+`,"currency":"usd","term":"MONTHLY"}`)
	require.Equal(t, http.StatusCreated, status, sub)
	path := subs + "/" + sub["subscription_id"].(string)
	_, before := c.do(http.MethodGet, path, nil)

	tests := []struct {
		name, method, path, contentType, body string
		names                                 string // the message names it
	}{
		{"currency xyz", "POST", subs, "application/json", `{` + good + `,"currency":"xyz","term":"MONTHLY"}`, "currency"},
		{"currency USD", "POST", subs, "application/json", `{` + good + `,"currency":"USD","term":"MONTHLY"}`, "currency"},
		{"currency Usd", "POST", subs, "application/json", `{` + good + `,"currency":"Usd","term":"MONTHLY"}`, "currency"},
		{"currency with a space", "POST", subs, "application/json", `{` + good + `,"currency":" usd","term":"MONTHLY"}`, "currency"},
		{"currency empty", "POST", subs, "application/json", `{` + good + `,"currency":"","term":"MONTHLY"}`, "currency"},
		{"currency absent", "POST", subs, "application/json", `{` + good + `,"term":"MONTHLY"}`, "currency"},
		{"currency usdollar", "POST", subs, "application/json", `{` + good + `,"currency":"usdollar","term":"MONTHLY"}`, "currency"},
		{"term empty", "POST", subs, "application/json", `{` + good + `,"currency":"usd","term":""}`, "term"},
		{"term monthly", "POST", subs, "application/json", `{` + good + `,"currency":"usd","term":"monthly"}`, "term"},
		{"term Yearly", "POST", subs, "application/json", `{` + good + `,"currency":"usd","term":"Yearly"}`, "term"},
		{"term with a space", "POST", subs, "application/json", `{` + good + `,"currency":"usd","term":"MONTHLY "}`, "term"},
		{"field AMOUNT", "POST", subs, "application/json", `{` + strings.Replace(good, `"amount"`, `"AMOUNT"`, 1) + `,"currency":"usd","term":"MONTHLY"}`, `"AMOUNT"`},
		{"field Currency", "POST", subs, "application/json", `{` + good + `,"Currency":"usd","term":"MONTHLY"}`, `"Currency"`},
		{"field amount twice", "POST", subs, "application/json", `{` + good + `,"amount":1,"currency":"usd","term":"MONTHLY"}`, `"amount"`},
		{"Content-Type text/plain", "POST", subs, "text/plain", `{` + good + `,"currency":"usd","term":"MONTHLY"}`, "Content-Type"},
		{"no Content-Type", "POST", subs, "", `{` + good + `,"currency":"usd","term":"MONTHLY"}`, "Content-Type"},
		{"Content-Type form", "POST", subs, "application/x-www-form-urlencoded", `{` + good + `,"currency":"usd","term":"MONTHLY"}`, "Content-Type"},
		{"PATCH term monthly", "PATCH", path, "application/json", `{"term":"monthly","payment_day":12}`, "term"},
		{"PATCH term empty", "PATCH", path, "application/json", `{"term":""}`, "term"},
		{"PATCH field AMOUNT", "PATCH", path, "application/json", `{"AMOUNT":5}`, `"AMOUNT"`},
		{"PATCH field Action", "PATCH", path, "application/json", `{"Action":"cancel"}`, `"Action"`},
		{"PATCH field amount twice", "PATCH", path, "application/json", `{"amount":5,"amount":6}`, `"amount"`},
		{"PATCH Content-Type text/plain", "PATCH", path, "text/plain", `{"amount":5}`, "Content-Type"},
		{"PATCH no Content-Type", "PATCH", path, "", `{"action":"cancel"}`, "Content-Type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := c.send(tc.method, tc.path, tc.contentType, tc.body)
			assert.Equal(t, http.StatusBadRequest, status, body)
			assert.Equal(t, "invalid_parameter", errCode(body))
			e, _ := body["error"].(map[string]any)
			msg, _ := e["message"].(string)
			assert.Contains(t, msg, tc.names)
		})
	}
	// Nothing changed: no other subscription, and this one as it was.
	status, list := c.do(http.MethodGet, subs, nil)
	require.Equal(t, http.StatusOK, status)
	assert.Len(t, list["data"], 1)
	_, after := c.do(http.MethodGet, path, nil)
	assert.Equal(t, before, after)

	// What is accepted: the exact forms, a JSON Content-Type with a charset.
	for body, term := range map[string]string{`{` + good + `,"currency":"eur","term":"YEARLY"}`: "YEARLY",
		`{` + good + `,"currency":"jpy","term":"MONTHLY"}`: "MONTHLY", `{` + good + `,"currency":"gbp"}`: "MONTHLY"} {
		status, got := c.send(http.MethodPost, subs, "application/json; charset=utf-8", body)
		assert.Equal(t, http.StatusCreated, status, got)
		assert.Equal(t, term, got["term"], "term absent: MONTHLY")
	}
	status, got := c.send(http.MethodPatch, path, "application/json; charset=utf-8", `{"amount":2500}`)
	require.Equal(t, http.StatusOK, status, got)
	assert.Equal(t, float64(2500), got["amount"])
}
