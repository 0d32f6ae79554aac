package oracle

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docs/design.md §8 "One successful charge per period, also when the customer pays
// an old PaymentIntent": the customer may pay a payable PaymentIntent of a
// period at any time; the rules cancel the payable ones before a new
// attempt and when the period is waived or cancelled or its amount changes.
func TestCustomerPaysAnOldPaymentIntent(t *testing.T) {
	declined := func(n int) Outcome { return map[bool]Outcome{true: Declined, false: Succeeded}[n <= 1] }
	tests := []struct {
		name   string
		before func(w *world)
		pay    string
		refuse bool
		want   []Status // the period's trail after
		amount int64    // of its receipt, when collected
	}{
		{"an ERROR period: collected at the attempt's amount", nil, "pi_1", false, []Status{Scheduled, Error, Completed}, 1999},
		{"after an amount change: cancelled", func(w *world) { require.NoError(t, w.s.ChangeAmount(w.day, 900)) }, "pi_1", true,
			[]Status{Scheduled, Error}, 0},
		{"after the next attempt: cancelled", func(w *world) { w.until("2024-01-06") }, "pi_1", true,
			[]Status{Scheduled, Error, Completed}, 0},
		{"after a waive: cancelled", func(w *world) { require.NoError(t, w.s.Waive(w.day, d("2024-01-05"))) }, "pi_1", true,
			[]Status{Scheduled, Error, Waived}, 0},
		{"after a cancel: cancelled", func(w *world) { require.NoError(t, w.s.Cancel(w.day)) }, "pi_1", true,
			[]Status{Scheduled, Error, Cancelled}, 0},
		{"a STALE period: a late payment", func(w *world) {
			w.decide = func(Due, int) Outcome { return Declined }
			w.until("2024-02-04")
		}, "pi_5", false, []Status{Scheduled, Error, Stale, Completed}, 1999},
		{"the charge that succeeded is not payable", func(w *world) { w.until("2024-01-06") }, "pi_2", true,
			[]Status{Scheduled, Error, Completed}, 0},
		{"no such PaymentIntent", nil, "pi_9", true, []Status{Scheduled, Error}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, Rule{Day: 5}, "2024-01-02", NoDate)
			w.decide = func(_ Due, n int) Outcome { return declined(n) }
			w.until("2024-01-05")
			if tc.before != nil {
				tc.before(w)
			}
			receipts := len(w.s.Receipts())
			got, err := w.s.CustomerPays(w.day, tc.pay)
			p := w.s.Period(d("2024-01-05"))
			assert.Equal(t, tc.want, p.Trail)
			if tc.refuse {
				assert.ErrorIs(t, err, ErrRefused)
				assert.False(t, w.s.Payable(tc.pay))
				assert.Len(t, w.s.Receipts(), receipts)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, PayCollected, got)
			require.Len(t, w.s.Receipts(), receipts+1)
			r := w.s.Receipts()[receipts]
			assert.Equal(t, Receipt{Period: d("2024-01-05"), PI: tc.pay, Amount: tc.amount, Processed: w.day}, r)
			_, again := w.s.CustomerPays(w.day, tc.pay)
			assert.ErrorIs(t, again, ErrRefused, "paid once")
			for _, due := range w.s.Collect(w.day.AddDays(2)) {
				assert.NotEqual(t, d("2024-01-05"), due.Period, "no retry of a collected period")
			}
		})
	}
}

// An amount change after the decline: the receipt is the attempt's amount,
// the one the PaymentIntent was made with, not the period's today; and a
// payment of a PaymentIntent the service could not cancel (Stripe did not
// answer) for a period that has ended is refunded, changing nothing else.
func TestCustomerPaymentAmountAndRefund(t *testing.T) {
	w := newWorld(t, Rule{Day: 5}, "2024-01-02", NoDate)
	w.decide = func(Due, int) Outcome { return Declined }
	w.until("2024-01-05")
	require.NoError(t, w.s.ChangeAmount(w.day, 900))
	a := &w.s.Period(d("2024-01-05")).Attempts[0]
	a.Cancelled = false // the cancel was not answered
	got, err := w.s.CustomerPays(w.day, "pi_1")
	require.NoError(t, err)
	assert.Equal(t, PayCollected, got)
	assert.Equal(t, int64(1999), w.s.Receipts()[0].Amount, "the attempt's amount")

	w.decide = func(Due, int) Outcome { return Declined }
	w.until("2024-02-05")
	require.NoError(t, w.s.Waive(w.day, d("2024-02-05")))
	w.s.Period(d("2024-02-05")).Attempts[0].Cancelled = false
	got, err = w.s.CustomerPays(w.day, "pi_2")
	require.NoError(t, err)
	assert.Equal(t, PayRefunded, got)
	assert.Equal(t, []string{"pi_2"}, w.s.DuplicateRefunds())
	assert.Equal(t, Waived, w.s.Period(d("2024-02-05")).Status)
	assert.Len(t, w.s.Receipts(), 1)
}
