package oracle

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// planWorld is a world whose subscription sells "basic" at 1999.
func planWorld(t *testing.T, created string) *world {
	t.Helper()
	s, err := NewPlan(cfg, Rule{Day: 10}, "basic", 1999, NoDate, d(created))
	require.NoError(t, err)
	w := &world{t: t, s: s, day: d(created), decide: func(Due, int) Outcome { return Succeeded }}
	w.jobs()
	return w
}

func receiptsOf(s *Sub) []string {
	var out []string
	for _, r := range s.Receipts() {
		out = append(out, fmt.Sprintf("%s %s %d", r.Period, r.Plan, r.Amount))
	}
	return out
}

// docs/design.md §8 "Plan change", from the rule alone.
func TestPlanChange(t *testing.T) {
	tests := []struct {
		name string
		// at changeOn the plan becomes plan at amount; decide is Stripe.
		changeOn string
		plan     string
		amount   int64
		decide   func(due Due, n int) Outcome
		until    string
		want     []string // receipts: "period plan amount"
		// pending: pending_downgrade right after the change, and on the
		// days given.
		pendingAfter bool
		pendingOn    map[string]bool
	}{
		{name: "upgrade: the next period is charged at the new plan", changeOn: "2024-01-15", plan: "plus", amount: 2999,
			until: "2024-03-10", want: []string{"2024-01-10 basic 1999", "2024-02-10 plus 2999", "2024-03-10 plus 2999"},
			pendingOn: map[string]bool{"2024-02-09": false}},
		{name: "downgrade: pending until the first period at the new plan is charged", changeOn: "2024-01-15", plan: "lite", amount: 999,
			until: "2024-03-10", want: []string{"2024-01-10 basic 1999", "2024-02-10 lite 999", "2024-03-10 lite 999"},
			pendingAfter: true, pendingOn: map[string]bool{"2024-02-09": true, "2024-02-10": false}},
		{name: "downgrade whose first charge is declined: pending until the retry succeeds", changeOn: "2024-01-15", plan: "lite", amount: 999,
			decide: func(due Due, n int) Outcome {
				if due.Period == d("2024-02-10") && n == 2 {
					return Declined
				}
				return Succeeded
			},
			until: "2024-03-10", want: []string{"2024-01-10 basic 1999", "2024-02-10 lite 999", "2024-03-10 lite 999"},
			pendingAfter: true, pendingOn: map[string]bool{"2024-02-10": true, "2024-02-11": false}},
		{name: "a failed period awaiting its retry is retried at the new plan", changeOn: "2024-01-11", plan: "plus", amount: 2999,
			decide: func(due Due, n int) Outcome {
				if n == 1 {
					return Declined
				}
				return Succeeded
			},
			until: "2024-02-10", want: []string{"2024-01-10 plus 2999", "2024-02-10 plus 2999"}},
		{name: "same amount, new name: no downgrade", changeOn: "2024-01-15", plan: "basic-v2", amount: 1999,
			until: "2024-02-10", want: []string{"2024-01-10 basic 1999", "2024-02-10 basic-v2 1999"}},
		{name: "no change at all is no change", changeOn: "2024-01-15", plan: "basic", amount: 1999,
			until: "2024-02-10", want: []string{"2024-01-10 basic 1999", "2024-02-10 basic 1999"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := planWorld(t, "2024-01-02")
			if tc.decide != nil {
				w.decide = tc.decide
			}
			w.until(d(tc.changeOn).AddDays(-1).String())
			w.day = d(tc.changeOn)
			require.NoError(t, w.s.ChangePlan(w.day, tc.plan, tc.amount))
			assert.Equal(t, tc.pendingAfter, w.s.PendingDowngrade(), "pending_downgrade after the change")
			w.jobs()
			for w.day < d(tc.until) {
				w.day = w.day.AddDays(1)
				w.jobs()
				if want, ok := tc.pendingOn[w.day.String()]; ok {
					assert.Equal(t, want, w.s.PendingDowngrade(), "pending_downgrade on %s", w.day)
				}
			}
			assert.Equal(t, tc.want, receiptsOf(w.s))
			for _, p := range w.s.Periods() {
				if p.Charge <= w.day {
					assert.True(t, p.Status.Ended() || p.Status == Error, "period %s is %s", p.Scheduled, p.Status)
				}
			}
		})
	}
}

