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

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// Console sessions live in Postgres (shared by replicas): a revoked,
// idle or too old session is refused by every replica, the cookie is
// random (nothing derived from the token) and only its digest is stored.
func TestSessions(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	s := sessions{pool: pool, now: clock, idle: 30 * time.Minute, maxAge: 12 * time.Hour, tag: tokenTag("token-a")}
	replica := sessions{pool: pool, now: clock, idle: 30 * time.Minute, maxAge: 12 * time.Hour, tag: tokenTag("token-a")}
	rotated := sessions{pool: pool, now: clock, idle: 30 * time.Minute, maxAge: 12 * time.Hour, tag: tokenTag("token-b")}
	at := func(d time.Duration) { now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Add(d) }

	value, err := s.issue(ctx, "192.0.2.1")
	require.NoError(t, err)
	other, err := s.issue(ctx, "192.0.2.1")
	require.NoError(t, err)
	assert.NotEqual(t, value, other)
	assert.GreaterOrEqual(t, len(value), 43, "32 random bytes")
	got, err := replica.check(ctx, value)
	require.NoError(t, err, "another replica knows the session")
	assert.Len(t, got.csrf, 43)
	got2, err := s.check(ctx, other)
	require.NoError(t, err)
	assert.NotEqual(t, got.csrf, got2.csrf, "CSRF tokens are per session")
	var stored int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ops_sessions WHERE id_hash = $1 OR csrf = $1::text OR remote = $1::text`,
		[]byte(value)).Scan(&stored))
	assert.Zero(t, stored, "the cookie itself is not stored")

	for name, bad := range map[string]string{"empty": "", "garbage": "not.a.cookie", "tampered": flip(value, 5),
		"too long": strings.Repeat("A", 200)} {
		_, err := s.check(ctx, bad)
		assert.ErrorIs(t, err, errNoSession, name)
	}

	t.Run("a rotated token ends every session", func(t *testing.T) {
		_, err := rotated.check(ctx, value)
		assert.ErrorIs(t, err, errNoSession)
		_, err = s.check(ctx, value)
		assert.NoError(t, err, "under the old token it still is")
	})
	t.Run("logout revokes on every replica", func(t *testing.T) {
		require.NoError(t, s.revoke(ctx, got2.idHash))
		_, err := replica.check(ctx, other)
		assert.ErrorIs(t, err, errNoSession)
		_, err = s.check(ctx, value)
		assert.NoError(t, err, "the other session lives on")
	})
	t.Run("idle timeout", func(t *testing.T) {
		at(20 * time.Minute)
		_, err := s.check(ctx, value)
		require.NoError(t, err, "used within 30 minutes")
		at(49 * time.Minute)
		_, err = replica.check(ctx, value)
		require.NoError(t, err, "29 minutes after its last use")
		at(49*time.Minute + 30*time.Minute + time.Second)
		_, err = s.check(ctx, value)
		assert.ErrorIs(t, err, errNoSession, "30 minutes without use")
	})
	t.Run("absolute lifetime", func(t *testing.T) {
		at(0)
		v, err := s.issue(ctx, "192.0.2.2")
		require.NoError(t, err)
		for d := 20 * time.Minute; d < 12*time.Hour; d += 20 * time.Minute {
			at(d)
			_, err := s.check(ctx, v)
			require.NoError(t, err, d)
		}
		at(12 * time.Hour)
		_, err = s.check(ctx, v)
		assert.ErrorIs(t, err, errNoSession, "12 hours after login, used or not")
	})
	t.Run("ended sessions are deleted at the next login", func(t *testing.T) {
		at(24 * time.Hour)
		_, err := s.issue(ctx, "192.0.2.3")
		require.NoError(t, err)
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ops_sessions`).Scan(&n))
		assert.Equal(t, 1, n)
	})
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
	assert.ErrorIs(t, err, apperr.ErrInvalid)
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

// flip changes the character at i.
func flip(s string, i int) string {
	c := byte('B')
	if s[i] == 'B' {
		c = 'C'
	}
	return s[:i] + string(c) + s[i+1:]
}
