package ops

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/stripe-payments/stripe-payments/internal/billing"
)

func TestParseClockTime(t *testing.T) {
	jan := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Time
		bad  string
	}{
		{in: "2027-01-01T00:00", want: jan},
		{in: " 2027-01-01T00:00:30 ", want: jan.Add(30 * time.Second)},
		{in: "2027-01-01T02:00:00+02:00", want: jan},
		{in: "2027-01-01", want: jan},
		{in: "", bad: "Enter a time"},
		{in: "next tuesday", bad: "is not a time"},
		{in: "2027-02-30T00:00", bad: "is not a time"},
		{in: "01/02/2027", bad: "is not a time"},
	}
	for _, tc := range tests {
		got, msg := parseClockTime(tc.in)
		if tc.bad != "" {
			assert.Contains(t, msg, tc.bad, tc.in)
			continue
		}
		assert.Empty(t, msg, tc.in)
		assert.True(t, tc.want.Equal(got), "%s: %s", tc.in, got)
		assert.Equal(t, time.UTC, got.Location(), tc.in)
	}
}

// The console says why an advance would be refused before asking to
// confirm it (docs/design.md §4: later than the clock, at most 3 years, one at a
// time); the billing core decides again when it is confirmed.
func TestAdvanceRefused(t *testing.T) {
	jan := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	ready := billing.Clock{FrozenTime: jan, ReachedTime: jan, Status: billing.ClockReady}
	failed := billing.Clock{FrozenTime: jan.AddDate(0, 6, 0), ReachedTime: jan.AddDate(0, 2, 0), Status: billing.ClockFailed}
	advancing := billing.Clock{FrozenTime: jan.AddDate(0, 6, 0), ReachedTime: jan, Status: billing.ClockAdvancing}
	tests := []struct {
		name  string
		clock billing.Clock
		to    time.Time
		want  string // "" allowed
	}{
		{"a month on", ready, jan.AddDate(0, 1, 0), ""},
		{"a second on", ready, jan.Add(time.Second), ""},
		{"exactly 3 years", ready, jan.AddDate(3, 0, 0), ""},
		{"3 years and a second", ready, jan.AddDate(3, 0, 0).Add(time.Second), "at most 3 years"},
		{"the same time", ready, jan, "later than the clock's 2027-01-01T00:00:00Z"},
		{"the past", ready, jan.AddDate(0, 0, -1), "later than"},
		{"a failed advance goes on from where it stopped", failed, jan.AddDate(0, 3, 0), ""},
		{"not before where it stopped", failed, jan.AddDate(0, 1, 0), "later than the clock's 2027-03-01"},
		{"one advance at a time", advancing, jan.AddDate(1, 0, 0), "advancing"},
	}
	for _, tc := range tests {
		got := advanceRefused(tc.clock, tc.to)
		if tc.want == "" {
			assert.Empty(t, got, tc.name)
		} else {
			assert.Contains(t, got, tc.want, tc.name)
		}
	}
}
