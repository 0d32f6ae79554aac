package billing_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
)

// Regression tests of the billing schedule, one per scenario,
// written from docs/design.md §8 "Billing schedule semantics": each runs the daily
// reminder and collection jobs over the scenario's dates against DynamoDB
// Local and the httptest Stripe, and checks what was charged, when, and
// what was announced.

// runDays runs, for every day from..to, the operations planned for that
// day (before the jobs, as an operator acting in the morning), then the
// reminder job and the collection job of that day.
func runDays(t *testing.T, e *billingtest.Env, from, to string, ops map[string]func()) {
	t.Helper()
	for day := d(from); !day.After(d(to)); day = day.AddDays(1) {
		e.Clock.SetDate(day)
		if op := ops[day.String()]; op != nil {
			op()
		}
		jobsOK(t, e, day.String())
	}
}

// jobsOK runs the day's reminder and collection jobs, rerunning each
// until its report is OK: on a loaded machine an account's lease can be
// lost mid-run, and the scenarios are about the schedule, not about that.
func jobsOK(t *testing.T, e *billingtest.Env, day string) {
	t.Helper()
	for _, job := range []func(*testing.T, *billingtest.Env, string) *billing.Report{remind, collect} {
		for i := 0; ; i++ {
			if rep := job(t, e, day); rep.OK() {
				break
			}
			require.Less(t, i, 5, "%s: the jobs stay not OK", day)
		}
	}
}

// update is UpdateSubscription, waiting out a lease a job left behind
// (ErrLocked) on a loaded machine.
func update(e *billingtest.Env, account, sub string, ch billing.Change) (billing.Subscription, error) {
	return e.Update(account, sub, ch)
}

// charge is one PaymentIntent as "<date it was made> for <period>".
func charges(e *billingtest.Env, subID string) []string {
	var out []string
	for _, pi := range e.Stripe.PIs() {
		if pi.Metadata[billing.MetaSubscription] == subID {
			out = append(out, pi.Created.UTC().Format(dates.Layout)+" for "+pi.Metadata[billing.MetaDate])
		}
	}
	return out
}

// chargeDates are the dates of the PaymentIntents made for subID.
func chargeDates(e *billingtest.Env, subID string) []string {
	var out []string
	for _, pi := range e.Stripe.PIs() {
		if pi.Metadata[billing.MetaSubscription] == subID {
			out = append(out, pi.Created.UTC().Format(dates.Layout))
		}
	}
	return out
}

// reminders are the reminders sent for subID as "<sent> for <payment date>".
func reminders(e *billingtest.Env, subID string) []string { return e.Reminders(subID) }

