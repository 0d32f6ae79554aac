package ops_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// login returns a client holding a console session.
func login(tb testing.TB, base string) *http.Client {
	tb.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(tb, err)
	c := &http.Client{Jar: jar}
	resp, err := c.Get(base + "/login")
	require.NoError(tb, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := csrfField.FindSubmatch(page)
	require.NotNil(tb, m, "login form")
	resp, err = c.PostForm(base+"/login", url.Values{"csrf": {string(m[1])}, "token": {token}})
	require.NoError(tb, err)
	resp.Body.Close()
	require.Equal(tb, http.StatusOK, resp.StatusCode)
	require.Equal(tb, "/ops/", resp.Request.URL.Path)
	return c
}

// BenchmarkConsolePages times the console's pages over an events table of
// 10,000 events of one day and one account: every page reads one index
// page (50 records) or the small Postgres tables, never the whole table.
func BenchmarkConsolePages(b *testing.B) {
	a := startApp(b, "http://127.0.0.1:1")
	ctx := context.Background()
	const n = 10000
	acct := "acct_1OpsBench"
	now := time.Now().UTC()
	recs := make([]events.Record, 0, n)
	for i := range n {
		payload := stripetest.Event{Fixture: "customer.created", Account: &acct, Created: now.Add(-time.Duration(i) * time.Second)}.Build(b)
		ev, err := stripeevent.Parse(payload)
		require.NoError(b, err)
		r := events.NewRecord(ev, payload, a.Config.PlatformAccount, a.Config.EventTTL, stripeevent.SourceWebhook, now)
		r.Status, r.ProcessedAt = events.StatusProcessed, now
		recs = append(recs, r)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w * 500; i < n; i += 8 * 500 {
				if err := a.Events.PutProcessed(ctx, recs[i:min(i+500, n)]); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	require.NoError(b, <-errs)
	b.Logf("wrote %d events in %s", n, time.Since(start).Round(time.Millisecond))

	base := a.Admin.URL() + "/ops"
	c := login(b, base)
	date := now.Format("2006-01-02")
	get := func(path string) string {
		resp, err := c.Get(base + path)
		require.NoError(b, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(b, http.StatusOK, resp.StatusCode, path)
		return string(body)
	}
	// The second page of the account listing, through the page's own link.
	first := get("/events?by=account&account=" + acct)
	next := regexp.MustCompile(`href="(/ops/events\?[^"]+cursor=[^"]+)" rel="next"`).FindStringSubmatch(first)
	require.NotNil(b, next, "a next page link")
	second := strings.TrimPrefix(strings.ReplaceAll(next[1], "&amp;", "&"), "/ops")
	for _, page := range []struct{ name, path string }{
		{"overview", "/"},
		{"by-date", "/events?by=date&date=" + date},
		{"by-account", "/events?by=account&account=" + acct},
		{"by-account-page-2", second},
		{"event", "/events/" + recs[n/2].ID},
		{"problems", "/problems"},
	} {
		b.Run(page.name, func(b *testing.B) {
			for b.Loop() {
				get(page.path)
			}
		})
	}
}

// The outbox list pages through messages due at the same instant without
// skipping or repeating one.
func TestOutboxListPagesThroughTies(t *testing.T) {
	a := startApp(t, "http://127.0.0.1:1")
	_, err := a.Pool.Exec(context.Background(), `INSERT INTO outbox (id, topic, type, dedupe_key, payload, available_at)
		SELECT gen_random_uuid(), 'ops-test', 'x', 'ops-page-' || i, '{}', now() + interval '1 hour' FROM generate_series(1, 120) i`)
	require.NoError(t, err)
	base := a.Admin.URL() + "/ops"
	c := login(t, base)
	ids := map[string]bool{}
	path := "/outbox?topic=ops-test"
	idCell := regexp.MustCompile(`<tr><td data-label="Message"><code>([0-9a-f-]{36})</code></td><td data-label="Topic">ops-test</td>`)
	next := regexp.MustCompile(`href="(/ops/outbox\?[^"]+)" rel="next"`)
	for pages := 0; path != ""; pages++ {
		require.Less(t, pages, 5)
		resp, err := c.Get(base + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		for _, m := range idCell.FindAllStringSubmatch(string(body), -1) {
			require.False(t, ids[m[1]], "repeated %s", m[1])
			ids[m[1]] = true
		}
		path = ""
		if m := next.FindStringSubmatch(string(body)); m != nil {
			path = strings.TrimPrefix(strings.ReplaceAll(m[1], "&amp;", "&"), "/ops")
		}
	}
	require.Len(t, ids, 120)
}
