package ops

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

func TestSessionCookies(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	s := newSessions("token-a", clock)
	value, id := s.issue()

	got, ok := s.check(value)
	require.True(t, ok)
	assert.Equal(t, id, got)
	assert.True(t, s.csrfOK("session", id, s.csrf("session", id)))

	tests := []struct {
		name  string
		value string
		s     sessions
	}{
		{"another token signed it", value, newSessions("token-b", clock)},
		{"expired", value, newSessions("token-a", func() time.Time { return now.Add(SessionTTL) })},
		{"tampered body", flip(value, 14), s},
		{"tampered signature", value[:len(value)-2] + "AA", s},
		{"no signature", value[:len(value)-44], s},
		{"empty", "", s},
		{"garbage", "not.a.cookie", s},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ok := tc.s.check(tc.value)
			assert.False(t, ok)
		})
	}
	t.Run("CSRF tokens are per session and per kind", func(t *testing.T) {
		_, other := s.issue()
		assert.False(t, s.csrfOK("session", other, s.csrf("session", id)))
		assert.False(t, s.csrfOK("login", id, s.csrf("session", id)))
		assert.False(t, s.csrfOK("session", id, ""))
	})
}

// flip changes the character at i.
func flip(s string, i int) string {
	c := byte('B')
	if s[i] == 'B' {
		c = 'C'
	}
	return s[:i] + string(c) + s[i+1:]
}

func TestSameOrigin(t *testing.T) {
	tests := []struct {
		name    string
		headers map[string]string
		want    bool
	}{
		{"same-origin fetch", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://proxy.example"}, true},
		{"cross-site fetch", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://127.0.0.1:8080"}, false},
		{"same-site fetch", map[string]string{"Sec-Fetch-Site": "same-site"}, false},
		{"old browser, own origin", map[string]string{"Origin": "http://127.0.0.1:8080"}, true},
		{"old browser, other origin", map[string]string{"Origin": "http://evil.example"}, false},
		{"old browser, null origin", map[string]string{"Origin": "null"}, false},
		{"forwarded host", map[string]string{"Origin": "https://ops.example", "X-Forwarded-Host": "ops.example"}, true},
		{"no headers (curl)", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:8080/ops/login", nil)
			require.NoError(t, err)
			for k, v := range tc.headers {
				r.Header.Set(k, v)
			}
			assert.Equal(t, tc.want, sameOrigin(r))
		})
	}
}

func TestRanges(t *testing.T) {
	r, msg := clockRange("09:30", "10:15:20")
	assert.Empty(t, msg)
	assert.Equal(t, events.Range{From: "09:30:00.000", To: "10:15:20.999"}, r)
	for _, bad := range [][2]string{{"9:30", ""}, {"24:00", ""}, {"10:00", "09:00"}, {"", "10:61"}} {
		_, msg := clockRange(bad[0], bad[1])
		assert.NotEmpty(t, msg, bad)
	}
	r, msg = timeRange("2026-03-01T10:00", "2026-03-01T11:00")
	assert.Empty(t, msg)
	assert.Equal(t, events.Range{From: "2026-03-01 10:00:00.000", To: "2026-03-01 11:00:59.999"}, r)
	for _, bad := range [][2]string{{"yesterday", ""}, {"2026-03-01T11:00", "2026-03-01T10:00"}} {
		_, msg := timeRange(bad[0], bad[1])
		assert.NotEmpty(t, msg, bad)
	}
}

func TestChartScale(t *testing.T) {
	for v, want := range map[int64]int64{0: 4, 3: 4, 5: 8, 8: 8, 9: 20, 41: 80, 199: 200, 201: 400, 9999: 20000} {
		assert.Equal(t, want, niceCeil(v), v)
	}
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	hours := make([]Hour, 48)
	for i := range hours {
		hours[i] = Hour{Start: start.Add(time.Duration(i) * time.Hour), Counts: map[string]int64{}}
	}
	hours[47].Counts["applied"], hours[47].Counts["failed"] = 6, 2
	c := newChart(hours)
	require.Len(t, c.Bars, 48)
	last := c.Bars[47]
	require.Len(t, last.Parts, 2)
	assert.InDelta(t, padTop, last.Parts[1].Y, 0.001, "8 of 8: the stack reaches the top")
	assert.Contains(t, last.Title, "6 applied, 2 failed")
	assert.Contains(t, last.Href, "date=2026-03-02&from=23%3A00&to=23%3A59")
	assert.Empty(t, c.Bars[0].Parts)
}

func TestCounterFlushesHourlyCountsByOutcome(t *testing.T) {
	pool := testenv.Postgres(t)
	now := time.Date(2026, 3, 1, 10, 59, 0, 0, time.UTC)
	c := NewCounter(pool, slog.New(slog.NewTextHandler(io.Discard, nil)), func() time.Time { return now })
	ctx := context.Background()

	c.Handled("x", stripeevent.Applied, 0)
	c.Handled("x", stripeevent.Completed, 0) // counted as applied
	c.Handled("x", stripeevent.Failed, 0)
	require.NoError(t, c.Flush(ctx))
	now = now.Add(2 * time.Minute) // next hour
	c.Handled("x", stripeevent.Duplicate, 0)
	c.Handled("x", stripeevent.Applied, 0)
	require.NoError(t, c.Flush(ctx))
	require.NoError(t, c.Flush(ctx), "nothing pending: no-op")

	// A second instance adds to the same rows.
	other := NewCounter(pool, slog.New(slog.NewTextHandler(io.Discard, nil)), func() time.Time { return now })
	other.Handled("x", stripeevent.Applied, 0)
	require.NoError(t, other.Flush(ctx))

	hours, err := c.Hours(ctx, 48)
	require.NoError(t, err)
	require.Len(t, hours, 48)
	assert.Equal(t, time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC), hours[47].Start)
	assert.Equal(t, map[string]int64{"applied": 2, "failed": 1}, hours[46].Counts)
	assert.Equal(t, map[string]int64{"applied": 2, "duplicate": 1}, hours[47].Counts)
	assert.Equal(t, int64(3), hours[47].Total())

	now = now.Add(48 * time.Hour)
	hours, err = c.Hours(ctx, 48)
	require.NoError(t, err)
	for _, h := range hours {
		assert.Zero(t, h.Total(), "older than 48 h: out of the chart")
	}
}

