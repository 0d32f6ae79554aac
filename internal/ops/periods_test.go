package ops_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/ops"
)

var (
	periodRow   = regexp.MustCompile(`<tr data-date="(\d{4}-\d{2}-\d{2})">`)
	olderLink   = regexp.MustCompile(`<a href="([^"]+)" class="button" id="older-periods"`)
	waiveOption = regexp.MustCompile(`<option value="(\d{4}-\d{2}-\d{2})">`)
)

// The subscription page shows its periods a page at a time, newest first,
// with a cursor link to the older ones, like every list of the console; a
// subscription with more periods than a page is never read whole. What the
// actions need (the periods to waive, pay now's ERROR period) is found
// whatever page is shown, and a cursor the console did not issue is a 400.
func TestSubscriptionPagePagesItsPeriods(t *testing.T) {
	a := apptest.New(t, apptest.Options{})
	srv := httptest.NewServer(a.Admin.Echo)
	t.Cleanup(srv.Close)
	ctx := context.Background()

	raw, err := json.Marshal(map[string]any{"sku": "gold", "email": "pages@example.com", "payment_day": 10, "amount": 1500,
		"currency": "usd", "term": "MONTHLY", "customer": "cus_pages", "payment_method": "pm_pages"})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/internal/v1/accounts/merchant-pages/subscriptions", bytes.NewReader(raw))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+a.Config.InternalAPIToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var sub map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&sub))
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode, sub)
	subID := sub["subscription_id"].(string)

	// Eight years of monthly periods before the subscription's own: paid,
	// but the oldest one failed (ERROR), on the last page.
	store := a.Billing.Store()
	first := dates.MustParse("2016-01-10")
	const past = 2*ops.PageSize + 7
	for i := range past {
		p := billing.Period{AccountID: "merchant-pages", SubscriptionID: subID, SKU: "gold", BillingDate: dates.AddMonthsClamped(first, i),
			Status: billing.Completed, Process: "RECURRING", Amount: 1500, Currency: "usd", Attempts: 1}
		if i == 0 {
			p.Status, p.Error = billing.Error, "card_declined"
		}
		tx := billing.NewTx("test-seed", time.Now())
		tx.PutPeriod(&p, true)
		require.NoError(t, store.Commit(ctx, tx))
	}
	all, err := store.ListPeriods(ctx, "merchant-pages", subID)
	require.NoError(t, err)
	require.Greater(t, len(all), 2*ops.PageSize)
	var want []string
	for _, p := range all {
		want = append(want, p.BillingDate.String())
	}
	sort.Sort(sort.Reverse(sort.StringSlice(want)))

	c := newConsole(t, srv.URL+"/ops")
	c.mustLogin(a.Config.InternalAPIToken)
	path := "/billing/merchant-pages/" + subID
	var got []string
	for pages := 1; ; pages++ {
		require.LessOrEqual(t, pages, 3, "three pages hold them")
		page := c.get(path)
		require.Equal(t, http.StatusOK, page.status, page.body)
		rows := periodRow.FindAllStringSubmatch(page.body, -1)
		require.NotEmpty(t, rows)
		assert.LessOrEqual(t, len(rows), ops.PageSize, "a page holds at most PageSize periods")
		for _, r := range rows {
			got = append(got, r[1])
		}
		assert.Contains(t, waiveOption.FindAllStringSubmatch(page.body, -1), []string{`<option value="2016-01-10">`, "2016-01-10"},
			"the oldest ERROR period can be waived from every page")
		assert.Contains(t, page.body, `id="pay"`, "pay now is offered from every page")
		if pages > 1 {
			assert.Contains(t, page.body, `id="newest-periods"`)
		}
		m := olderLink.FindStringSubmatch(page.body)
		if m == nil {
			break
		}
		path = m[1][len("/ops"):]
		path = regexp.MustCompile(`&amp;`).ReplaceAllString(path, "&")
	}
	assert.Equal(t, want, got, "every period once, newest first")

	bad := c.get("/billing/merchant-pages/" + subID + "?periods=not-a-cursor")
	assert.Equal(t, http.StatusBadRequest, bad.status)
}