func TestMovePeriodDateChangesThatPeriodOnly(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		day       int
		period    string // the period moved
		to        string // its new charge date
		on        string // the day of the move
		bad       []string
		until     string
		charges   []string
		reminders []string
	}{
		{
			name: "day 1 paid Feb 1, Mar 1 moved to Feb 25 on Feb 20", day: 1,
			period: "2024-03-01", to: "2024-02-25", on: "2024-02-20", until: "2024-04-20",
			bad:     []string{"2024-02-19", "2024-04-01", "2024-04-02"}, // the past, the following period and after it
			charges: []string{"2024-02-01 for 2024-02-01", "2024-02-25 for 2024-03-01", "2024-04-01 for 2024-04-01"},
			// Feb 25's reminder day (Feb 18) had passed when it moved: at once.
			reminders: []string{"2024-01-25 for 2024-02-01", "2024-02-20 for 2024-02-25", "2024-03-25 for 2024-04-01"},
		},
		{
			name: "day 31 paid Jan 31, Feb 29 moved to Mar 5", day: 31,
			period: "2024-02-29", to: "2024-03-05", on: "2024-02-20", until: "2024-05-01",
			bad: []string{"2024-01-31", "2024-03-31"}, // the neighbours' scheduled dates
			charges: []string{"2024-01-31 for 2024-01-31", "2024-03-05 for 2024-02-29", "2024-03-31 for 2024-03-31",
				"2024-04-30 for 2024-04-30"},
			reminders: []string{"2024-01-24 for 2024-01-31", "2024-02-27 for 2024-03-05", "2024-03-24 for 2024-03-31",
				"2024-04-23 for 2024-04-30"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := billingtest.NewEnv(t, billingtest.Options{Start: time.Date(2024, 1, 20, 9, 0, 0, 0, time.UTC)})
			sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", tc.day))
			require.NoError(t, err)
			runDays(t, e, "2024-01-20", tc.until, map[string]func(){
				tc.on: func() {
					// Bad moves first: each refused, changing nothing.
					for _, bad := range tc.bad {
						_, err := update(e, "acc-1", sub.SubscriptionID, billing.Change{NextPaymentDate: d(bad)})
						assert.ErrorIs(t, err, apperr.ErrInvalid, "move to %s", bad)
					}
					got, err := update(e, "acc-1", sub.SubscriptionID, billing.Change{NextPaymentDate: d(tc.to)})
					require.NoError(t, err)
					assert.Equal(t, tc.to, got.NextPaymentDate.String())
				},
			})
			assert.Equal(t, tc.charges, charges(e, sub.SubscriptionID))
			assert.Equal(t, tc.reminders, reminders(e, sub.SubscriptionID), "one reminder per charge, before it")
			p := period(t, e, sub, tc.period)
			assert.Equal(t, billing.Completed, p.Status, "the moved period keeps its scheduled date as its identity")
		})
	}
}

func TestPeriodMovedToTodayIsAnnouncedBeforeItsCharge(t *testing.T) {
	t.Parallel()
	// Day 1 paid Feb 1; on Feb 20, after that day's reminder run, Mar 1 is
	// moved to Feb 20: the collection announces it before charging it.
	e := billingtest.NewEnv(t, billingtest.Options{Start: time.Date(2024, 1, 20, 9, 0, 0, 0, time.UTC)})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 1))
	require.NoError(t, err)
	runDays(t, e, "2024-01-20", "2024-02-19", nil)
	remind(t, e, "2024-02-20")
	_, err = update(e, "acc-1", sub.SubscriptionID, billing.Change{NextPaymentDate: d("2024-02-20")})
	require.NoError(t, err)
	rep := collect(t, e, "2024-02-20")
	assert.Equal(t, 1, rep.Reminded)
	assert.Equal(t, []string{"2024-02-01", "2024-02-20"}, chargeDates(e, sub.SubscriptionID))
	var kinds []string
	for _, a := range e.Notifier.Actions() {
		kinds = append(kinds, a.Type+" "+a.BillingDate)
	}
	assert.Equal(t, []string{billing.ActionReminderDue + " 2024-02-01", billing.ActionPaymentCompleted + " 2024-02-01",
		billing.ActionReminderDue + " 2024-02-20", billing.ActionPaymentCompleted + " 2024-03-01"}, kinds)
	runDays(t, e, "2024-02-21", "2024-02-29", nil)
	assert.Len(t, reminders(e, sub.SubscriptionID), 2, "announced once (the next, for Apr 1, goes on Mar 25)")
}

