package dates

import (
	"errors"
	"fmt"
	"time"
)

// Term is how often a subscription is charged.
type Term string

const (
	Monthly Term = "MONTHLY"
	Yearly  Term = "YEARLY"
)

// Months is the length of a term in months.
func (t Term) Months() int {
	if t == Yearly {
		return 12
	}
	return 1
}

// Valid reports whether t is a known term.
func (t Term) Valid() bool { return t == Monthly || t == Yearly }

// Rule says on which day of a month a subscription is charged: the payment
// day (1–31, clamped to the month's last day, so 31 means "the last day"), or,
// for Friday billing, the Week-th Friday (1–5; a month without a fifth Friday
// uses its last Friday).
type Rule struct {
	Day  int
	Week int // 0: day-of-month billing
	Term Term
}

// Validate reports a rule that cannot produce dates.
func (r Rule) Validate() error {
	var errs []error
	if !r.Term.Valid() {
		errs = append(errs, fmt.Errorf("term %q: want MONTHLY or YEARLY", r.Term))
	}
	if r.Week == 0 && (r.Day < 1 || r.Day > 31) {
		errs = append(errs, fmt.Errorf("payment day %d: want 1-31", r.Day))
	}
	if r.Week < 0 || r.Week > 5 {
		errs = append(errs, fmt.Errorf("billing week %d: want 1-5", r.Week))
	}
	// docs/design.md §8 defines Friday billing as "the billing_week-th Friday of
	// each month": there is no yearly form of it.
	if r.Week != 0 && r.Term == Yearly {
		errs = append(errs, errors.New("billing_week with term YEARLY: Friday billing is monthly (the billing_week-th Friday of each month); a YEARLY subscription needs a payment_day"))
	}
	return errors.Join(errs...)
}

// InMonth is the billing date of the rule in month m of year y.
func (r Rule) InMonth(y int, m time.Month) Date {
	first := New(y, m, 1) // normalises m outside 1..12
	if r.Week > 0 {
		return NthWeekday(first.y, first.m, time.Friday, r.Week)
	}
	return Date{first.y, first.m, min(r.Day, DaysIn(first.y, first.m))}
}

// First is the first billing date on or after from: in from's month if the
// rule's day has not passed yet, else in the next month. Later dates follow
// with Next.
func (r Rule) First(from Date) Date {
	if d := r.InMonth(from.y, from.m); !d.Before(from) {
		return d
	}
	return r.InMonth(from.y, from.m+1)
}

// Next is the billing date one term after the period dated d: the rule's day
// in the month Term.Months() later. The day comes from the rule, not from d,
// so a 31st-of-the-month subscription goes Jan 31 → Feb 28 → Mar 31, and a
// YEARLY one from Feb 29 goes to Feb 28 and back to Feb 29 in leap years.
func (r Rule) Next(d Date) Date {
	return r.InMonth(d.y, d.m+time.Month(r.Term.Months()))
}

// FirstAfter is the first billing date strictly after d, stepping from
// anchor (a billing date of the rule) by whole terms; anchor itself counts
// when it is after d.
func (r Rule) FirstAfter(anchor, d Date) Date {
	for !anchor.After(d) {
		anchor = r.Next(anchor)
	}
	return anchor
}

// OneTermAfter is d plus one term of the rule: 12 months for YEARLY; for
// MONTHLY one month clamped to the month's end (Jan 31 → Feb 29), or four
// weeks for Friday billing (two of its periods can be 28 days apart).
func (r Rule) OneTermAfter(d Date) Date {
	if r.Week > 0 && r.Term == Monthly {
		return d.AddDays(28)
	}
	return AddMonthsClamped(d, r.Term.Months())
}

// FirstOnOrAfter is the first billing date of the rule on or after lower.
// A YEARLY rule bills once a year in the month of ref (one of its dates);
// a MONTHLY one every month, so ref does not matter.
func (r Rule) FirstOnOrAfter(ref, lower Date) Date {
	m := lower.m
	if r.Term == Yearly && !ref.IsZero() {
		m = ref.m
	}
	d := r.InMonth(lower.y, m)
	for d.Before(lower) {
		d = r.Next(d)
	}
	return d
}

// NthWeekday is the n-th (1–5) weekday wd of a month; when the month has no
// n-th one, its last one.
func NthWeekday(y int, m time.Month, wd time.Weekday, n int) Date {
	first := New(y, m, 1)
	offset := (int(wd) - int(first.Weekday()) + 7) % 7
	day := 1 + offset + 7*(n-1)
	for day > DaysIn(first.y, first.m) {
		day -= 7
	}
	return Date{first.y, first.m, day}
}

// ReminderDate is the date a reminder for a payment on pay goes out: days
// before it, but never before notBefore (a reminder that is already late goes
// out at once rather than never).
func ReminderDate(pay Date, days int, notBefore Date) Date {
	d := pay.AddDays(-days)
	if !notBefore.IsZero() && d.Before(notBefore) && !pay.Before(notBefore) {
		return notBefore
	}
	return d
}

// RetryPolicy is when a failed period is tried again: on the given days after
// its billing date, and marked stale (never charged) StaleDays after it.
type RetryPolicy struct {
	Days      []int
	StaleDays int
}

// Validate checks the days are increasing and below the stale threshold.
func (p RetryPolicy) Validate() error {
	if p.StaleDays < 1 {
		return errors.New("stale days must be positive")
	}
	prev := 0
	for _, d := range p.Days {
		if d <= prev || d >= p.StaleDays {
			return fmt.Errorf("retry days must increase and stay below the stale threshold (%d): %v", p.StaleDays, p.Days)
		}
		prev = d
	}
	return nil
}

// NextAttempt is the date a period billed on billing, which failed on or
// before today, should be looked at next: the first retry day after today,
// else its stale date. stale reports that the next look is the stale one
// (no charge, just the STALE mark).
func (p RetryPolicy) NextAttempt(billing, today Date) (next Date, stale bool) {
	for _, d := range p.Days {
		if c := billing.AddDays(d); c.After(today) {
			return c, false
		}
	}
	return p.StaleDate(billing), true
}

// StaleDate is the first date on which a period billed on billing is too old
// to collect.
func (p RetryPolicy) StaleDate(billing Date) Date { return billing.AddDays(p.StaleDays) }

// IsStale reports whether a period billed on billing must no longer be
// charged on today.
func (p RetryPolicy) IsStale(billing, today Date) bool {
	return !today.Before(p.StaleDate(billing))
}
