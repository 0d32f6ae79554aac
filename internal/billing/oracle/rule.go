package oracle

import (
	"errors"
	"time"
)

// Term is how often a rule bills.
type Term int

const (
	Monthly Term = iota
	Yearly
)

// Months is the length of one term.
func (t Term) Months() int {
	if t == Yearly {
		return 12
	}
	return 1
}

// Rule generates a subscription's scheduled dates (§8 "Periods"): MONTHLY on
// day 1–31, YEARLY on a month and a day, or Friday billing on the Week-th
// Friday of each month (the last Friday when there is no fifth). Every date
// is clamped to its own month.
type Rule struct {
	Term Term
	Day  int // 1–31, when Week is 0
	Week int // 1–5: Friday billing (MONTHLY)
	// Month is a YEARLY rule's month; 0 until the first date fixes it (the
	// create request names a day only).
	Month time.Month
}

// Validate refuses a rule that generates no dates.
func (r Rule) Validate() error {
	switch {
	case r.Week != 0 && (r.Week < 1 || r.Week > 5):
		return errors.New("oracle: billing week must be 1-5")
	case r.Week != 0 && r.Term != Monthly:
		return errors.New("oracle: Friday billing is monthly")
	case r.Week == 0 && (r.Day < 1 || r.Day > 31):
		return errors.New("oracle: payment day must be 1-31")
	case r.Term != Monthly && r.Term != Yearly:
		return errors.New("oracle: unknown term")
	}
	return nil
}

// in is the rule's date in month m of year y (ignoring Month).
func (r Rule) in(y int, m time.Month) Date {
	if r.Week == 0 {
		return clamped(y, m, r.Day)
	}
	first := clamped(y, m, 1)
	fy, fm := first.YM()
	// Days from the 1st to the month's first Friday.
	off := (int(time.Friday) - int(first.Time().Weekday()) + 7) % 7
	day := 1 + off + 7*(r.Week-1)
	if day > daysIn(fy, fm) {
		day -= 7 // no fifth Friday: the last one
	}
	return D(fy, fm, day)
}

// OnOrAfter is the rule's first date on or after from, and the rule with a
// YEARLY month fixed by that date.
func (r Rule) OnOrAfter(from Date) (Date, Rule) {
	y, m := from.YM()
	for i := 0; ; i++ {
		mm := m + time.Month(i)
		d := r.in(y, mm)
		_, dm := d.YM()
		if r.Term == Yearly && r.Month != 0 && dm != r.Month {
			continue
		}
		if d >= from {
			if r.Term == Yearly {
				r.Month = dm
			}
			return d, r
		}
	}
}

// After is the rule's first date strictly after d.
func (r Rule) After(d Date) Date {
	next, _ := r.OnOrAfter(d.AddDays(1))
	return next
}
