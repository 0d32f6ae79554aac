package dates_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

var d = dates.MustParse

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		ok   bool
		want string
	}{
		{"2024-02-29", true, "2024-02-29"},
		{"2023-02-29", false, ""},
		{"2024-2-9", false, ""},
		{"2024-02-09T00:00:00Z", false, ""},
		{"", false, ""},
		{"20240209", false, ""},
	}
	for _, tc := range tests {
		got, err := dates.Parse(tc.in)
		if !tc.ok {
			assert.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got.String())
	}
}

// Payment days 29, 30 and 31 through every month of a common and a leap
// year: the date clamps to the month's last day and comes back afterwards.
func TestMonthlyPaymentDayClampsEveryMonth(t *testing.T) {
	want := map[int][]string{
		29: {"01-29", "02-28", "03-29", "04-29", "05-29", "06-29", "07-29", "08-29", "09-29", "10-29", "11-29", "12-29",
			"01-29", "02-29", "03-29", "04-29", "05-29", "06-29", "07-29", "08-29", "09-29", "10-29", "11-29", "12-29"},
		30: {"01-30", "02-28", "03-30", "04-30", "05-30", "06-30", "07-30", "08-30", "09-30", "10-30", "11-30", "12-30",
			"01-30", "02-29", "03-30", "04-30", "05-30", "06-30", "07-30", "08-30", "09-30", "10-30", "11-30", "12-30"},
		31: {"01-31", "02-28", "03-31", "04-30", "05-31", "06-30", "07-31", "08-31", "09-30", "10-31", "11-30", "12-31",
			"01-31", "02-29", "03-31", "04-30", "05-31", "06-30", "07-31", "08-31", "09-30", "10-31", "11-30", "12-31"},
	}
	for day, months := range want {
		rule := dates.Rule{Day: day, Term: dates.Monthly}
		cur := rule.First(d("2023-01-01"))
		for i, md := range months {
			year := 2023 + i/12
			assert.Equal(t, d(time.Date(year, 1, 1, 0, 0, 0, 0, time.UTC).Format("2006")+"-"+md), cur, "day %d, step %d", day, i)
			cur = rule.Next(cur)
		}
		assert.Equal(t, "2025-01-"+itoa(day), cur.String(), "day %d wraps into the next year", day)
	}
}

func itoa(n int) string { return time.Date(2000, 1, n, 0, 0, 0, 0, time.UTC).Format("02") }

func TestNext(t *testing.T) {
	tests := []struct {
		name string
		rule dates.Rule
		from string
		want []string
	}{
		{"yearly from Feb 29 clamps, and returns to 29 in leap years", dates.Rule{Day: 29, Term: dates.Yearly}, "2024-02-29",
			[]string{"2025-02-28", "2026-02-28", "2027-02-28", "2028-02-29", "2029-02-28"}},
		{"yearly on the 31st of January", dates.Rule{Day: 31, Term: dates.Yearly}, "2023-01-31",
			[]string{"2024-01-31", "2025-01-31"}},
		{"monthly across the year end", dates.Rule{Day: 15, Term: dates.Monthly}, "2023-11-15",
			[]string{"2023-12-15", "2024-01-15", "2024-02-15"}},
		{"century rule: 2100 is not a leap year", dates.Rule{Day: 29, Term: dates.Yearly}, "2096-02-29",
			[]string{"2097-02-28", "2098-02-28", "2099-02-28", "2100-02-28", "2101-02-28", "2102-02-28", "2103-02-28", "2104-02-29"}},
		{"2000 is a leap year", dates.Rule{Day: 30, Term: dates.Monthly}, "2000-01-30",
			[]string{"2000-02-29", "2000-03-30"}},
		{"admin-moved date goes back to the rule's day", dates.Rule{Day: 10, Term: dates.Monthly}, "2024-03-17",
			[]string{"2024-04-10", "2024-05-10"}},
		{"first Friday", dates.Rule{Week: 1, Term: dates.Monthly}, "2024-01-05",
			[]string{"2024-02-02", "2024-03-01", "2024-04-05"}},
		{"fifth Friday falls back to the last", dates.Rule{Week: 5, Term: dates.Monthly}, "2024-03-29",
			[]string{"2024-04-26", "2024-05-31", "2024-06-28"}},
		{"yearly Friday billing", dates.Rule{Week: 2, Term: dates.Yearly}, "2024-02-09",
			[]string{"2025-02-14", "2026-02-13"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cur := d(tc.from)
			for _, w := range tc.want {
				cur = tc.rule.Next(cur)
				assert.Equal(t, w, cur.String())
			}
		})
	}
}

