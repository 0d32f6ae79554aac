package oracle

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var cfg = Config{ReminderDays: 7, RetryDays: []int{1, 3, 5, 7}, StaleDays: 30}

func d(s string) Date { return MustParse(s) }

// world runs a model through days as a perfect service would: reminders
// sent on the first day they may go out, charges made as Collect says, with
// outcomes from decide.
type world struct {
	t       *testing.T
	s       *Sub
	day     Date
	n       int
	charges []string // "charge-date period amount"
	remind  []string // "sent-day pay-date"
	decide  func(due Due, n int) Outcome
}

func newWorld(t *testing.T, rule Rule, created string, start Date) *world {
	s, err := New(cfg, rule, 1999, start, d(created))
	require.NoError(t, err)
	w := &world{t: t, s: s, day: d(created), decide: func(Due, int) Outcome { return Succeeded }}
	w.jobs()
	return w
}

// jobs runs the current day's remind and collect.
func (w *world) jobs() {
	for _, r := range w.s.reminders {
		if r.Sent == NoDate && r.From == w.day {
			require.NoError(w.t, w.s.Sent(w.day, r.PayDate))
			w.remind = append(w.remind, fmt.Sprintf("%s %s", w.day, r.PayDate))
		}
	}
	for _, due := range w.s.Collect(w.day) {
		w.n++
		o := w.decide(due, w.n)
		require.NoError(w.t, w.s.Attempted(w.day, due.Period, due.Amount, fmt.Sprintf("pi_%d", w.n), o, false))
		w.charges = append(w.charges, fmt.Sprintf("%s %s %d", w.day, due.Period, due.Amount))
	}
	assert.Empty(w.t, w.s.Missing(w.day), "a perfect service misses no reminder")
}

// until runs every day after the current one up to and including to.
func (w *world) until(to string) {
	for w.day < d(to) {
		w.day = w.day.AddDays(1)
		w.jobs()
	}
}

func (w *world) chargeDays() []string {
	var out []string
	for _, c := range w.charges {
		out = append(out, c[:10])
	}
	return out
}

func TestRuleDates(t *testing.T) {
	tests := []struct {
		name string
		rule Rule
		from string
		want []string
	}{
		{"day 31 clamps to each month", Rule{Day: 31}, "2024-01-01",
			[]string{"2024-01-31", "2024-02-29", "2024-03-31", "2024-04-30", "2024-05-31"}},
		{"day 30 in a common year", Rule{Day: 30}, "2025-01-31",
			[]string{"2025-02-28", "2025-03-30", "2025-04-30"}},
		{"day 29", Rule{Day: 29}, "2023-01-30", []string{"2023-02-28", "2023-03-29"}},
		{"yearly Feb 29 in and out of leap years", Rule{Term: Yearly, Day: 29, Month: time.February}, "2024-01-01",
			[]string{"2024-02-29", "2025-02-28", "2026-02-28", "2027-02-28", "2028-02-29"}},
		{"yearly takes its month from the first date", Rule{Term: Yearly, Day: 10}, "2024-05-11",
			[]string{"2024-06-10", "2025-06-10"}},
		{"first Friday", Rule{Week: 1}, "2024-01-01", []string{"2024-01-05", "2024-02-02", "2024-03-01"}},
		// 2024: March has five Fridays (1, 8, 15, 22, 29), April four (5 … 26).
		{"fifth Friday, else the last", Rule{Week: 5}, "2024-03-01", []string{"2024-03-29", "2024-04-26", "2024-05-31"}},
		{"fourth Friday", Rule{Week: 4}, "2024-03-01", []string{"2024-03-22", "2024-04-26"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := []string{}
			first, r := tc.rule.OnOrAfter(d(tc.from))
			for x := first; len(got) < len(tc.want); x = r.After(x) {
				got = append(got, x.String())
			}
			assert.Equal(t, tc.want, got)
		})
	}
	assert.Equal(t, "2024-02-29", AddMonths(d("2024-01-31"), 1).String(), "one term after Jan 31")
	assert.Equal(t, "2025-02-28", AddMonths(d("2024-02-29"), 12).String())
}

