package events

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The shared range builders the API and the console both read their
// since/until and from/to through.
func TestRanges(t *testing.T) {
	at := func(s string) *time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return &v
	}
	for _, c := range []struct {
		name     string
		from, to string
		want     Range
		err      error
	}{
		{"open", "", "", Range{}, nil},
		{"minutes cover the whole minute", "10:15", "10:15", Range{From: "10:15:00.000", To: "10:15:59.999"}, nil},
		{"seconds cover the whole second", "10:15:01", "10:15:02", Range{From: "10:15:01.000", To: "10:15:02.999"}, nil},
		{"milliseconds stay", "10:15:01.250", "10:15:01.250", Range{From: "10:15:01.250", To: "10:15:01.250"}, nil},
		{"one side open", "", "23:00", Range{To: "23:00:59.999"}, nil},
		{"reversed", "11:00", "10:00", Range{From: "11:00:00.000", To: "10:00:59.999"}, ErrRangeReversed},
	} {
		t.Run("clock "+c.name, func(t *testing.T) {
			r, err := ClockRange(c.from, c.to)
			assert.Equal(t, c.want, r)
			assert.ErrorIs(t, err, c.err)
			if c.err == nil {
				assert.NoError(t, err)
			}
		})
	}
	for _, c := range []struct {
		name         string
		since, until *time.Time
		pad          time.Duration
		want         Range
		err          error
	}{
		{"open", nil, nil, 0, Range{}, nil},
		{"both", at("2026-03-01T10:00:00Z"), at("2026-03-01T11:00:00+01:00"), 0,
			Range{From: "2026-03-01 10:00:00.000", To: "2026-03-01 10:00:00.000"}, nil},
		{"padded end", nil, at("2026-03-01T10:00:00Z"), 59*time.Second + 999*time.Millisecond,
			Range{To: "2026-03-01 10:00:59.999"}, nil},
		{"order checked before the pad", at("2026-03-01T10:00:30Z"), at("2026-03-01T10:00:00Z"), 59 * time.Second,
			Range{From: "2026-03-01 10:00:30.000", To: "2026-03-01 10:00:59.000"}, ErrRangeReversed},
	} {
		t.Run("time "+c.name, func(t *testing.T) {
			r, err := TimeRange(c.since, c.until, c.pad)
			assert.Equal(t, c.want, r)
			assert.ErrorIs(t, err, c.err)
			if c.err == nil {
				assert.NoError(t, err)
			}
		})
	}
}
