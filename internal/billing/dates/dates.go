// Package dates is the calendar arithmetic of recurring billing: civil dates
// (no time of day, no zone), payment-day rules that clamp to the month's last
// day, Friday billing, reminder offsets and the retry schedule. Everything is
// pure and table-tested.
package dates

import (
	"fmt"
	"time"
)

// Layout is the wire and storage form of a Date.
const Layout = "2006-01-02"

// Date is a civil date. The zero Date is "no date".
type Date struct {
	y int
	m time.Month
	d int
}

// New returns the date y-m-d, normalising overflow the way time.Date does
// (New(2024, 2, 30) is 2024-03-01).
func New(y int, m time.Month, d int) Date {
	return Of(time.Date(y, m, d, 12, 0, 0, 0, time.UTC))
}

// Of is the date of t in t's location.
func Of(t time.Time) Date {
	y, m, d := t.Date()
	return Date{y, m, d}
}

// In is the date of t in loc (UTC when loc is nil).
func In(t time.Time, loc *time.Location) Date {
	if loc == nil {
		loc = time.UTC
	}
	return Of(t.In(loc))
}

// Parse reads a strict YYYY-MM-DD date.
func Parse(s string) (Date, error) {
	t, err := time.Parse(Layout, s)
	if err != nil || len(s) != len(Layout) {
		return Date{}, fmt.Errorf("invalid date %q: want YYYY-MM-DD", s)
	}
	return Of(t), nil
}

// MustParse is Parse for constants in tests and tables.
func MustParse(s string) Date {
	d, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return d
}

// ParseOptional is Parse that maps "" to the zero Date.
func ParseOptional(s string) (Date, error) {
	if s == "" {
		return Date{}, nil
	}
	return Parse(s)
}

// IsZero reports whether d is the zero Date.
func (d Date) IsZero() bool { return d == Date{} }

// String is YYYY-MM-DD, or "" for the zero Date.
func (d Date) String() string {
	if d.IsZero() {
		return ""
	}
	return fmt.Sprintf("%04d-%02d-%02d", d.y, d.m, d.d)
}

// Year, Month and Day are the date's parts.
func (d Date) Year() int             { return d.y }
func (d Date) Month() time.Month     { return d.m }
func (d Date) Day() int              { return d.d }
func (d Date) Weekday() time.Weekday { return d.Time().Weekday() }

// Time is midnight UTC of d.
func (d Date) Time() time.Time { return time.Date(d.y, d.m, d.d, 0, 0, 0, 0, time.UTC) }

// AddDays moves d by n days (negative: back).
func (d Date) AddDays(n int) Date { return New(d.y, d.m, d.d+n) }

// Compare returns -1, 0 or +1.
func (d Date) Compare(o Date) int {
	switch {
	case d.y != o.y:
		return sign(d.y - o.y)
	case d.m != o.m:
		return sign(int(d.m) - int(o.m))
	default:
		return sign(d.d - o.d)
	}
}

// Before, After and Equal compare two dates.
func (d Date) Before(o Date) bool { return d.Compare(o) < 0 }
func (d Date) After(o Date) bool  { return d.Compare(o) > 0 }
func (d Date) Equal(o Date) bool  { return d == o }

// DaysSince is the number of days from o to d (positive when d is later).
func (d Date) DaysSince(o Date) int {
	return int(d.Time().Sub(o.Time()).Hours() / 24)
}

// MarshalText and UnmarshalText make a Date a YYYY-MM-DD JSON string.
func (d Date) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func (d *Date) UnmarshalText(b []byte) error {
	v, err := ParseOptional(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// Max returns the later of a and b.
func Max(a, b Date) Date {
	if a.After(b) {
		return a
	}
	return b
}

// DaysIn is the number of days of month m in year y.
func DaysIn(y int, m time.Month) int {
	return time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// AddMonthsClamped moves d by n months keeping its day, clamped to the target
// month's last day (Jan 31 + 1 month = Feb 28 or 29).
func AddMonthsClamped(d Date, n int) Date {
	first := New(d.y, d.m+time.Month(n), 1)
	return Date{first.y, first.m, min(d.d, DaysIn(first.y, first.m))}
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}