// memStore is the handler's event store in memory, for the tracking
// wrapper (the wrapper's own writes go to the real Postgres).
type memStore struct{ failWrites bool }

func (m *memStore) BatchGet(context.Context, []string) (map[string]events.Record, error) {
	return nil, nil
}

func (m *memStore) PutProcessed(context.Context, []events.Record) error {
	if m.failWrites {
		return errors.New("dynamodb down")
	}
	return nil
}

func (m *memStore) RecordFailure(context.Context, events.Record, error) error { return nil }

func TestProblemsFollowFailuresRejectionsAndRecoveries(t *testing.T) {
	pool := testenv.Postgres(t)
	p := NewProblems(pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	mem := &memStore{}
	store := p.Track(mem)
	ctx := context.Background()
	rec := func(id string, attempts int, lastErr string) events.Record {
		return events.Record{ID: id, Type: "payment_intent.succeeded", StripeAccount: "acct_1", Attempts: attempts, LastError: lastErr}
	}

	require.NoError(t, store.RecordFailure(ctx, rec("evt_failed", 1, ""), errors.New("postgres down")))
	require.NoError(t, store.RecordFailure(ctx, rec("evt_recovers", 1, ""), errors.New("stripe down")))
	require.NoError(t, store.PutProcessed(ctx, []events.Record{rec("evt_rejected", 1, "bad object"), rec("evt_fine", 1, "")}))
	counts, err := p.Counts(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"failed": 2, "rejected": 1}, counts)

	// A redelivery that is processed takes its event off the list; one
	// whose write fails does not.
	mem.failWrites = true
	assert.Error(t, store.PutProcessed(ctx, []events.Record{rec("evt_recovers", 2, "")}))
	mem.failWrites = false
	counts, _ = p.Counts(ctx)
	assert.Equal(t, int64(2), counts["failed"])
	require.NoError(t, store.PutProcessed(ctx, []events.Record{rec("evt_recovers", 2, "")}))
	counts, _ = p.Counts(ctx)
	assert.Equal(t, map[string]int64{"failed": 1, "rejected": 1}, counts)

	page, err := p.List(ctx, "", 1, "")
	require.NoError(t, err)
	require.Len(t, page.Problems, 1)
	require.NotEmpty(t, page.Next)
	second, err := p.List(ctx, "", 1, page.Next)
	require.NoError(t, err)
	require.Len(t, second.Problems, 1)
	assert.Empty(t, second.Next)
	assert.ElementsMatch(t, []string{"evt_failed", "evt_rejected"}, []string{page.Problems[0].EventID, second.Problems[0].EventID})

	only, err := p.List(ctx, "rejected", 10, "")
	require.NoError(t, err)
	require.Len(t, only.Problems, 1)
	assert.Equal(t, "bad object", only.Problems[0].Error)

	_, err = p.List(ctx, "", 10, "not-a-cursor")
	assert.ErrorIs(t, err, ErrBadCursor)
}

// The stylesheet's text colours keep WCAG AA contrast (4.5:1) on the
// backgrounds they are used on.
func TestContrast(t *testing.T) {
	css, err := assets.ReadFile("static/style.css")
	require.NoError(t, err)
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`--([a-z-]+):\s*(#[0-9a-fA-F]{6})`).FindAllStringSubmatch(string(css), -1) {
		vars[m[1]] = m[2]
	}
	pairs := [][2]string{
		{"fg", "#ffffff"}, {"muted", "#ffffff"}, {"accent", "#ffffff"}, {"fg", "bg"}, {"accent", "bg"},
		{"ok", "ok-bg"}, {"bad", "bad-bg"}, {"warn", "warn-bg"}, {"bad", "#ffffff"},
		{"#ffffff", "#24292f"}, {"#ffffff", "accent"}, {"#ffffff", "bad"},
	}
	colour := func(s string) string {
		if strings.HasPrefix(s, "#") {
			return s
		}
		c, ok := vars[s]
		require.True(t, ok, "no --%s in style.css", s)
		return c
	}
	for _, p := range pairs {
		ratio := contrast(colour(p[0]), colour(p[1]))
		assert.GreaterOrEqual(t, ratio, 4.5, "%s on %s: %.2f", p[0], p[1], ratio)
	}
}

func contrast(a, b string) float64 {
	la, lb := luminance(a), luminance(b)
	if la < lb {
		la, lb = lb, la
	}
	return (la + 0.05) / (lb + 0.05)
}

func luminance(hex string) float64 {
	v, _ := strconv.ParseUint(strings.TrimPrefix(hex, "#"), 16, 32)
	ch := func(c uint64) float64 {
		x := float64(c) / 255
		if x <= 0.03928 {
			return x / 12.92
		}
		return math.Pow((x+0.055)/1.055, 2.4)
	}
	return 0.2126*ch(v>>16&0xff) + 0.7152*ch(v>>8&0xff) + 0.0722*ch(v&0xff)
}