func TestChangePaymentDayKeepsOneTermFromLastCharge(t *testing.T) {
	t.Parallel()
	// Day 31 paid Jan 31, changed to day 2 on Feb 1: the next charge is
	// the first day 2 at least one term after Jan 31 (Feb 29): Mar 2.
	e := billingtest.NewEnv(t, billingtest.Options{Start: time.Date(2024, 1, 20, 9, 0, 0, 0, time.UTC)})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 31))
	require.NoError(t, err)
	runDays(t, e, "2024-01-20", "2024-04-03", map[string]func(){
		"2024-02-01": func() {
			day := 2
			got, err := update(e, "acc-1", sub.SubscriptionID, billing.Change{PaymentDay: &day})
			require.NoError(t, err)
			assert.Equal(t, "2024-03-02", got.NextPaymentDate.String())
			assert.Equal(t, "2024-02-24", got.NextReminderDate.String())
		},
	})
	assert.Equal(t, []string{"2024-01-31", "2024-03-02", "2024-04-02"}, chargeDates(e, sub.SubscriptionID))
	assert.Equal(t, []string{"2024-01-24 for 2024-01-31", "2024-02-24 for 2024-03-02", "2024-03-26 for 2024-04-02"},
		reminders(e, sub.SubscriptionID))

	t.Run("a waived period keeps its distance too", func(t *testing.T) {
		t.Parallel()
		e := billingtest.NewEnv(t, billingtest.Options{Start: time.Date(2024, 1, 20, 9, 0, 0, 0, time.UTC)})
		sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 31))
		require.NoError(t, err)
		collect(t, e, "2024-01-31")
		e.Clock.SetDate(d("2024-02-01"))
		_, err = update(e, "acc-1", sub.SubscriptionID, billing.Change{Action: "waive", BillingDate: d("2024-02-29")})
		require.NoError(t, err)
		e.Clock.SetDate(d("2024-03-02"))
		day := 11
		got, err := update(e, "acc-1", sub.SubscriptionID, billing.Change{PaymentDay: &day})
		require.NoError(t, err)
		assert.Equal(t, "2024-04-11", got.NextPaymentDate.String(), "one term after the waived Feb 29")
	})
	t.Run("Friday billing: a term is four weeks", func(t *testing.T) {
		t.Parallel()
		e := billingtest.NewEnv(t, billingtest.Options{})
		in := billingtest.Input("gold", 0)
		in.BillingWeek = 5
		sub, err := e.Service.CreateSubscription(ctx, "acc-1", in)
		require.NoError(t, err)
		collect(t, e, "2024-01-26")
		e.Clock.SetDate(d("2024-01-27"))
		week := 4
		got, err := update(e, "acc-1", sub.SubscriptionID, billing.Change{BillingWeek: &week})
		require.NoError(t, err)
		assert.Equal(t, "2024-02-23", got.NextPaymentDate.String(), "28 days after Jan 26")
	})
	t.Run("nothing charged yet: the first new day after today", func(t *testing.T) {
		t.Parallel()
		e := billingtest.NewEnv(t, billingtest.Options{Start: time.Date(2024, 1, 20, 9, 0, 0, 0, time.UTC)})
		sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 31))
		require.NoError(t, err)
		day := 25
		got, err := update(e, "acc-1", sub.SubscriptionID, billing.Change{PaymentDay: &day})
		require.NoError(t, err)
		assert.Equal(t, "2024-01-25", got.NextPaymentDate.String())
	})
}