func TestCreateChargesOnTheRuleDatesWithRemindersBefore(t *testing.T) {
	w := newWorld(t, Rule{Day: 31}, "2024-01-10", NoDate)
	w.until("2024-04-30")
	assert.Equal(t, []string{"2024-01-31", "2024-02-29", "2024-03-31", "2024-04-30"}, w.chargeDays())
	assert.Equal(t, []string{"2024-01-24 2024-01-31", "2024-02-22 2024-02-29", "2024-03-24 2024-03-31",
		"2024-04-23 2024-04-30"}, w.remind)
	assert.Len(t, w.s.Receipts(), 4)
}

func TestFirstPeriodIsAfterTodayAndOnOrAfterStart(t *testing.T) {
	w := newWorld(t, Rule{Day: 15}, "2024-01-15", NoDate)
	w.until("2024-02-15")
	assert.Equal(t, []string{"2024-02-15"}, w.chargeDays(), "not on the day of creation")
	// The reminder day had passed when it was scheduled: at once.
	w = newWorld(t, Rule{Day: 5}, "2024-03-03", d("2024-04-01"))
	w.until("2024-05-05")
	assert.Equal(t, []string{"2024-04-05", "2024-05-05"}, w.chargeDays())
	w = newWorld(t, Rule{Day: 10}, "2024-03-03", NoDate)
	assert.Equal(t, []Reminder{{Period: d("2024-03-10"), PayDate: d("2024-03-10"), From: d("2024-03-03"), To: d("2024-03-04"), Sent: d("2024-03-03")}},
		w.s.Reminders()[:1], "its reminder day is today: today's job may have run, so today or tomorrow")
	w = newWorld(t, Rule{Day: 5}, "2024-03-03", NoDate)
	w.until("2024-03-05")
	assert.Equal(t, []string{"2024-03-03 2024-03-05"}, w.remind, "reminder at once")
	assert.Equal(t, []Reminder{{Period: d("2024-03-05"), PayDate: d("2024-03-05"), From: d("2024-03-03"), To: d("2024-03-04"), Sent: d("2024-03-03")}},
		w.s.Reminders()[:1])
}

func TestMoveOnePeriodKeepsTheOthers(t *testing.T) {
	// Day 1, paid Feb 1, Mar 1 moved to Feb 25 on Feb 20.
	w := newWorld(t, Rule{Day: 1}, "2024-01-20", NoDate)
	w.until("2024-02-20")
	require.NoError(t, w.s.Move(w.day, d("2024-03-01"), d("2024-02-25")))
	w.jobs()
	w.until("2024-04-01")
	assert.Equal(t, []string{"2024-02-01", "2024-02-25", "2024-04-01"}, w.chargeDays())
	assert.Contains(t, w.remind, "2024-02-20 2024-02-25", "the moved date's reminder at once")

	// Day 31, paid Jan 31, Feb 29 moved to Mar 5: March is still charged.
	w = newWorld(t, Rule{Day: 31}, "2024-01-02", NoDate)
	w.until("2024-02-10")
	require.NoError(t, w.s.Move(w.day, d("2024-02-29"), d("2024-03-05")))
	w.until("2024-04-30")
	assert.Equal(t, []string{"2024-01-31", "2024-03-05", "2024-03-31", "2024-04-30"}, w.chargeDays())
	assert.Equal(t, Completed, w.s.Period(d("2024-02-29")).Status)

	// Only strictly between the neighbours and not in the past.
	w = newWorld(t, Rule{Day: 15}, "2024-01-02", NoDate)
	for _, to := range []string{"2024-01-02", "2024-01-01", "2024-02-15", "2024-02-20"} {
		assert.ErrorIs(t, w.s.Move(w.day, d("2024-01-15"), d(to)), ErrRefused, to)
	}
	assert.NoError(t, w.s.Move(w.day, d("2024-01-15"), d("2024-02-14")))
}

