package ops_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// console logs in to /ops/ with the token and returns a client holding the
// session.
func thinConsole(t *testing.T, base string) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	resp, err := c.Get(base + "/ops/login")
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(page)
	require.NotNil(t, m, "login form")
	resp, err = c.PostForm(base+"/ops/login", url.Values{"csrf": {string(m[1])}, "token": {token}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "logged in (after the redirect)")
	return c
}

func thinPage(t *testing.T, c *http.Client, u string) string {
	t.Helper()
	resp, err := c.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	return string(b)
}

// TestConsoleShowsThinEventsAndTheirHydration: a thin event whose
// hydration fails is on the overview and the failed & rejected page with
// its last error; its page shows the kind and hydration state; once
// hydrated, the link to its snapshot event.
func TestConsoleShowsThinEventsAndTheirHydration(t *testing.T) {
	fake := stripetest.New(t, stripetest.Options{})
	a := startApp(t, fake.URL)
	base := a.Admin.URL() // the console
	snapID := stripetest.NewID()
	fake.Add("acct_1Nv0FGQ9RKHgCVdK", stripetest.Event{Fixture: "customer.subscription.updated", ID: snapID,
		Account: stripetest.Ptr("acct_1Nv0FGQ9RKHgCVdK")}.Build(t))
	thinID := stripetest.NewThinID()
	thin := stripetest.Thin{Fixture: "v1.customer.subscription.updated", ID: thinID}.Build(t)
	fake.AddV2(thin, snapID)
	fake.Fail(http.MethodGet, "/v2/core/events/"+thinID, http.StatusNotFound, "invalid_request_error", "resource_missing", "No such event", 1)
	require.Equal(t, http.StatusOK, deliver(t, a, thin))

	c := thinConsole(t, base)
	deadline := time.Now().Add(20 * time.Second)
	var overview string
	for {
		overview = thinPage(t, c, base+"/ops/")
		if strings.Contains(overview, thinID) {
			break
		}
		require.True(t, time.Now().Before(deadline), "the failing thin event never reached the overview")
		time.Sleep(100 * time.Millisecond)
	}
	assert.Contains(t, overview, `id="thin-stuck"`)
	assert.Contains(t, overview, "stripe answered 404 resource_missing")
	problems := thinPage(t, c, base+"/ops/problems")
	assert.Contains(t, problems, thinID)
	assert.Contains(t, problems, "stripe answered 404")
	ev := thinPage(t, c, base+"/ops/events/"+thinID)
	assert.Regexp(t, `id="payload-kind">thin<`, ev)
	assert.Regexp(t, `id="hydration">retrying<`, ev)
	assert.NotContains(t, ev, `id="replay"`, "a thin event is hydrated, not replayed")

	// The retry succeeds: the page links the snapshot event.
	deadline = time.Now().Add(30 * time.Second)
	for {
		ev = thinPage(t, c, base+"/ops/events/"+thinID)
		if strings.Contains(ev, `id="hydration">hydrated<`) {
			break
		}
		require.True(t, time.Now().Before(deadline), "never hydrated")
		time.Sleep(200 * time.Millisecond)
	}
	assert.Contains(t, ev, `href="/ops/events/`+snapID+`"`)
	assert.NotContains(t, thinPage(t, c, base+"/ops/"), `id="thin-stuck"`)
	assert.Contains(t, thinPage(t, c, base+"/ops/problems"), `id="thin-none"`)
	snap := thinPage(t, c, base+"/ops/events/"+snapID)
	assert.Regexp(t, `id="payload-kind">snapshot<`, snap)
}

// TestConsoleShowsARefusedThinNotification: a notification that disagrees
// with Stripe's copy of its event (re-typed) is on the failed & rejected
// page with the difference; its page tags the hydration refused, explains
// it and offers no replay.
func TestConsoleShowsARefusedThinNotification(t *testing.T) {
	fake := stripetest.New(t, stripetest.Options{})
	a := startApp(t, fake.URL)
	base := a.Admin.URL()
	thinID := stripetest.NewThinID()
	genuine := stripetest.Thin{Fixture: "v1.customer.subscription.updated", ID: thinID}.Build(t)
	fake.AddV2(genuine, stripetest.NewID())
	forged := strings.Replace(string(genuine), `"v1.customer.subscription.updated"`, `"v1.customer.subscription.deleted"`, 1)
	require.NotEqual(t, string(genuine), forged)
	require.Equal(t, http.StatusOK, deliver(t, a, []byte(forged)))

	c := thinConsole(t, base)
	deadline := time.Now().Add(20 * time.Second)
	var ev string
	for {
		ev = thinPage(t, c, base+"/ops/events/"+thinID)
		if strings.Contains(ev, `id="hydration">refused<`) {
			break
		}
		require.True(t, time.Now().Before(deadline), "never refused")
		time.Sleep(100 * time.Millisecond)
	}
	assert.Contains(t, ev, `class="tag bad" id="hydration">refused<`)
	assert.Contains(t, ev, `id="refused-hint"`)
	assert.Contains(t, ev, "Stripe&#39;s copy")
	assert.NotContains(t, ev, `id="replay"`)
	problems := thinPage(t, c, base+"/ops/problems")
	assert.Contains(t, problems, thinID)
	assert.Contains(t, problems, "disagrees with Stripe")
}