func TestFirst(t *testing.T) {
	tests := []struct {
		rule dates.Rule
		from string
		want string
	}{
		{dates.Rule{Day: 15, Term: dates.Monthly}, "2024-01-10", "2024-01-15"},
		{dates.Rule{Day: 15, Term: dates.Monthly}, "2024-01-15", "2024-01-15"},
		{dates.Rule{Day: 15, Term: dates.Monthly}, "2024-01-16", "2024-02-15"},
		{dates.Rule{Day: 31, Term: dates.Monthly}, "2024-02-10", "2024-02-29"},
		{dates.Rule{Day: 31, Term: dates.Monthly}, "2023-12-31", "2023-12-31"},
		{dates.Rule{Day: 1, Term: dates.Monthly}, "2023-12-02", "2024-01-01"},
		{dates.Rule{Day: 29, Term: dates.Yearly}, "2024-02-01", "2024-02-29"},
		{dates.Rule{Week: 3, Term: dates.Monthly}, "2024-02-17", "2024-03-15"},
		{dates.Rule{Week: 3, Term: dates.Monthly}, "2024-02-16", "2024-02-16"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, tc.rule.First(d(tc.from)).String(), "%+v from %s", tc.rule, tc.from)
	}
}

func TestFirstAfter(t *testing.T) {
	r := dates.Rule{Day: 31, Term: dates.Monthly}
	assert.Equal(t, "2024-04-30", r.FirstAfter(d("2024-01-31"), d("2024-03-31")).String())
	assert.Equal(t, "2024-01-31", r.FirstAfter(d("2024-01-31"), d("2024-01-30")).String())
}

func TestNthWeekday(t *testing.T) {
	tests := []struct {
		y    int
		m    time.Month
		n    int
		want string
	}{
		{2024, time.February, 1, "2024-02-02"},
		{2024, time.February, 4, "2024-02-23"},
		{2024, time.February, 5, "2024-02-23"}, // only four Fridays
		{2024, time.March, 5, "2024-03-29"},
		{2023, time.December, 5, "2023-12-29"},
		{2026, time.May, 1, "2026-05-01"}, // the 1st is a Friday
	}
	for _, tc := range tests {
		got := dates.NthWeekday(tc.y, tc.m, time.Friday, tc.n)
		assert.Equal(t, tc.want, got.String())
		assert.Equal(t, time.Friday, got.Weekday())
	}
}

func TestReminderDate(t *testing.T) {
	tests := []struct {
		name      string
		pay       string
		days      int
		notBefore string
		want      string
	}{
		{"same month", "2024-03-20", 7, "", "2024-03-13"},
		{"crosses the month end", "2024-03-03", 7, "", "2024-02-25"},
		{"crosses into a leap day", "2024-03-07", 7, "", "2024-02-29"},
		{"crosses the year end", "2024-01-02", 7, "", "2023-12-26"},
		{"31st to the previous 31st-less month", "2024-05-01", 1, "", "2024-04-30"},
		{"already late: goes out today", "2024-03-20", 7, "2024-03-18", "2024-03-18"},
		{"not late", "2024-03-20", 7, "2024-03-01", "2024-03-13"},
		{"payment already past: no clamp", "2024-03-20", 7, "2024-03-21", "2024-03-13"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nb, _ := dates.ParseOptional(tc.notBefore)
			assert.Equal(t, tc.want, dates.ReminderDate(d(tc.pay), tc.days, nb).String())
		})
	}
}