func TestRuleChangeKeepsOneTermAfterTheLastCharge(t *testing.T) {
	// Day 31 paid Jan 31, changed to day 2 on Feb 1.
	w := newWorld(t, Rule{Day: 31}, "2024-01-02", NoDate)
	w.until("2024-02-01")
	require.NoError(t, w.s.ChangeRule(w.day, 2, 0))
	w.jobs()
	w.until("2024-04-02")
	assert.Equal(t, []string{"2024-01-31", "2024-03-02", "2024-04-02"}, w.chargeDays())
	assert.Contains(t, w.s.Dropped, d("2024-02-29"))

	// Nothing charged yet: the first new date after today.
	w = newWorld(t, Rule{Day: 20}, "2024-01-02", NoDate)
	require.NoError(t, w.s.ChangeRule(w.day, 10, 0))
	w.until("2024-02-10")
	assert.Equal(t, []string{"2024-01-10", "2024-02-10"}, w.chargeDays())

	// 15 → 20 → 15 with a charge in between: never two charges less than a term apart.
	w = newWorld(t, Rule{Day: 15}, "2024-01-02", NoDate)
	w.until("2024-01-16")
	require.NoError(t, w.s.ChangeRule(w.day, 20, 0))
	require.NoError(t, w.s.ChangeRule(w.day, 15, 0))
	w.until("2024-03-15")
	assert.Equal(t, []string{"2024-01-15", "2024-02-15", "2024-03-15"}, w.chargeDays())

	// A waived period counts too: never two periods less than a term apart.
	w = newWorld(t, Rule{Day: 21}, "2024-01-02", d("2024-01-29"))
	require.NoError(t, w.s.Waive(w.day, d("2024-02-21")))
	w.until("2024-02-13")
	require.NoError(t, w.s.ChangeRule(w.day, 24, 0))
	w.until("2024-03-24")
	assert.Equal(t, []string{"2024-03-24"}, w.chargeDays())

	// YEARLY keeps its month when its day changes; Nov 11 2028 is less
	// than a year after Nov 28 2027.
	w = newWorld(t, Rule{Term: Yearly, Day: 28}, "2027-11-09", NoDate)
	w.until("2027-12-01")
	require.NoError(t, w.s.ChangeRule(w.day, 11, 0))
	w.until("2029-12-01")
	assert.Equal(t, []string{"2027-11-28", "2029-11-11"}, w.chargeDays())

	// Friday billing: a term is four weeks (two 4th Fridays may be 28 days
	// apart): week 4 → 5 in a month with four Fridays keeps Dec 25.
	w = newWorld(t, Rule{Week: 4}, "2026-11-01", NoDate)
	w.until("2026-12-04")
	require.NoError(t, w.s.ChangeRule(w.day, 0, 5))
	w.until("2027-01-31")
	assert.Equal(t, []string{"2026-11-27", "2026-12-25", "2027-01-29"}, w.chargeDays())

	// Friday billing: week 1 → week 5.
	w = newWorld(t, Rule{Week: 1}, "2024-01-02", NoDate)
	w.until("2024-01-06")
	require.NoError(t, w.s.ChangeRule(w.day, 0, 5))
	w.until("2024-03-31")
	assert.Equal(t, []string{"2024-01-05", "2024-02-23", "2024-03-29"}, w.chargeDays())
}

