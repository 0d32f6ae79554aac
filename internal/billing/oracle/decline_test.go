package oracle

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docs/design.md §8 "Declines that retrying cannot fix are not retried", from the
// rule alone.
func TestHardDeclineIsNotRetried(t *testing.T) {
	tests := []struct {
		name string
		// act, when set, runs before the jobs of its day.
		actOn string
		act   func(w *world) error
		// second is the outcome of any charge after the first.
		second Outcome
		want   []string
		final  Status
		trail  []Status
	}{
		{name: "no retry days, STALE after the stale days", second: Succeeded,
			want: []string{"2024-01-31", "2024-02-29"}, final: Stale, trail: []Status{Scheduled, Error, Stale}},
		{name: "pay now still collects it", actOn: "2024-02-10", second: Succeeded,
			act: func(w *world) error {
				due, err := w.s.PayNow(w.day)
				if err != nil {
					return err
				}
				w.n++
				w.charges = append(w.charges, w.day.String()+" pay-now")
				return w.s.Attempted(w.day, due.Period, due.Amount, "pi_paynow", Succeeded, false)
			},
			want: []string{"2024-01-31", "2024-02-10", "2024-02-29"}, final: Completed, trail: []Status{Scheduled, Error, Completed}},
		{name: "a payment method change makes it due at the next run", actOn: "2024-02-12", second: Succeeded,
			act:  func(w *world) error { return w.s.ChangePaymentMethod(w.day) },
			want: []string{"2024-01-31", "2024-02-12", "2024-02-29"}, final: Completed, trail: []Status{Scheduled, Error, Completed}},
		{name: "declined again after the change: soft, the remaining retry days", actOn: "2024-02-02", second: Declined,
			act:  func(w *world) error { return w.s.ChangePaymentMethod(w.day) },
			want: []string{"2024-01-31", "2024-02-02", "2024-02-03", "2024-02-05", "2024-02-07", "2024-02-29"}, final: Stale,
			trail: []Status{Scheduled, Error, Stale}},
		{name: "hard again after the change: no retry", actOn: "2024-02-02", second: HardDeclined,
			act:  func(w *world) error { return w.s.ChangePaymentMethod(w.day) },
			want: []string{"2024-01-31", "2024-02-02", "2024-02-29"}, final: Stale, trail: []Status{Scheduled, Error, Stale}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, Rule{Day: 31}, "2024-01-02", NoDate)
			w.decide = func(due Due, n int) Outcome {
				switch {
				case due.Period != d("2024-01-31"):
					return Succeeded
				case n == 1:
					return HardDeclined
				}
				return tc.second
			}
			if tc.act != nil {
				w.until(d(tc.actOn).AddDays(-1).String())
				w.day = d(tc.actOn)
				require.NoError(t, tc.act(w))
				w.jobs()
			}
			w.until("2024-03-02")
			got := w.chargeDays()
			assert.Equal(t, tc.want, got)
			p := w.s.Period(d("2024-01-31"))
			assert.Equal(t, tc.final, p.Status)
			assert.Equal(t, tc.trail, p.Trail)
		})
	}
}
