package oracle

import (
	"fmt"
	"time"
)

// Date is a civil date in UTC, counted in days since 1970-01-01, so that
// comparisons and day arithmetic are plain integer operations.
type Date int32

// NoDate is the zero value: no date.
const NoDate Date = 0

// D is the date y-m-d; out-of-range values normalise as time.Date does.
func D(y int, m time.Month, d int) Date {
	return Date(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400)
}

// Parse reads YYYY-MM-DD.
func Parse(s string) (Date, error) {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return NoDate, fmt.Errorf("oracle: date %q: %w", s, err)
	}
	return Date(t.Unix() / 86400), nil
}

// MustParse is Parse for literals in tests.
func MustParse(s string) Date {
	d, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return d
}

// Of is the UTC date of t.
func Of(t time.Time) Date {
	t = t.UTC()
	return D(t.Year(), t.Month(), t.Day())
}

// Time is midnight UTC of d.
func (d Date) Time() time.Time { return time.Unix(int64(d)*86400, 0).UTC() }

func (d Date) String() string { return d.Time().Format(time.DateOnly) }

// AddDays is d plus n days.
func (d Date) AddDays(n int) Date { return d + Date(n) }

// YM is d's year and month.
func (d Date) YM() (int, time.Month) {
	t := d.Time()
	return t.Year(), t.Month()
}

// Day is d's day of the month.
func (d Date) Day() int { return d.Time().Day() }

func daysIn(y int, m time.Month) int { return time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day() }

// clamped is day d of month m of year y, or the month's last day when the
// month is shorter (day 31 in February is Feb 28 or 29).
func clamped(y int, m time.Month, d int) Date {
	first := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC) // normalises m outside 1..12
	return D(first.Year(), first.Month(), min(d, daysIn(first.Year(), first.Month())))
}

// AddMonths is d moved n months, its day clamped to the target month's last
// day: "one term after" a date (Jan 31 + 1 month = Feb 29 in 2024).
func AddMonths(d Date, n int) Date {
	y, m := d.YM()
	return clamped(y, m+time.Month(n), d.Day())
}
