package billing_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// docs/design.md §8 "Rule change (new payment day or term)": periods charged or in
// flight stay; the next period is the first date of the new rule at least
// one term after the last charged period's scheduled date (none charged:
// the first one after T and on or after start_date); no two periods are
// ever less than one term apart because of a change. "One term" is the
// term of that kept period (docs/design.md "Choices made where the contract is
// silent"): the period paid for one term of its own rule, and the new
// rule starts when that term ends. So MONTHLY → YEARLY bills the year from
// the month after the last monthly charge, and YEARLY → MONTHLY keeps the
// paid year before monthly charges begin.
func TestTermChange(t *testing.T) {
	t.Parallel()
	type step struct {
		day  string
		op   string // "collect", "change", "waive"
		ch   billing.Change
		next string // after a change: the next payment date ("" with err)
		err  error
	}
	yearly, monthly := ptr(dates.Yearly), ptr(dates.Monthly)
	tests := []struct {
		name    string
		start   string
		in      func(*billing.CreateInput)
		steps   []step
		charges []string
		final   string // next payment date at the end
		ach     bool   // charges are bank debits: ACHSENT until a webhook (none here)
		kept    map[string]billing.Status
	}{
		{
			name: "MONTHLY to YEARLY: a month after the last charge, then yearly", start: "2024-01-10",
			in: func(*billing.CreateInput) {},
			steps: []step{
				{day: "2024-01-15", op: "collect"},
				{day: "2024-01-20", op: "change", ch: billing.Change{Term: yearly}, next: "2024-02-15"},
				{day: "2024-02-15", op: "collect"},
				{day: "2025-02-15", op: "collect"},
			},
			charges: []string{"2024-01-15", "2024-02-15", "2025-02-15"}, final: "2026-02-15",
		},
		{
			name: "YEARLY to MONTHLY: the paid year is kept", start: "2024-03-01",
			in: func(in *billing.CreateInput) { in.Term, in.PaymentDay = dates.Yearly, 10 },
			steps: []step{
				{day: "2024-03-10", op: "collect"},
				{day: "2024-06-01", op: "change", ch: billing.Change{Term: monthly}, next: "2025-03-10"},
				{day: "2025-03-10", op: "collect"},
				{day: "2025-04-10", op: "collect"},
			},
			charges: []string{"2024-03-10", "2025-03-10", "2025-04-10"}, final: "2025-05-10",
		},
		{
			name: "nothing charged: the first date after today, on or after start_date", start: "2024-01-10",
			in: func(in *billing.CreateInput) { in.StartDate = d("2024-05-20") },
			steps: []step{
				{day: "2024-01-12", op: "change", ch: billing.Change{Term: yearly}, next: "2024-06-15"},
				{day: "2024-06-15", op: "collect"},
			},
			charges: []string{"2024-06-15"}, final: "2025-06-15",
		},
		{
			name: "back and forth before the next charge: the term of the charged period", start: "2024-01-10",
			in: func(*billing.CreateInput) {},
			steps: []step{
				{day: "2024-01-15", op: "collect"},
				{day: "2024-01-20", op: "change", ch: billing.Change{Term: yearly}, next: "2024-02-15"},
				{day: "2024-01-25", op: "change", ch: billing.Change{Term: monthly}, next: "2024-02-15"},
				{day: "2024-02-15", op: "collect"},
			},
			charges: []string{"2024-01-15", "2024-02-15"}, final: "2024-03-15",
		},
		{
			name: "term and payment day at once", start: "2024-01-10",
			in: func(*billing.CreateInput) {},
			steps: []step{
				{day: "2024-01-15", op: "collect"},
				{day: "2024-01-20", op: "change", ch: billing.Change{Term: yearly, PaymentDay: ptr(3)}, next: "2024-03-03"},
				{day: "2024-03-03", op: "collect"},
			},
			charges: []string{"2024-01-15", "2024-03-03"}, final: "2025-03-03",
		},
		{
			name: "Friday billing is monthly: YEARLY needs a payment day; a Friday period's term is four weeks", start: "2024-01-01",
			in: func(in *billing.CreateInput) { in.PaymentDay, in.BillingWeek = 0, 5 },
			steps: []step{
				{day: "2024-01-26", op: "collect"},
				{day: "2024-01-27", op: "change", ch: billing.Change{Term: yearly}, err: apperr.ErrInvalid},
				{day: "2024-01-27", op: "change", ch: billing.Change{Term: ptr(dates.Term("WEEKLY"))}, err: apperr.ErrInvalid},
				// Four weeks after Jan 26 is Feb 23: the first day 20 on or after it.
				{day: "2024-01-28", op: "change", ch: billing.Change{Term: yearly, PaymentDay: ptr(20)}, next: "2024-03-20"},
				{day: "2024-03-20", op: "collect"},
			},
			charges: []string{"2024-01-26", "2024-03-20"}, final: "2025-03-20",
		},
		{
			name: "a payment in flight (ACHSENT) stays, and anchors the change", start: "2024-01-10", ach: true,
			in: func(*billing.CreateInput) {},
			steps: []step{
				{day: "2024-01-15", op: "collect"},
				{day: "2024-01-20", op: "change", ch: billing.Change{Term: yearly}, next: "2024-02-15"},
			},
			charges: []string{"2024-01-15"}, final: "2024-02-15", kept: map[string]billing.Status{"2024-01-15": billing.ACHSent},
		},
		{
			name: "a waived YEARLY period keeps its year too", start: "2024-03-01",
			in: func(in *billing.CreateInput) { in.Term, in.PaymentDay = dates.Yearly, 10 },
			steps: []step{
				{day: "2024-03-02", op: "waive", ch: billing.Change{Action: "waive", BillingDate: d("2024-03-10")}},
				{day: "2024-04-01", op: "change", ch: billing.Change{Term: monthly}, next: "2025-03-10"},
				{day: "2025-03-10", op: "collect"},
			},
			charges: []string{"2025-03-10"}, final: "2025-04-10",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := d(tc.start)
			e := billingtest.NewEnv(t, billingtest.Options{Start: start.Time().Add(9 * time.Hour)})
			if tc.ach {
				e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior { return stripetest.Process }
			}
			in := billingtest.Input("gold", 15)
			tc.in(&in)
			sub, err := e.Service.CreateSubscription(ctx, "acc-1", in)
			require.NoError(t, err)
			for _, st := range tc.steps {
				switch st.op {
				case "collect":
					require.True(t, collect(t, e, st.day).OK(), st.day)
				case "waive":
					e.Clock.SetDate(d(st.day))
					_, err := update(e, "acc-1", sub.SubscriptionID, st.ch)
					require.NoError(t, err)
				case "change":
					e.Clock.SetDate(d(st.day))
					before, err := e.Service.GetSubscription(ctx, "acc-1", sub.SubscriptionID)
					require.NoError(t, err)
					periodsBefore, err := e.Store.ListPeriods(ctx, "acc-1", sub.SubscriptionID)
					require.NoError(t, err)
					got, err := update(e, "acc-1", sub.SubscriptionID, st.ch)
					if st.err != nil {
						require.ErrorIs(t, err, st.err, st.day)
						after, err := e.Service.GetSubscription(ctx, "acc-1", sub.SubscriptionID)
						require.NoError(t, err)
						assert.Equal(t, before, after, "%s: a refused change changes nothing", st.day)
						periodsAfter, err := e.Store.ListPeriods(ctx, "acc-1", sub.SubscriptionID)
						require.NoError(t, err)
						assert.Equal(t, periodsBefore, periodsAfter, "%s: a refused change changes nothing", st.day)
						continue
					}
					require.NoError(t, err, st.day)
					assert.Equal(t, st.next, got.NextPaymentDate.String(), st.day)
					if st.ch.Term != nil {
						assert.Equal(t, *st.ch.Term, got.Term)
					}
					// The new date is announced.
					assert.Equal(t, dates.ReminderDate(d(st.next), e.Service.Config().ReminderDays, d(st.day)), got.NextReminderDate, st.day)
					// The old rule's next period is replaced (CANCELLED) unless the new rule lands on it.
					if old := before.NextPeriodDate; old.String() != st.next {
						assert.Equal(t, billing.Cancelled, period(t, e, sub, old.String()).Status, "%s: old next period %s", st.day, old)
					}
				}
			}
			assert.Equal(t, tc.charges, chargeDates(e, sub.SubscriptionID))
			got, err := e.Service.GetSubscription(ctx, "acc-1", sub.SubscriptionID)
			require.NoError(t, err)
			assert.Equal(t, tc.final, got.NextPaymentDate.String())
			for date, status := range tc.kept {
				assert.Equal(t, status, period(t, e, sub, date).Status, date)
			}
		})
	}
}

