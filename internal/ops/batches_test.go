package ops_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// TestConsoleBatchCollection (docs/design.md §8 "Batch collection"): the
// subscription page with an ERROR period offers a batch beside pay now; the
// batch form's dry run lists what would be charged and charges nothing; the
// confirmed batch runs in the background to done, its page showing each
// item's outcome; a form without accounts or dates, or matching nothing, is
// refused (400) and nothing is started or charged.
func TestConsoleBatchCollection(t *testing.T) {
	ctx := context.Background()
	fake := stripetest.New(t, stripetest.Options{})
	var collect atomic.Bool
	fake.Decide = func(p stripetest.PI) stripetest.Behavior {
		if collect.Load() {
			return stripetest.Succeed
		}
		return stripetest.Decline
	}
	a := startApp(t, fake.URL)
	clock, err := a.Clocks.CreateClock(ctx, time.Date(2024, 1, 9, 12, 0, 0, 0, time.UTC), "console batch")
	require.NoError(t, err)
	sub, err := a.Billing.CreateSubscription(ctx, "con-batch", billing.CreateInput{SKU: "gold", Email: "c@example.com", PaymentDay: 10,
		Amount: 1200, Currency: "usd", Term: dates.Monthly, Customer: "cus_conbatch", PaymentMethod: "pm_conbatch", TestClock: clock.ID})
	require.NoError(t, err)
	_, done, err := a.Clocks.AdvanceClock(ctx, ctx, clock.ID, time.Date(2024, 1, 10, 12, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	<-done
	charges := len(fake.PIs())
	require.Equal(t, 1, charges, "declined on 2024-01-10")

	base := a.Admin.URL()
	c := thinConsole(t, base)
	page := thinPage(t, c, base+"/ops/billing/con-batch/"+sub.SubscriptionID)
	assert.Contains(t, page, `id="batch"`, "a batch beside pay now")
	form := thinPage(t, c, base+"/ops/batches?account=con-batch")
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(form)
	require.NotNil(t, m)
	csrf := m[1]
	post := func(v url.Values) (int, string, string) {
		t.Helper()
		v.Set("csrf", csrf)
		req, err := http.NewRequest(http.MethodPost, base+"/ops/batches", strings.NewReader(v.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", base)
		noFollow := *c
		noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		resp, err := noFollow.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get("Location")
	}

	// Bad input: refused, nothing started, nothing charged.
	for _, tc := range []struct {
		name string
		v    url.Values
		want string
	}{
		{"no accounts and no dates", url.Values{}, "account_ids or a time range"},
		{"matching nothing", url.Values{"accounts": {"con-nobody"}}, "matches no subscription"},
		{"not a date", url.Values{"since": {"Jan 1"}}, "is a date"},
		{"bad account", url.Values{"accounts": {"a/b"}}, "An account id"},
	} {
		status, body, _ := post(tc.v)
		assert.Equal(t, http.StatusBadRequest, status, tc.name)
		assert.Contains(t, body, tc.want, tc.name)
	}
	assert.NotContains(t, thinPage(t, c, base+"/ops/batches"), `id="batches"`, "no batch started")
	assert.Len(t, fake.PIs(), charges, "nothing charged")

	// Dry run: listed, nothing charged.
	status, body, _ := post(url.Values{"accounts": {"con-batch"}})
	require.Equal(t, http.StatusOK, status, body)
	assert.Regexp(t, `id="batch-charge">1<`, body)
	assert.Contains(t, body, sub.SubscriptionID)
	assert.Contains(t, body, "2024-01-10")
	assert.Contains(t, body, `id="batch-confirm"`)
	assert.Len(t, fake.PIs(), charges, "a dry run charges nothing")

	// Confirmed: the batch runs to done.
	collect.Store(true)
	status, body, loc := post(url.Values{"accounts": {"con-batch"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusSeeOther, status, body)
	require.Regexp(t, `^/ops/batches/bat_[0-9a-f]{24}$`, loc)
	var progress string
	require.Eventually(t, func() bool {
		progress = thinPage(t, c, base+loc)
		return strings.Contains(progress, `id="batch-status">done<`)
	}, 30*time.Second, 100*time.Millisecond)
	assert.Regexp(t, `id="batch-paid">1<`, progress)
	assert.Contains(t, progress, `class="outcome">paid<`)
	assert.Len(t, fake.Successful()[stripetest.PeriodKey("con-batch", sub.SubscriptionID, "2024-01-10")], 1)
	assert.Contains(t, thinPage(t, c, base+"/ops/batches"), `id="batches"`, "listed among recent batches")
	resp, err := c.Get(base + "/ops/batches/not-a-batch")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
}