func TestRetryPolicy(t *testing.T) {
	p := dates.RetryPolicy{Days: []int{1, 3, 5, 7}, StaleDays: 30} // the default of BILLING_RETRY_DAYS, BILLING_STALE_DAYS
	require.NoError(t, p.Validate())
	tests := []struct {
		billing, today string
		next           string
		stale          bool
	}{
		{"2024-01-31", "2024-01-31", "2024-02-01", false},
		{"2024-01-31", "2024-02-01", "2024-02-03", false},
		{"2024-01-31", "2024-02-02", "2024-02-03", false},
		{"2024-01-31", "2024-02-03", "2024-02-05", false},
		{"2024-01-31", "2024-02-05", "2024-02-07", false},
		{"2024-01-31", "2024-02-07", "2024-03-01", true},
		{"2023-12-28", "2023-12-29", "2023-12-31", false},
		{"2023-12-28", "2024-01-04", "2024-01-27", true},
	}
	for _, tc := range tests {
		next, stale := p.NextAttempt(d(tc.billing), d(tc.today))
		assert.Equal(t, tc.next, next.String(), "%s failed on %s", tc.billing, tc.today)
		assert.Equal(t, tc.stale, stale)
	}
	assert.True(t, p.IsStale(d("2024-01-31"), d("2024-03-01")))
	assert.False(t, p.IsStale(d("2024-01-31"), d("2024-02-29")))
	assert.Error(t, dates.RetryPolicy{Days: []int{3, 1}, StaleDays: 30}.Validate())
	assert.Error(t, dates.RetryPolicy{Days: []int{1, 30}, StaleDays: 30}.Validate())
}

func TestRuleValidate(t *testing.T) {
	assert.NoError(t, dates.Rule{Day: 31, Term: dates.Monthly}.Validate())
	assert.NoError(t, dates.Rule{Week: 5, Term: dates.Monthly}.Validate())
	// docs/design.md §8: Friday billing is "the billing_week-th Friday of each month".
	assert.Error(t, dates.Rule{Week: 5, Term: dates.Yearly}.Validate())
	assert.Error(t, dates.Rule{Day: 0, Term: dates.Monthly}.Validate())
	assert.Error(t, dates.Rule{Day: 32, Term: dates.Monthly}.Validate())
	assert.Error(t, dates.Rule{Day: 1, Term: "WEEKLY"}.Validate())
	assert.Error(t, dates.Rule{Week: 6, Term: dates.Monthly}.Validate())
}

func TestAddMonthsClamped(t *testing.T) {
	assert.Equal(t, "2024-02-29", dates.AddMonthsClamped(d("2024-01-31"), 1).String())
	assert.Equal(t, "2025-02-28", dates.AddMonthsClamped(d("2024-02-29"), 12).String())
	assert.Equal(t, "2024-01-15", dates.AddMonthsClamped(d("2023-11-15"), 2).String())
}

func TestCompareAndDays(t *testing.T) {
	assert.True(t, d("2023-12-31").Before(d("2024-01-01")))
	assert.Equal(t, 366, d("2025-01-01").DaysSince(d("2024-01-01")))
	assert.Equal(t, "2024-03-01", d("2024-02-28").AddDays(2).String())
	assert.Equal(t, "2024-03-01", dates.In(time.Date(2024, 2, 29, 23, 30, 0, 0, time.UTC), time.FixedZone("x", 3600)).String())
}

func TestFirstOnOrAfter(t *testing.T) {
	cases := []struct {
		rule       dates.Rule
		ref, lower string
		want       string
	}{
		{dates.Rule{Day: 2, Term: dates.Monthly}, "", "2024-02-29", "2024-03-02"},
		{dates.Rule{Day: 31, Term: dates.Monthly}, "", "2024-02-01", "2024-02-29"},
		{dates.Rule{Day: 15, Term: dates.Monthly}, "", "2024-02-15", "2024-02-15"},
		{dates.Rule{Week: 5, Term: dates.Monthly}, "", "2024-02-24", "2024-03-29"},
		{dates.Rule{Day: 10, Term: dates.Yearly}, "2024-03-15", "2025-03-15", "2026-03-10"},
		{dates.Rule{Day: 20, Term: dates.Yearly}, "2024-03-15", "2025-03-15", "2025-03-20"},
		{dates.Rule{Day: 29, Term: dates.Yearly}, "2024-02-29", "2024-03-01", "2025-02-28"},
	}
	for _, c := range cases {
		if got := c.rule.FirstOnOrAfter(parseOrZero(c.ref), dates.MustParse(c.lower)); got.String() != c.want {
			t.Errorf("%+v from %s on/after %s: got %s, want %s", c.rule, c.ref, c.lower, got, c.want)
		}
	}
}

func parseOrZero(s string) dates.Date {
	d, _ := dates.ParseOptional(s)
	return d
}
