package oracle

import (
	"fmt"
	"slices"
)

// The operations of §8 a user or an operator makes on a subscription.

// Pause skips the next n periods without an attempt (YEARLY: the next one
// when it falls within n months); nothing shifts. A pause that would skip
// nothing is refused.
func (s *scheduleChanges) Pause(today Date, n int) error {
	if s.cancelled || n < 1 {
		return ErrRefused
	}
	limit, want := AddMonths(today, n), n
	// The next n periods must exist to be paused: the schedule is generated
	// only some 400 days ahead, and after a rule change (YEARLY → MONTHLY)
	// the next period itself may lie that far.
	for s.rule.Term == Monthly && s.open() <= n {
		s.addPeriod(s.rule.After(s.periods[len(s.periods)-1].Scheduled), today)
	}
	for _, p := range s.periods {
		if n == 0 {
			break
		}
		if p.Status != Scheduled || len(p.Attempts) > 0 || p.Charge < today {
			continue
		}
		if s.rule.Term == Yearly && p.Charge > limit { // "within N months": up to and including that date
			break
		}
		p.set(Paused)
		s.unremind(p, today)
		n--
	}
	if n == want {
		return fmt.Errorf("%w: no period within %d months", ErrRefused, want)
	}
	return nil
}

// Resume schedules again the paused periods still in the future.
func (s *scheduleChanges) Resume(today Date) error {
	if s.cancelled {
		return ErrRefused
	}
	for _, p := range s.periods {
		if p.Status == Paused && p.Charge > today {
			p.set(Scheduled)
			s.remind(p, today)
		}
	}
	return nil
}

// ChangeAmount applies to every later attempt.
func (s *paymentChanges) ChangeAmount(_ Date, amount int64) error {
	if s.cancelled || amount < 1 {
		return ErrRefused
	}
	if amount == s.amount {
		return nil // no change
	}
	s.amount = amount
	for _, p := range s.periods {
		if p.Status == Scheduled || p.Status == Paused || p.Status == Error {
			p.cancelPayable() // its amount changes (customer.go)
		}
	}
	return nil
}

// ChangePaymentMethod (§8 "Amount or payment method change") applies to
// every later attempt and makes each ERROR period not in flight due again
// at the next collection run (today's, operations coming before the day's
// jobs), hard-declined ones included; its earlier PaymentIntents can no
// longer be paid (customer.go).
func (s *paymentChanges) ChangePaymentMethod(_ Date) error {
	if s.cancelled {
		return ErrRefused
	}
	for _, p := range s.periods {
		switch {
		case p.Status == Error && p.unresolved() == nil:
			p.cancelPayable()
			p.DueAgain = true
		case p.Status == Scheduled || p.Status == Paused:
			p.cancelPayable()
		}
	}
	return nil
}

// ChangeRule changes the payment day (or Friday week) at today, keeping
// the term: ChangeRuleTo with the current term.
func (s *scheduleChanges) ChangeRule(today Date, day, week int) error {
	return s.ChangeRuleTo(today, s.rule.Term, day, week)
}

// ChangeRuleTo changes the rule (§8 "Rule change (new payment day or
// term)") at today: periods charged or in flight stay (and every other
// period that already ended); the next period is the new rule's first date
// at least one term after the last of them (none: after today and on or
// after start), and after today. "One term" is the term of the period kept
// (the rule it was scheduled under): it paid, or stood, for one term of
// its own rule, and the new rule begins when that term ends. A YEARLY rule
// keeps its month when only its day changes; a new YEARLY term takes the
// month of its first date, as a create does. Friday billing is monthly: a
// YEARLY rule with a week is refused.
func (s *scheduleChanges) ChangeRuleTo(today Date, term Term, day, week int) error {
	next := s.rule
	next.Day, next.Week = day, week
	if term != s.rule.Term {
		next.Term, next.Month = term, 0
	}
	if s.cancelled || next.Validate() != nil {
		return ErrRefused
	}
	from := max(today.AddDays(1), s.start)
	var kept []*Period
	for _, p := range s.periods {
		if len(p.Attempts) == 0 && (p.Status == Scheduled || p.Status == Paused) {
			s.Dropped = append(s.Dropped, p.Scheduled)
			s.unremind(p, today)
			continue
		}
		kept = append(kept, p)
		// The rule anchors on the last charged period; "no two periods
		// ever less than one term apart" extends that to every period kept
		// (waived, skipped, stale ones too).
		from = max(from, termAfter(p))
	}
	s.periods, s.rule = kept, next
	s.scheduleFrom(from, today)
	// The schedule reaches every date dropped so far: a date the new rule
	// shares with one (day 28 → 29 meets Feb 28 again) is a period of the
	// new rule, however far ahead the old one was scheduled.
	for _, d := range s.Dropped {
		for s.periods[len(s.periods)-1].Scheduled < d {
			s.addPeriod(s.rule.After(s.periods[len(s.periods)-1].Scheduled), today)
		}
	}
	return nil
}