// A plan change across a paused period: the paused periods are skipped (not
// charged at either plan), the first after the pause is charged at the new
// plan, and a downgrade stays pending until then.
func TestPlanChangeAcrossAPause(t *testing.T) {
	w := planWorld(t, "2024-01-02")
	w.until("2024-01-15")
	require.NoError(t, w.s.Pause(w.day, 2))
	w.until("2024-02-20")
	require.NoError(t, w.s.ChangePlan(w.day, "lite", 999))
	assert.True(t, w.s.PendingDowngrade())
	w.until("2024-04-09")
	assert.True(t, w.s.PendingDowngrade(), "the paused March period charged nothing")
	w.until("2024-04-10")
	assert.False(t, w.s.PendingDowngrade())
	assert.Equal(t, []string{"2024-01-10 basic 1999", "2024-04-10 lite 999"}, receiptsOf(w.s))
	var trail []string
	for _, p := range w.s.Periods()[:4] {
		trail = append(trail, string(p.Status))
	}
	assert.Equal(t, []string{"COMPLETED", "PAUSED_SKIPPED", "PAUSED_SKIPPED", "COMPLETED"}, trail)
}

// A bank debit in flight keeps the plan it was made for: its settlement is a
// receipt of the old plan and does not end a pending downgrade.
func TestPlanChangeWhileABankDebitSettles(t *testing.T) {
	w := planWorld(t, "2024-01-02")
	w.decide = func(Due, int) Outcome { return Processing }
	w.until("2024-01-10")
	w.decide = func(Due, int) Outcome { return Succeeded }
	w.day = d("2024-01-11")
	require.NoError(t, w.s.ChangePlan(w.day, "lite", 999))
	w.jobs()
	require.NoError(t, w.s.Settled(d("2024-01-12"), "pi_1", true))
	assert.True(t, w.s.PendingDowngrade(), "the debit was made at the old plan")
	w.until("2024-02-10")
	assert.False(t, w.s.PendingDowngrade())
	assert.Equal(t, []string{"2024-01-10 basic 1999", "2024-02-10 lite 999"}, receiptsOf(w.s))
}

// Chained changes: an upgrade supersedes a pending downgrade; the same
// amount under another name keeps it; a cancelled subscription shows none
// and a reactivation shows it again.
func TestPendingDowngradeChanges(t *testing.T) {
	w := planWorld(t, "2024-01-02")
	w.until("2024-01-15")
	steps := []struct {
		do   func() error
		want bool
	}{
		{func() error { return w.s.ChangePlan(w.day, "lite", 999) }, true},
		{func() error { return w.s.ChangePlan(w.day, "lite-v2", 999) }, true},
		{func() error { return w.s.ChangePlan(w.day, "plus", 2999) }, false},
		{func() error { return w.s.ChangePlan(w.day, "lite", 999) }, true},
		{func() error { return w.s.Cancel(w.day) }, false},
		{func() error { return w.s.Reactivate(w.day, 0) }, true},
	}
	for i, st := range steps {
		require.NoError(t, st.do(), "step %d", i)
		assert.Equal(t, st.want, w.s.PendingDowngrade(), "step %d", i)
	}
}

// Refused, changing nothing.
func TestPlanChangeRefused(t *testing.T) {
	tests := []struct {
		name   string
		plan   string
		amount int64
		cancel bool
	}{
		{name: "zero amount", plan: "lite", amount: 0},
		{name: "negative amount", plan: "lite", amount: -5},
		{name: "empty SKU", plan: "", amount: 999},
		{name: "SKU with a key separator", plan: "lite#2", amount: 999},
		{name: "SKU with a slash", plan: "lite/2", amount: 999},
		{name: "SKU with a space", plan: "lite 2", amount: 999},
		{name: "cancelled subscription", plan: "lite", amount: 999, cancel: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := planWorld(t, "2024-01-02")
			w.until("2024-01-15")
			if tc.cancel {
				require.NoError(t, w.s.Cancel(w.day))
			}
			assert.ErrorIs(t, w.s.ChangePlan(w.day, tc.plan, tc.amount), ErrRefused)
			assert.Equal(t, "basic", w.s.Plan())
			assert.Equal(t, int64(1999), w.s.Amount())
			assert.False(t, w.s.PendingDowngrade())
		})
	}
}