func TestPauseFridayOneMonthSkipsOnePeriod(t *testing.T) {
	t.Parallel()
	// Friday billing (first and last Friday), created in each of 24 months;
	// paused for one month the day after its first charge. Exactly one
	// period is skipped, and the ones after it keep their dates.
	cfg := billingtest.TestConfig()
	cfg.Shards = 1
	e := billingtest.NewEnv(t, billingtest.Options{Config: cfg})
	type planned struct {
		sub   billing.Subscription
		rule  dates.Rule
		first dates.Date
	}
	var subs []planned
	create := map[string][]func(){}
	pause := map[string][]func(){}
	for m := range 24 {
		start := dates.New(2024, time.Month(1+m), 1)
		for _, week := range []int{1, 5} {
			create[start.String()] = append(create[start.String()], func() {
				in := billingtest.Input("gold", 0)
				in.BillingWeek = week
				in.SubscriptionID = fmt.Sprintf("fri-%s-w%d", start, week)
				sub, err := e.Service.CreateSubscription(ctx, "acc-"+in.SubscriptionID, in)
				require.NoError(t, err)
				pl := planned{sub: sub, rule: sub.Rule(), first: sub.NextPaymentDate}
				subs = append(subs, pl)
				after := pl.first.AddDays(1).String()
				pause[after] = append(pause[after], func() {
					got, err := update(e, sub.AccountID, sub.SubscriptionID, billing.Change{Action: "pause", Months: 1})
					require.NoError(t, err)
					assert.Equal(t, pl.rule.Next(pl.rule.Next(pl.first)).String(), got.NextPaymentDate.String(),
						"%s: the next charge is the period after the skipped one", sub.SubscriptionID)
				})
			})
		}
	}
	for day := d("2024-01-01"); !day.After(d("2026-03-31")); day = day.AddDays(1) {
		e.Clock.SetDate(day)
		for _, f := range create[day.String()] {
			f()
		}
		for _, f := range pause[day.String()] {
			f()
		}
		if day.Weekday() == time.Friday || len(create[day.String()]) > 0 {
			jobsOK(t, e, day.String())
		}
	}
	require.Len(t, subs, 48)
	for _, pl := range subs {
		second := pl.rule.Next(pl.first)
		third, fourth := pl.rule.Next(second), pl.rule.Next(pl.rule.Next(second))
		got := charges(e, pl.sub.SubscriptionID)
		want := []string{pl.first.String() + " for " + pl.first.String(), third.String() + " for " + third.String(),
			fourth.String() + " for " + fourth.String()}
		if assert.GreaterOrEqual(t, len(got), 3, pl.sub.SubscriptionID) {
			assert.Equal(t, want, got[:3], "%s: one period skipped, the others on their dates", pl.sub.SubscriptionID)
		}
		assert.Equal(t, billing.PausedSkipped, period(t, e, pl.sub, second.String()).Status, pl.sub.SubscriptionID)
	}
}

func TestManualResumeRemindsBeforeEachCharge(t *testing.T) {
	t.Parallel()
	// Day 10, paid Jan 10, paused for 6 months on Jan 12, resumed by hand
	// on Feb 20: Feb 10 is skipped; Mar, Apr and May are charged, each
	// announced BILLING_REMINDER_DAYS (7) before.
	e := billingtest.NewEnv(t, billingtest.Options{})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	runDays(t, e, "2024-01-01", "2024-05-15", map[string]func(){
		"2024-01-12": func() {
			_, err := update(e, "acc-1", sub.SubscriptionID, billing.Change{Action: "pause", Months: 6})
			require.NoError(t, err)
		},
		"2024-02-20": func() {
			got, err := update(e, "acc-1", sub.SubscriptionID, billing.Change{Action: "resume"})
			require.NoError(t, err)
			assert.Equal(t, billing.SubActive, got.Status)
			assert.Equal(t, "2024-03-10", got.NextPaymentDate.String())
			assert.Equal(t, "2024-03-03", got.NextReminderDate.String())
		},
	})
	assert.Equal(t, []string{"2024-01-10", "2024-03-10", "2024-04-10", "2024-05-10"}, chargeDates(e, sub.SubscriptionID))
	assert.Equal(t, []string{"2024-01-03 for 2024-01-10", "2024-03-03 for 2024-03-10", "2024-04-03 for 2024-04-10",
		"2024-05-03 for 2024-05-10"}, reminders(e, sub.SubscriptionID))
	assert.Equal(t, billing.PausedSkipped, period(t, e, sub, "2024-02-10").Status)

	t.Run("a reminder day already passed at the resume goes out at once", func(t *testing.T) {
		t.Parallel()
		e := billingtest.NewEnv(t, billingtest.Options{})
		sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
		require.NoError(t, err)
		runDays(t, e, "2024-01-01", "2024-03-12", map[string]func(){
			"2024-01-12": func() {
				_, err := update(e, "acc-1", sub.SubscriptionID, billing.Change{Action: "pause", Months: 3})
				require.NoError(t, err)
			},
			"2024-02-07": func() {
				_, err := update(e, "acc-1", sub.SubscriptionID, billing.Change{Action: "resume"})
				require.NoError(t, err)
			},
		})
		assert.Equal(t, []string{"2024-01-10", "2024-02-10", "2024-03-10"}, chargeDates(e, sub.SubscriptionID))
		assert.Equal(t, []string{"2024-01-03 for 2024-01-10", "2024-02-07 for 2024-02-10", "2024-03-03 for 2024-03-10"},
			reminders(e, sub.SubscriptionID))
	})
}

