package poller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/stripe-payments/stripe-payments/internal/events"
)

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestAccountSpan(t *testing.T) {
	cfg := Config{PlatformAccount: "acct_p"}.withDefaults()
	now := ts("2024-03-08T12:00:00.700Z")
	tests := []struct {
		name       string
		checkpoint time.Time
		has        bool
		from       time.Time
		until      time.Time
		clamped    bool
	}{
		{"first run looks back 72h", time.Time{}, false, ts("2024-03-05T12:00:00Z"), ts("2024-03-08T11:59:30Z"), false},
		{"checkpoint minus overlap", ts("2024-03-08T11:50:00Z"), true, ts("2024-03-08T11:40:00Z"), ts("2024-03-08T11:59:30Z"), false},
		{"checkpoint older than retention is clamped", ts("2024-01-01T00:00:00Z"), true, ts("2024-02-07T12:00:01Z"), ts("2024-03-08T11:59:30Z"), true},
		{"checkpoint in the future gives an empty window", ts("2024-03-08T12:30:00Z"), true, ts("2024-03-08T12:20:00Z"), ts("2024-03-08T11:59:30Z"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, clamped := cfg.accountSpan(now, tc.checkpoint, tc.has)
			assert.Equal(t, tc.from, s.from.UTC())
			assert.Equal(t, tc.until, s.until.UTC())
			assert.Equal(t, tc.clamped, clamped)
		})
	}
	s, _ := cfg.accountSpan(now, ts("2024-03-08T11:50:00Z"), true)
	gte, lte := s.createdFilter()
	assert.Equal(t, ts("2024-03-08T11:40:00Z").Unix(), gte)
	assert.Equal(t, ts("2024-03-08T11:59:29Z").Unix(), lte, "until is exclusive: the checkpoint second is listed again next time")
}

func TestSlices(t *testing.T) {
	s := span{from: ts("2024-03-01T06:00:00Z"), until: ts("2024-03-03T12:00:00Z")}
	got := s.slices(24 * time.Hour)
	assert.Equal(t, []span{
		{ts("2024-03-01T06:00:00Z"), ts("2024-03-02T06:00:00Z")},
		{ts("2024-03-02T06:00:00Z"), ts("2024-03-03T06:00:00Z")},
		{ts("2024-03-03T06:00:00Z"), ts("2024-03-03T12:00:00Z")},
	}, got)
	assert.Empty(t, span{from: s.until, until: s.from}.slices(time.Hour))
}

func TestDaysSplitAtUTCMidnight(t *testing.T) {
	tests := []struct {
		name        string
		from, until time.Time
		want        []dayRange
	}{
		{"within one day", ts("2024-03-08T10:00:00Z"), ts("2024-03-08T10:10:00Z"),
			[]dayRange{{"2024-03-08", events.Range{From: "10:00:00.000", To: "10:09:59.999"}}}},
		{"across midnight", ts("2024-03-08T23:55:00Z"), ts("2024-03-09T00:05:00Z"),
			[]dayRange{
				{"2024-03-08", events.Range{From: "23:55:00.000"}},
				{"2024-03-09", events.Range{To: "00:04:59.999"}},
			}},
		{"ending exactly at midnight", ts("2024-03-08T23:55:00Z"), ts("2024-03-09T00:00:00Z"),
			[]dayRange{{"2024-03-08", events.Range{From: "23:55:00.000"}}}},
		{"starting exactly at midnight, three dates", ts("2024-03-08T00:00:00Z"), ts("2024-03-10T00:00:01Z"),
			[]dayRange{
				{"2024-03-08", events.Range{}},
				{"2024-03-09", events.Range{}},
				{"2024-03-10", events.Range{To: "00:00:00.999"}},
			}},
		{"in another zone, still UTC dates", ts("2024-03-08T23:30:00-02:00"), ts("2024-03-09T00:30:00-02:00"),
			[]dayRange{{"2024-03-09", events.Range{From: "01:30:00.000", To: "02:29:59.999"}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, span{from: tc.from, until: tc.until}.days())
		})
	}
}

func TestWithAccount(t *testing.T) {
	out := withAccount([]byte(`{"id":"evt_1","object":"event","created":1}`), "acct_x")
	assert.JSONEq(t, `{"id":"evt_1","object":"event","created":1,"account":"acct_x"}`, string(out))
}