// termAfter is one term of p's own rule after its scheduled date: a month
// later, clamped (YEARLY: 12); for Friday billing four weeks, the shortest
// distance of two of its periods.
func termAfter(p *Period) Date {
	if p.Rule.Week != 0 {
		return p.Scheduled.AddDays(28)
	}
	return AddMonths(p.Scheduled, p.Rule.Term.Months())
}

// Move charges one period on another date: strictly between its neighbours'
// scheduled dates and after today; later periods keep their dates.
func (s *scheduleChanges) Move(today, period, to Date) error {
	i := slices.IndexFunc(s.periods, func(p *Period) bool { return p.Scheduled == period })
	if i < 0 || s.cancelled {
		return ErrRefused
	}
	p := s.periods[i]
	lo, hi := today, Date(1<<30)
	if i > 0 {
		lo = max(lo, s.periods[i-1].Scheduled)
	}
	if i+1 < len(s.periods) {
		hi = s.periods[i+1].Scheduled
	}
	if p.Status != Scheduled || len(p.Attempts) > 0 || to <= lo || to >= hi {
		return fmt.Errorf("%w: move %s to %s outside (%s, %s)", ErrRefused, period, to, lo, hi)
	}
	s.unremind(p, today)
	p.Charge = to
	s.remind(p, today)
	return nil
}

// Cancel ends every period not charged and not in flight.
func (s *lifecycle) Cancel(today Date) error {
	if s.cancelled {
		return ErrRefused
	}
	s.cancelled = true
	for _, p := range s.periods {
		switch p.Status {
		case Scheduled, Paused, Error:
			p.set(Cancelled)
			p.cancelPayable()
			s.unremind(p, today)
		}
	}
	return nil
}

// Waive forgives a SCHEDULED or ERROR period.
func (s *lifecycle) Waive(today, period Date) error {
	p := s.Period(period)
	if p == nil || s.cancelled || (p.Status != Scheduled && p.Status != Error) || p.unresolved() != nil {
		return ErrRefused
	}
	p.set(Waived)
	p.cancelPayable()
	s.unremind(p, today)
	s.extend(today)
	return nil
}

// PayNow is the oldest ERROR period, to charge at once (the caller reports
// the attempt with Attempted); ErrRefused when there is none or an attempt
// is in flight.
func (s *chargesOnDemand) PayNow(today Date) (Due, error) {
	for _, p := range s.periods {
		if p.unresolved() != nil {
			return Due{}, ErrRefused
		}
	}
	for _, p := range s.periods {
		if p.Status == Error {
			return Due{Period: p.Scheduled, Charge: p.Charge, Amount: s.amount, Plan: s.plan}, nil
		}
	}
	return Due{}, ErrRefused
}

// Reactivate (§8 "Reactivation") starts a cancelled subscription again on
// today, with a new amount when amount > 0: it is scheduled by its rule from
// today as a create would — its first period is the rule's first date on or
// after today (and start), at least one term after the last charged period
// (any attempt made), and after every period that ended ahead of its date
// (waived ahead): periods that ended stay as they were. The periods the
// cancel ended ahead of their dates, never attempted, from that date on are
// replaced by the new schedule (Dropped: their records, when the service
// has any, are scheduled again). ErrRefused when it is not cancelled.
func (s *lifecycle) Reactivate(today Date, amount int64) error {
	if !s.cancelled || amount < 0 {
		return ErrRefused
	}
	if amount > 0 {
		s.amount = amount
	}
	lower := max(today, s.start)
	for _, p := range s.periods {
		if p.Charged() || len(p.Attempts) > 0 {
			lower = max(lower, termAfter(p))
		}
	}
	first, _ := s.rule.OnOrAfter(lower)
	for {
		var ended bool
		for _, p := range s.periods {
			if p.Scheduled >= first && !(p.Status == Cancelled && len(p.Attempts) == 0) {
				ended = true
				lower = max(lower, p.Scheduled+1)
			}
		}
		if !ended {
			break
		}
		first, _ = s.rule.OnOrAfter(lower)
	}
	var kept []*Period
	for _, p := range s.periods {
		if p.Scheduled >= first && p.Status == Cancelled && len(p.Attempts) == 0 {
			s.Dropped = append(s.Dropped, p.Scheduled)
			continue
		}
		kept = append(kept, p)
	}
	s.periods, s.cancelled = kept, false
	s.scheduleFrom(first, today)
	return nil
}