// docs/design.md §8 "Rule change": the periods of the new rule are its dates; a
// record of the old rule on a date the new rule also has (day 28 → 29
// meets Feb 28 again) is a period to charge, not CANCELLED, and one an
// earlier change replaced is scheduled again when a change brings its date
// back (records ahead of the cursor exist after a pause and a resume).
func TestRuleChangeKeepsPeriodsOnDatesOfTheNewRule(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{Start: time.Date(2024, 11, 1, 9, 0, 0, 0, time.UTC)})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 28))
	require.NoError(t, err)
	status := func(date string) billing.Status { return period(t, e, sub, date).Status }
	for _, st := range []struct {
		day string
		ch  billing.Change
	}{
		{"2024-11-02", billing.Change{Action: "pause", Months: 4}}, // records Nov 28 … Feb 28
		{"2024-11-03", billing.Change{Action: "resume"}},
		{"2024-11-04", billing.Change{PaymentDay: ptr(29)}},
	} {
		e.Clock.SetDate(d(st.day))
		_, err := update(e, "acc-1", sub.SubscriptionID, st.ch)
		require.NoError(t, err, st.day)
	}
	assert.Equal(t, billing.Cancelled, status("2024-12-28"))
	assert.Equal(t, billing.Scheduled, status("2025-02-28"), "day 29 in February 2025 is Feb 28")
	e.Clock.SetDate(d("2024-11-05"))
	got, err := update(e, "acc-1", sub.SubscriptionID, billing.Change{PaymentDay: ptr(28)})
	require.NoError(t, err)
	assert.Equal(t, "2024-11-28", got.NextPaymentDate.String())
	for _, date := range []string{"2024-11-28", "2024-12-28", "2025-01-28", "2025-02-28"} {
		assert.Equal(t, billing.Scheduled, status(date), date)
	}
	assert.Equal(t, billing.Cancelled, status("2024-11-29"), "the only record of the day-29 rule")
}
