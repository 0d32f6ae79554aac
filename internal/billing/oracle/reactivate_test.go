package oracle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docs/design.md §8 "Reactivation", from the rule alone.
func TestReactivation(t *testing.T) {
	tests := []struct {
		name              string
		rule              Rule
		created           string
		cancelOn, reactOn string
		until             string
		want              []string // charge days
	}{
		{name: "monthly, a day before the cancelled period: it is scheduled again", rule: Rule{Day: 10}, created: "2024-01-02",
			cancelOn: "2024-02-05", reactOn: "2024-02-07", until: "2024-04-10",
			want: []string{"2024-01-10", "2024-02-10", "2024-03-10", "2024-04-10"}},
		{name: "monthly, months later: from the reactivation day", rule: Rule{Day: 10}, created: "2024-01-02",
			cancelOn: "2024-01-20", reactOn: "2024-05-10", until: "2024-06-10",
			want: []string{"2024-01-10", "2024-05-10", "2024-06-10"}},
		{name: "monthly, at least one term after the last charged period", rule: Rule{Day: 10}, created: "2024-01-02",
			cancelOn: "2024-01-11", reactOn: "2024-01-12", until: "2024-03-10",
			want: []string{"2024-01-10", "2024-02-10", "2024-03-10"}},
		{name: "yearly keeps its month", rule: Rule{Term: Yearly, Day: 15, Month: time.March}, created: "2024-03-01",
			cancelOn: "2024-06-01", reactOn: "2025-04-01", until: "2026-03-15",
			want: []string{"2024-03-15", "2026-03-15"}},
		{name: "yearly, before its month: this year's date", rule: Rule{Term: Yearly, Day: 15, Month: time.March}, created: "2024-03-01",
			cancelOn: "2024-06-01", reactOn: "2025-02-01", until: "2025-03-15",
			want: []string{"2024-03-15", "2025-03-15"}},
		{name: "Friday billing", rule: Rule{Week: 2}, created: "2024-01-01",
			cancelOn: "2024-01-20", reactOn: "2024-03-09", until: "2024-04-12",
			want: []string{"2024-01-12", "2024-04-12"}}, // Mar 8 passed: the second Friday of April
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, tc.rule, tc.created, NoDate)
			w.until(d(tc.cancelOn).AddDays(-1).String())
			w.day = d(tc.cancelOn)
			assert.ErrorIs(t, w.s.Reactivate(w.day, 0), ErrRefused, "not cancelled")
			require.NoError(t, w.s.Cancel(w.day))
			w.jobs()
			w.until(d(tc.reactOn).AddDays(-1).String())
			w.day = d(tc.reactOn)
			require.NoError(t, w.s.Reactivate(w.day, 0))
			assert.ErrorIs(t, w.s.Reactivate(w.day, 0), ErrRefused, "active again")
			w.jobs()
			w.until(tc.until)
			assert.Equal(t, tc.want, w.chargeDays())
			assert.Empty(t, w.s.Missing(w.day), "a reminder for each new period")
		})
	}
}

func TestReactivationNewAmount(t *testing.T) {
	w := newWorld(t, Rule{Day: 10}, "2024-01-02", NoDate)
	w.until("2024-01-15")
	require.NoError(t, w.s.Cancel(w.day))
	w.until("2024-02-01")
	require.NoError(t, w.s.Reactivate(w.day, 2500))
	w.until("2024-02-10")
	assert.Equal(t, []string{"2024-01-10 2024-01-10 1999", "2024-02-10 2024-02-10 2500"}, w.charges)
}