// §8 "Rule change (new payment day or term)": the next period is at least
// one term after the last kept period, the term being that period's own.
func TestTermChangeKeepsOneTermOfTheKeptPeriod(t *testing.T) {
	tests := []struct {
		name    string
		rule    Rule
		created string
		start   Date
		at      string // the change's day (after the charges up to it)
		term    Term
		day     int
		week    int
		refused bool
		until   string
		charges []string
	}{
		{"MONTHLY to YEARLY: a month after the last charge, then yearly", Rule{Day: 15}, "2024-01-10", NoDate,
			"2024-01-20", Yearly, 15, 0, false, "2025-03-01", []string{"2024-01-15", "2024-02-15", "2025-02-15"}},
		{"YEARLY to MONTHLY: the paid year is kept", Rule{Term: Yearly, Day: 10}, "2024-03-01", NoDate,
			"2024-06-01", Monthly, 10, 0, false, "2025-04-30", []string{"2024-03-10", "2025-03-10", "2025-04-10"}},
		{"nothing charged: after today, on or after start", Rule{Day: 15}, "2024-01-10", d("2024-05-20"),
			"2024-01-12", Yearly, 15, 0, false, "2025-07-01", []string{"2024-06-15", "2025-06-15"}},
		{"term and day at once: the month of the first date", Rule{Day: 15}, "2024-01-10", NoDate,
			"2024-01-20", Yearly, 3, 0, false, "2025-04-01", []string{"2024-01-15", "2024-03-03", "2025-03-03"}},
		{"Friday billing to YEARLY on a day: four weeks after the Friday", Rule{Week: 5}, "2024-01-01", NoDate,
			"2024-01-28", Yearly, 20, 0, false, "2025-04-01", []string{"2024-01-26", "2024-03-20", "2025-03-20"}},
		{"Friday billing is monthly: YEARLY with a week is refused", Rule{Week: 5}, "2024-01-01", NoDate,
			"2024-01-28", Yearly, 0, 5, true, "2024-03-01", []string{"2024-01-26", "2024-02-23"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, tc.rule, tc.created, tc.start)
			w.until(tc.at)
			err := w.s.ChangeRuleTo(w.day, tc.term, tc.day, tc.week)
			if tc.refused {
				require.ErrorIs(t, err, ErrRefused)
			} else {
				require.NoError(t, err)
			}
			w.until(tc.until)
			assert.Equal(t, tc.charges, w.chargeDays())
		})
	}

	// Back and forth before the next charge: the charged period's term
	// (monthly), not the rule in force in between (yearly).
	w := newWorld(t, Rule{Day: 15}, "2024-01-10", NoDate)
	w.until("2024-01-20")
	require.NoError(t, w.s.ChangeRuleTo(w.day, Yearly, 15, 0))
	w.until("2024-01-25")
	require.NoError(t, w.s.ChangeRuleTo(w.day, Monthly, 15, 0))
	w.until("2024-03-20")
	assert.Equal(t, []string{"2024-01-15", "2024-02-15", "2024-03-15"}, w.chargeDays())

	// YEARLY → MONTHLY after a waived year: the next monthly period is two
	// years ahead, and a pause of 3 still takes the next three periods.
	w = newWorld(t, Rule{Term: Yearly, Day: 10}, "2024-03-01", NoDate)
	w.until("2024-03-11")
	require.NoError(t, w.s.Waive(w.day, d("2025-03-10")))
	w.until("2024-04-01")
	require.NoError(t, w.s.ChangeRuleTo(w.day, Monthly, 28, 0))
	w.until("2024-04-02")
	require.NoError(t, w.s.Pause(w.day, 3))
	w.until("2026-07-01")
	assert.Equal(t, []string{"2024-03-10", "2026-06-28"}, w.chargeDays())
	for _, p := range []string{"2026-03-28", "2026-04-28", "2026-05-28"} {
		assert.Equal(t, PausedSkipped, w.s.Period(d(p)).Status, p)
	}
}