func TestChangeWhilePausedAppliesAfterEarlyResume(t *testing.T) {
	t.Parallel()
	// Day 10 at 1999, paid Jan 10, paused for 3 months on Jan 12; on Jan
	// 20 the amount becomes 500 and the payment method pm_new; resumed on
	// Feb 1: Feb 10 and Mar 10 are charged 500 on pm_new.
	e := billingtest.NewEnv(t, billingtest.Options{})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	runDays(t, e, "2024-01-01", "2024-03-11", map[string]func(){
		"2024-01-12": func() {
			_, err := update(e, "acc-1", sub.SubscriptionID, billing.Change{Action: "pause", Months: 3})
			require.NoError(t, err)
		},
		"2024-01-20": func() {
			amount, pm := int64(500), "pm_new"
			got, err := update(e, "acc-1", sub.SubscriptionID, billing.Change{Amount: &amount, PaymentMethod: &pm})
			require.NoError(t, err)
			assert.Equal(t, billing.SubPaused, got.Status)
		},
		"2024-02-01": func() {
			_, err := update(e, "acc-1", sub.SubscriptionID, billing.Change{Action: "resume"})
			require.NoError(t, err)
		},
	})
	var got []string
	for _, pi := range e.Stripe.PIs() {
		got = append(got, fmt.Sprintf("%s %d %s", pi.Metadata[billing.MetaDate], pi.Amount, pi.PaymentMethod))
	}
	assert.Equal(t, []string{"2024-01-10 1999 pm_ok", "2024-02-10 500 pm_new", "2024-03-10 500 pm_new"}, got)
	for _, a := range e.Notifier.Actions() {
		if a.Type == billing.ActionReminderDue && a.BillingDate != "2024-01-10" {
			assert.Equal(t, int64(500), a.Amount, "the reminder announces the new amount")
		}
	}
}

// historyItems reads the raw history table: every stored entry by key.
func historyItems(t *testing.T, e *billingtest.Env) map[string]map[string]any {
	t.Helper()
	out, err := e.DB.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(e.History), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	items := map[string]map[string]any{}
	for _, raw := range out.Items {
		var it map[string]any
		require.NoError(t, attributevalue.UnmarshalMap(raw, &it))
		items[fmt.Sprint(it["PK"], "|", it["SK"])] = it
	}
	return items
}

func TestHistoryIsAppendOnly(t *testing.T) {
	t.Parallel()
	// Day 15 → 20 → 15 before the first charge, then charged: every change
	// adds an entry and no entry is ever rewritten or removed.
	e := billingtest.NewEnv(t, billingtest.Options{})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 15))
	require.NoError(t, err)
	seen := historyItems(t, e)
	require.Len(t, seen, 1)
	step := func(name string, f func()) {
		t.Helper()
		f()
		now := historyItems(t, e)
		for k, it := range seen {
			if assert.Contains(t, now, k, "%s: entry %s removed", name, k) {
				assert.Equal(t, it, now[k], "%s: entry %s rewritten", name, k)
			}
		}
		assert.Greater(t, len(now), len(seen), "%s: a change adds an entry", name)
		seen = now
	}
	for i, day := range []int{20, 15} {
		step(fmt.Sprintf("payment day %d", day), func() {
			e.Clock.SetDate(d("2024-01-02"))
			got, err := update(e, "acc-1", sub.SubscriptionID, billing.Change{PaymentDay: &day})
			require.NoError(t, err, i)
			assert.Equal(t, fmt.Sprintf("2024-01-%d", day), got.NextPaymentDate.String())
		})
	}
	step("charged", func() { collect(t, e, "2024-01-15") })

	h := history(t, e, sub)
	var jan15 []string
	for _, x := range h {
		if x.BillingDate.String() == "2024-01-15" {
			jan15 = append(jan15, string(x.Status)+" "+x.UpdatedEvent)
		}
	}
	require.NotEmpty(t, jan15)
	assert.Equal(t, "SCHEDULED created", jan15[0], "the original entry is still there")
	assert.Equal(t, "COMPLETED completed", jan15[len(jan15)-1])
	assert.Len(t, jan15, 4, "created, replaced by day 20, back with day 15, completed: %v", jan15)
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	assert.Len(t, h, len(keys), "the API lists every stored entry")
}

