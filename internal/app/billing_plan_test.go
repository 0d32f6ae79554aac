package app_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
)

// docs/design.md §8 "Plan change", end to end through a test clock on DynamoDB
// Local and Postgres: PATCH sku with amount moves two subscriptions to a
// lower and a higher plan between their first and second periods; bad
// input is a 400 with nothing changed; the second period of each is charged
// at its new plan, and the receipts and the billing.payment_completed
// actions name the plan each charge paid for; pending_downgrade shows on
// the downgraded one until that charge. A test clock near today: the API
// lists receipts of the last 13 months of real time.
func TestPlanChangeEndToEnd(t *testing.T) {
	a := startApp(t, nil, nil)
	base := a.Admin.URL() + "/internal/v1"
	day := time.Now().UTC().AddDate(0, 0, -70)
	for day.AddDate(0, 0, 2).Day() > 28 {
		day = day.AddDate(0, 0, -1)
	}
	payDay := day.AddDate(0, 0, 2)
	second := payDay.AddDate(0, 1, 0)
	status, clock := send(t, http.MethodPost, base+"/test_clocks", map[string]any{"frozen_time": day.Format("2006-01-02") + "T12:00:00Z"})
	require.Equal(t, http.StatusCreated, status, clock)
	clockID := clock["id"].(string)
	advance := func(to time.Time) {
		t.Helper()
		status, body := send(t, http.MethodPost, base+"/test_clocks/"+clockID+"/advance",
			map[string]any{"frozen_time": to.Format("2006-01-02") + "T12:00:00Z"})
		require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, status, body)
		require.Eventually(t, func() bool {
			_, c := get(t, base+"/test_clocks/"+clockID, token)
			return c["status"] == "ready"
		}, 2*time.Minute, 50*time.Millisecond)
	}
	subs := map[string]string{}
	for _, account := range []string{"acc-plan-down", "acc-plan-up"} {
		status, sub := send(t, http.MethodPost, base+"/accounts/"+account+"/subscriptions", map[string]any{
			"sku": "gold", "email": "p@example.com", "payment_day": payDay.Day(), "amount": 2000, "currency": "usd",
			"term": "MONTHLY", "customer": "cus_plan", "payment_method": "pm_card_visa", "stripe_account": "acct_plan",
			"test_clock": clockID})
		require.Equal(t, http.StatusCreated, status, sub)
		subs[account] = base + "/accounts/" + account + "/subscriptions/" + sub["subscription_id"].(string)
	}
	advance(payDay.AddDate(0, 0, 1))
	historyLen := func(path string) int {
		t.Helper()
		status, h := get(t, path+"/history?limit=1000", token)
		require.Equal(t, http.StatusOK, status, h)
		return len(h["data"].([]any))
	}

	// Bad input: 400, nothing changed.
	down := subs["acc-plan-down"]
	_, before := get(t, down, token)
	n := historyLen(down)
	for _, body := range []map[string]any{{"sku": "lite#1", "amount": 900}, {"sku": "lite"}, {"sku": "lite", "amount": 0}} {
		status, got := send(t, http.MethodPatch, down, body)
		assert.Equal(t, http.StatusBadRequest, status, got)
	}
	_, after := get(t, down, token)
	assert.Equal(t, before, after)
	assert.Equal(t, n, historyLen(down), "history untouched")

	status, got := send(t, http.MethodPatch, down, map[string]any{"sku": "lite", "amount": 900})
	require.Equal(t, http.StatusOK, status, got)
	assert.Equal(t, true, got["pending_downgrade"])
	assert.Equal(t, "lite", got["sku"])
	assert.Equal(t, second.Format("2006-01-02"), got["next_payment_date"], "the schedule does not move")
	assert.Greater(t, historyLen(down), n, "the change appends to the history")
	status, got = send(t, http.MethodPatch, subs["acc-plan-up"], map[string]any{"sku": "plus", "amount": 3000})
	require.Equal(t, http.StatusOK, status, got)
	assert.Equal(t, false, got["pending_downgrade"])
	_, read := get(t, down, token)
	assert.Equal(t, true, read["pending_downgrade"], "GET shows it too")
	_, list := get(t, base+"/accounts/acc-plan-down/subscriptions", token)
	require.Len(t, list["data"], 1, "one subscription, at its new key")

	advance(second.AddDate(0, 0, 1))
	ctx := context.Background()
	for _, tc := range []struct {
		account string
		want    []string
	}{
		{"acc-plan-down", []string{payDay.Format("2006-01-02") + " gold 2000", second.Format("2006-01-02") + " lite 900"}},
		{"acc-plan-up", []string{payDay.Format("2006-01-02") + " gold 2000", second.Format("2006-01-02") + " plus 3000"}},
	} {
		status, list := get(t, base+"/accounts/"+tc.account+"/receipts", token)
		require.Equal(t, http.StatusOK, status, list)
		var receipts []string
		for _, it := range list["data"].([]any) {
			r := it.(map[string]any)
			receipts = append(receipts, fmt.Sprintf("%s %s %v", r["billing_date"], r["sku"], r["processed_amount"]))
		}
		assert.ElementsMatch(t, tc.want, receipts, "%s: receipts name the plan they paid for", tc.account)
		rows, err := a.Pool.Query(ctx, `SELECT payload->>'billing_date', payload->>'sku', payload->>'amount'
			FROM outbox WHERE type = $1 AND payload->>'account' = $2`, billing.ActionPaymentCompleted, tc.account)
		require.NoError(t, err)
		var actions []string
		for rows.Next() {
			var date, sku, amount string
			require.NoError(t, rows.Scan(&date, &sku, &amount))
			actions = append(actions, fmt.Sprintf("%s %s %s", date, sku, amount))
		}
		require.NoError(t, rows.Err())
		assert.ElementsMatch(t, tc.want, actions, "%s: the billing.payment_completed actions name it too", tc.account)
	}
	charged := map[string]int{}
	for _, p := range a.Fake.PIs() {
		charged[p.Metadata[billing.MetaAccount]+" "+p.Metadata[billing.MetaDate]]++
	}
	for k, c := range charged {
		assert.Equal(t, 1, c, "%s charged once", k)
	}
	assert.Len(t, charged, 4, "no period skipped")
	_, read = get(t, down, token)
	assert.Equal(t, false, read["pending_downgrade"], "the first period at the new plan is charged")
}