func TestPauseSkipsNPeriodsAndResumeReschedules(t *testing.T) {
	// Friday billing paused one month skips one period.
	w := newWorld(t, Rule{Week: 5}, "2024-01-02", NoDate)
	w.until("2024-01-27")
	require.NoError(t, w.s.Pause(w.day, 1))
	w.until("2024-03-31")
	assert.Equal(t, []string{"2024-01-26", "2024-03-29"}, w.chargeDays())
	assert.Equal(t, PausedSkipped, w.s.Period(d("2024-02-23")).Status)
	assert.Equal(t, []Status{Scheduled, Paused, PausedSkipped}, w.s.Period(d("2024-02-23")).Trail)

	// Items 5 and 6: paused for 3 months, amount changed, resumed early:
	// the new amount, and reminders for the rescheduled periods.
	w = newWorld(t, Rule{Day: 10}, "2024-01-02", NoDate)
	w.until("2024-01-11")
	require.NoError(t, w.s.Pause(w.day, 3))
	w.until("2024-02-20")
	require.NoError(t, w.s.ChangeAmount(w.day, 500))
	w.until("2024-03-06")
	require.NoError(t, w.s.Resume(w.day))
	w.jobs()
	w.until("2024-05-10")
	assert.Equal(t, []string{"2024-01-10 2024-01-10 1999", "2024-03-10 2024-03-10 500", "2024-04-10 2024-04-10 500",
		"2024-05-10 2024-05-10 500"}, w.charges)
	assert.Equal(t, PausedSkipped, w.s.Period(d("2024-02-10")).Status)
	assert.Contains(t, w.remind, "2024-03-06 2024-03-10", "at once: its reminder day had passed")
	assert.Contains(t, w.remind, "2024-04-03 2024-04-10")
	assert.NotContains(t, w.remind, "2024-02-03 2024-02-10", "none for a skipped period")

	// Announced, paused, resumed: no second reminder for the same date.
	w = newWorld(t, Rule{Day: 10}, "2024-01-02", NoDate)
	w.until("2024-01-05")
	require.NoError(t, w.s.Pause(w.day, 1))
	w.until("2024-01-06")
	require.NoError(t, w.s.Resume(w.day))
	w.until("2024-01-10")
	assert.Equal(t, []string{"2024-01-03 2024-01-10"}, w.remind)
	assert.Equal(t, []string{"2024-01-10"}, w.chargeDays())

	// YEARLY: the next period when it falls within N months.
	w = newWorld(t, Rule{Term: Yearly, Day: 1}, "2024-01-02", NoDate)
	w.until("2024-03-01")
	assert.ErrorIs(t, w.s.Pause(w.day, 1), ErrRefused, "Feb 1 2025 is not within one month of Mar 1: nothing to pause")
	assert.Equal(t, Scheduled, w.s.Period(d("2025-02-01")).Status)
	require.NoError(t, w.s.Pause(w.day, 12))
	assert.Equal(t, Paused, w.s.Period(d("2025-02-01")).Status)
	assert.Equal(t, Scheduled, w.s.Period(d("2026-02-01")).Status)
	w.until("2026-02-01")
	assert.Equal(t, []string{"2024-02-01", "2026-02-01"}, w.chargeDays())
}

func TestDeclinesRetryThenStale(t *testing.T) {
	w := newWorld(t, Rule{Day: 31}, "2024-01-02", NoDate)
	w.decide = func(due Due, _ int) Outcome {
		if due.Period == d("2024-01-31") {
			return Declined
		}
		return Succeeded
	}
	w.until("2024-03-02")
	assert.Equal(t, []string{"2024-01-31", "2024-02-01", "2024-02-03", "2024-02-05", "2024-02-07", "2024-02-29"}, w.chargeDays())
	assert.Equal(t, []Status{Scheduled, Error, Stale}, w.s.Period(d("2024-01-31")).Trail)
	assert.Len(t, w.s.Receipts(), 1)

	// Succeeds on the second retry; pay now charges the oldest ERROR period.
	w = newWorld(t, Rule{Day: 5}, "2024-01-02", NoDate)
	w.decide = func(_ Due, n int) Outcome {
		if n <= 2 {
			return Declined
		}
		return Succeeded
	}
	w.until("2024-01-08")
	assert.Equal(t, []string{"2024-01-05", "2024-01-06", "2024-01-08"}, w.chargeDays())
	assert.Equal(t, Completed, w.s.Period(d("2024-01-05")).Status)
	_, err := w.s.PayNow(w.day)
	assert.ErrorIs(t, err, ErrRefused, "nothing to pay")
}

