package ops_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// TestConsoleReconciliation (docs/design.md §11): the console starts a dry
// run by default, whose page lists each finding (the service's state,
// Stripe's, what was done) and changes nothing; a run with "heal" ticked
// fulfils the purchase; a form without a kind, or with a bad date, is
// refused and starts nothing.
func TestConsoleReconciliation(t *testing.T) {
	fake := stripetest.New(t, stripetest.Options{})
	a := startApp(t, fake.URL)
	base := a.Admin.URL()

	body, _ := json.Marshal(map[string]any{"account": uuid.NewString(), "stripe_account": "acct_1Nv0FGQ9RKHgCVdK", "mode": "legacy",
		"amount": 1500, "currency": "usd"})
	req, err := http.NewRequest(http.MethodPost, base+"/v1/purchases", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var p map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode, p)
	purchase, pi := p["id"].(string), p["payment_intent"].(string)
	_, err = fake.DashboardChange(pi, "succeeded")
	require.NoError(t, err)
	fulfilled := func() bool {
		var f bool
		require.NoError(t, a.Pool.QueryRow(t.Context(), `SELECT fulfilled FROM purchases WHERE id = $1`, purchase).Scan(&f))
		return f
	}

	c := thinConsole(t, base)
	form := thinPage(t, c, base+"/ops/reconciliations")
	assert.Contains(t, form, `id="reconcile-form"`)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(form)
	require.NotNil(t, m)
	post := func(v url.Values) (int, string, string) {
		t.Helper()
		v.Set("csrf", m[1])
		req, err := http.NewRequest(http.MethodPost, base+"/ops/reconciliations", strings.NewReader(v.Encode()))
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
	done := func(location string) string {
		t.Helper()
		require.Regexp(t, `^/ops/reconciliations/rec_[0-9a-f]{24}$`, location)
		deadline := time.Now().Add(30 * time.Second)
		for {
			page := thinPage(t, c, base+location)
			if strings.Contains(page, `id="reconcile-status">done<`) {
				return page
			}
			require.True(t, time.Now().Before(deadline), "run %s not done", location)
			time.Sleep(100 * time.Millisecond)
		}
	}

	for _, tc := range []struct {
		name string
		v    url.Values
		want string
	}{
		{"no kind", url.Values{}, "Tick at least one kind"},
		{"bad date", url.Values{"kind": {"payment_intent"}, "since": {"Jan 1"}}, "since must be"},
		{"unknown kind", url.Values{"kind": {"charge"}}, "kinds"},
	} {
		status, body, _ := post(tc.v)
		assert.Equal(t, http.StatusBadRequest, status, tc.name)
		assert.Contains(t, body, tc.want, tc.name)
		assert.Contains(t, body, "Nothing was started", tc.name)
	}
	assert.NotContains(t, thinPage(t, c, base+"/ops/reconciliations"), `id="reconciliations"`, "no run started")

	// The default is a dry run: the finding is listed, nothing changes.
	status, _, location := post(url.Values{"kind": {"payment_intent", "subscription"}})
	require.Equal(t, http.StatusSeeOther, status)
	page := done(location)
	assert.Contains(t, page, `id="reconcile-dry-run">yes`)
	assert.Contains(t, page, `id="reconcile-drifted">1<`)
	assert.Contains(t, page, `id="reconcile-healed">0<`)
	assert.Contains(t, page, pi)
	assert.Contains(t, page, "payment_intent new, purchase new")
	assert.Contains(t, page, "payment_intent succeeded")
	assert.Contains(t, page, "none (dry run): would hand the handler payment_intent.succeeded")
	assert.False(t, fulfilled(), "a dry run changes nothing")

	// Heal: fulfilled, once.
	status, _, location = post(url.Values{"kind": {"payment_intent"}, "heal": {"yes"}})
	require.Equal(t, http.StatusSeeOther, status)
	page = done(location)
	assert.Contains(t, page, `id="reconcile-healed">1<`)
	assert.Contains(t, page, "handed payment_intent.succeeded evt_reconcile_"+pi+"_")
	assert.True(t, fulfilled())
	list := thinPage(t, c, base+"/ops/reconciliations")
	assert.Contains(t, list, `id="reconciliations"`)
	assert.Contains(t, list, "console, ")
}