// Two periods charged on one date each get their reminder: a period moved to
// Feb 26 and announced, then replaced by a payment-day change whose new
// period is also on Feb 26 (docs/design.md §8 Reminders: one per period that will be
// charged, at once when its day has passed; oracle F16).
func TestNewPeriodOnAMovedPeriodsDateIsAnnouncedToo(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{Start: time.Date(2024, 1, 20, 9, 0, 0, 0, time.UTC)})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 15))
	require.NoError(t, err)
	runDays(t, e, "2024-01-20", "2024-02-27", map[string]func(){
		"2024-02-13": func() {
			_, err := update(e, "acc-1", sub.SubscriptionID, billing.Change{NextPaymentDate: d("2024-02-26")})
			require.NoError(t, err)
		},
		"2024-02-25": func() {
			_, err := update(e, "acc-1", sub.SubscriptionID, billing.Change{PaymentDay: ptr(26)})
			require.NoError(t, err)
		},
	})
	assert.Equal(t, []string{"2024-02-26 for 2024-02-26"}, charges(e, sub.SubscriptionID))
	assert.Equal(t, []string{"2024-02-08 for 2024-02-15", "2024-02-19 for 2024-02-26", "2024-02-25 for 2024-02-26"},
		reminders(e, sub.SubscriptionID))
}

// docs/design.md §8 Reminders: "none for a skipped, waived or cancelled period". A
// period waived ahead of the cursor (it exists SCHEDULED again after an
// early resume) gets no reminder, even when the reminder of the period
// before it goes out first and the reminder moves on to it before its
// predecessor is charged (that predecessor was moved later, Feb 10 to Mar 5,
// past the waived Mar 10's reminder day, Mar 3).
func TestPeriodWaivedAheadIsNeverAnnounced(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	change := func(ch billing.Change) func() {
		return func() {
			_, err := update(e, "acc-1", sub.SubscriptionID, ch)
			require.NoError(t, err)
		}
	}
	runDays(t, e, "2024-01-01", "2024-04-15", map[string]func(){
		"2024-01-12": change(billing.Change{Action: "pause", Months: 3}), // Feb, Mar, Apr 10
		"2024-01-15": change(billing.Change{Action: "resume"}),           // all three SCHEDULED again
		"2024-01-16": change(billing.Change{Action: "waive", BillingDate: d("2024-03-10")}),
		"2024-01-17": change(billing.Change{NextPaymentDate: d("2024-03-05")}), // Feb 10's charge
	})
	assert.Equal(t, []string{"2024-01-10 for 2024-01-10", "2024-03-05 for 2024-02-10", "2024-04-10 for 2024-04-10"},
		charges(e, sub.SubscriptionID))
	assert.Equal(t, []string{"2024-01-03 for 2024-01-10", "2024-02-27 for 2024-03-05", "2024-04-03 for 2024-04-10"},
		reminders(e, sub.SubscriptionID), "no reminder for the waived Mar 10")
	assert.Equal(t, billing.Waived, period(t, e, sub, "2024-03-10").Status)
}
