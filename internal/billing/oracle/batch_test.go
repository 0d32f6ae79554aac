package oracle

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docs/design.md §8 "Batch collection", from the rule alone: a batch charges each
// selected subscription's oldest ERROR period once, exactly as pay now
// (hard-declined ones included); a subscription with an attempt in flight
// is skipped and reported; §4's time range selects by the ERROR period.
func TestBatchCollection(t *testing.T) {
	batch := func(since, until Date, o Outcome) func(w *world) error {
		return func(w *world) error {
			due, err := w.s.Batch(w.day, since, until)
			if err != nil {
				return err
			}
			w.n++
			w.charges = append(w.charges, w.day.String()+" batch "+due.Period.String())
			return w.s.Attempted(w.day, due.Period, due.Amount, "pi_batch", o, false)
		}
	}
	tests := []struct {
		name   string
		first  Outcome // of the first charge of 2024-01-31; later ones decline the same way but for the batch
		actOn  string
		act    func(w *world) error
		err    error
		want   []string
		final  Status
		trail  []Status
		second func(w *world) error // a second batch on the same day: nothing left
	}{
		{name: "a hard-declined period is collected", first: HardDeclined, actOn: "2024-02-10", act: batch(NoDate, NoDate, Succeeded),
			want: []string{"2024-01-31", "2024-02-10", "2024-02-29"}, final: Completed, trail: []Status{Scheduled, Error, Completed},
			second: batch(NoDate, NoDate, Succeeded)},
		{name: "a soft-declined period between its retry days: no retry after", first: Declined, actOn: "2024-02-02",
			act:  batch(d("2024-01-01"), d("2024-01-31"), Succeeded),
			want: []string{"2024-01-31", "2024-02-01", "2024-02-02", "2024-02-29"}, final: Completed, trail: []Status{Scheduled, Error, Completed}},
		{name: "declined by the batch: the retry days go on", first: Declined, actOn: "2024-02-02", act: batch(NoDate, NoDate, Declined),
			want:  []string{"2024-01-31", "2024-02-01", "2024-02-02", "2024-02-03", "2024-02-05", "2024-02-07", "2024-02-29"},
			final: Stale, trail: []Status{Scheduled, Error, Stale}},
		{name: "outside the time range: not selected", first: HardDeclined, actOn: "2024-02-10", act: batch(d("2024-02-01"), NoDate, Succeeded),
			err: ErrRefused, want: []string{"2024-01-31", "2024-02-29"}, final: Stale, trail: []Status{Scheduled, Error, Stale}},
		{name: "until before the period: not selected", first: HardDeclined, actOn: "2024-02-10", act: batch(NoDate, d("2024-01-30"), Succeeded),
			err: ErrRefused, want: []string{"2024-01-31", "2024-02-29"}, final: Stale, trail: []Status{Scheduled, Error, Stale}},
		{name: "nothing failed: not selected", first: Succeeded, actOn: "2024-02-10", act: batch(NoDate, NoDate, Succeeded),
			err: ErrRefused, want: []string{"2024-01-31", "2024-02-29"}, final: Completed, trail: []Status{Scheduled, Completed}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, Rule{Day: 31}, "2024-01-02", NoDate)
			w.decide = func(due Due, n int) Outcome {
				if due.Period != d("2024-01-31") {
					return Succeeded
				}
				return tc.first
			}
			w.until(d(tc.actOn).AddDays(-1).String())
			w.day = d(tc.actOn)
			err := tc.act(w)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
			} else {
				require.NoError(t, err)
			}
			if tc.second != nil {
				require.ErrorIs(t, tc.second(w), ErrRefused, "charged once")
			}
			w.jobs()
			w.until("2024-03-02")
			assert.Equal(t, tc.want, w.chargeDays())
			p := w.s.Period(d("2024-01-31"))
			assert.Equal(t, tc.final, p.Status)
			assert.Equal(t, tc.trail, p.Trail)
		})
	}
}

// The oldest ERROR period is the one charged; an attempt in flight skips
// the subscription until it is resolved.
func TestBatchOldestAndInFlight(t *testing.T) {
	w := newWorld(t, Rule{Day: 31}, "2024-01-02", NoDate)
	w.decide = func(Due, int) Outcome { return HardDeclined }
	w.until("2024-02-29")
	require.Equal(t, Error, w.s.Period(d("2024-01-31")).Status)
	require.Equal(t, Error, w.s.Period(d("2024-02-29")).Status)
	w.day = d("2024-03-01")
	due, err := w.s.Batch(w.day, NoDate, NoDate)
	require.NoError(t, err)
	assert.Equal(t, d("2024-01-31"), due.Period, "the oldest")
	// Its answer is lost: in flight until the next collection resolves it.
	require.NoError(t, w.s.Attempted(w.day, due.Period, due.Amount, "pi_lost", Succeeded, true))
	_, err = w.s.Batch(w.day, NoDate, NoDate)
	assert.ErrorIs(t, err, ErrInFlight, "skipped and reported")
	_, err = w.s.Batch(w.day, d("2024-02-01"), NoDate)
	assert.ErrorIs(t, err, ErrInFlight, "whichever period is in range")
	w.decide = func(Due, int) Outcome { return Succeeded }
	w.jobs() // resolves it: COMPLETED
	assert.Equal(t, Completed, w.s.Period(d("2024-01-31")).Status)
	due, err = w.s.Batch(w.day, NoDate, NoDate)
	require.NoError(t, err)
	assert.Equal(t, d("2024-02-29"), due.Period, "then the next ERROR period")
}