func TestUnknownOutcomeIsResolvedBeforeAnythingElse(t *testing.T) {
	w := newWorld(t, Rule{Day: 5}, "2024-01-02", NoDate)
	w.until("2024-01-04")
	w.day = d("2024-01-05")
	due := w.s.Collect(w.day)
	require.Len(t, due, 1)
	require.NoError(t, w.s.Attempted(w.day, due[0].Period, due[0].Amount, "pi_lost", Succeeded, true))
	assert.True(t, w.s.Busy(w.day))
	assert.Empty(t, w.s.Receipts())
	w.day = d("2024-01-06")
	assert.Empty(t, w.s.Collect(w.day), "resolved as paid: no new charge")
	assert.Equal(t, []Receipt{{Period: d("2024-01-05"), PI: "pi_lost", Amount: 1999, Processed: d("2024-01-06")}}, w.s.Receipts())

	// Declined behind the 500: ERROR, then the ordinary retry of day 1.
	w = newWorld(t, Rule{Day: 5}, "2024-01-02", NoDate)
	w.until("2024-01-04")
	w.day = d("2024-01-05")
	due = w.s.Collect(w.day)
	require.NoError(t, w.s.Attempted(w.day, due[0].Period, due[0].Amount, "pi_lost", Declined, true))
	w.day = d("2024-01-06")
	assert.Equal(t, []Due{{Period: d("2024-01-05"), Charge: d("2024-01-05"), Amount: 1999}}, w.s.Collect(w.day))
}

func TestACHSettlesLaterAndRefunds(t *testing.T) {
	w := newWorld(t, Rule{Day: 5}, "2024-01-02", NoDate)
	w.decide = func(Due, int) Outcome { return Processing }
	w.until("2024-02-05")
	require.Equal(t, ACHSent, w.s.Period(d("2024-01-05")).Status)
	require.NoError(t, w.s.Settled(d("2024-02-05"), "pi_1", true))
	w.until("2024-02-06")
	// The failure arrives after the day's job: the day-1 retry has passed.
	require.NoError(t, w.s.Settled(d("2024-02-06"), "pi_2", false))
	assert.Equal(t, Error, w.s.Period(d("2024-02-05")).Status)
	w.decide = func(Due, int) Outcome { return Succeeded }
	w.until("2024-02-08")
	assert.Equal(t, []string{"2024-01-05", "2024-02-05", "2024-02-08"}, w.chargeDays(), "retried on the next retry day")
	require.NoError(t, w.s.Refunded(w.day, "pi_1"))
	assert.Equal(t, []Status{Scheduled, ACHSent, Completed, Refunded}, w.s.Period(d("2024-01-05")).Trail)
	assert.Len(t, w.s.Receipts(), 2)
	assert.Error(t, w.s.Refunded(w.day, "pi_1"), "refunded once")
}

func TestCancelAndWaive(t *testing.T) {
	w := newWorld(t, Rule{Day: 5}, "2024-01-02", NoDate)
	w.decide = func(due Due, _ int) Outcome {
		if due.Period == d("2024-02-05") {
			return Declined
		}
		return Succeeded
	}
	w.until("2024-02-05")
	require.NoError(t, w.s.Waive(w.day, d("2024-02-05")))
	assert.ErrorIs(t, w.s.Waive(w.day, d("2024-01-05")), ErrRefused, "a paid period")
	w.until("2024-02-20")
	require.NoError(t, w.s.Waive(w.day, d("2024-03-05")))
	w.until("2024-03-25")
	require.NoError(t, w.s.Cancel(w.day))
	w.until("2024-08-01")
	assert.Equal(t, []string{"2024-01-05", "2024-02-05"}, w.chargeDays())
	assert.Equal(t, []Status{Scheduled, Error, Waived}, w.s.Period(d("2024-02-05")).Trail)
	assert.Equal(t, Waived, w.s.Period(d("2024-03-05")).Status)
	assert.Equal(t, Cancelled, w.s.Period(d("2024-04-05")).Status)
	assert.NotContains(t, w.remind, "2024-02-27 2024-03-05", "none for a waived period")
	assert.NotContains(t, w.remind, "2024-03-29 2024-04-05", "none for a cancelled period")
}
