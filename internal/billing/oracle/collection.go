package oracle

import (
	"fmt"
	"slices"
)

// The days passing: reminders, the day's collection and the outcomes
// Stripe reports.

// Sent records the reminder for payDate as sent on day; an error when no
// reminder for that date may go out that day.
func (s *dailyJobs) Sent(day, payDate Date) error {
	for i := range s.reminders {
		r := &s.reminders[i]
		if r.PayDate == payDate && r.Sent == NoDate && r.From <= day && day <= r.To {
			r.Sent = day
			return nil
		}
	}
	return fmt.Errorf("oracle: no reminder for %s may go out on %s", payDate, day)
}

// Missing are the reminders that should have gone out by the end of today.
func (s *dailyJobs) Missing(today Date) []Reminder {
	var out []Reminder
	for _, r := range s.reminders {
		if r.Sent == NoDate && r.To <= today {
			out = append(out, r)
		}
	}
	return out
}

// Collect is the day's collection: unresolved outcomes are resolved first,
// paused periods whose date came are skipped, failed ones past the stale
// threshold are STALE; it returns the charges to make today: periods whose
// charge date is today and failed ones on a retry day.
func (s *dailyJobs) Collect(today Date) []Due {
	for _, p := range s.periods {
		if a := p.unresolved(); a != nil {
			a.Unresolved = false
			s.apply(p, *a, today)
		}
	}
	var due []Due
	for _, p := range s.periods {
		switch {
		case p.Status == Paused && p.Charge <= today:
			p.set(PausedSkipped)
		case p.Status == Scheduled && p.Charge <= today:
			due = append(due, Due{Period: p.Scheduled, Charge: p.Charge, Amount: s.amount, Plan: s.plan})
		case p.Status == Error && int(today-p.Charge) >= s.cfg.StaleDays:
			p.set(Stale)
		case p.Status == Error && p.DueAgain && !s.attemptedOn(p, today):
			due = append(due, Due{Period: p.Scheduled, Charge: p.Charge, Amount: s.amount, Plan: s.plan})
		case p.Status == Error && !p.NotRetried && slices.Contains(s.cfg.RetryDays, int(today-p.Charge)) && !s.attemptedOn(p, today):
			due = append(due, Due{Period: p.Scheduled, Charge: p.Charge, Amount: s.amount, Plan: s.plan})
		}
	}
	s.extend(today)
	return due
}

func (s *state) attemptedOn(p *Period, day Date) bool {
	for _, a := range p.Attempts {
		if a.Day == day {
			return true
		}
	}
	return false
}

// Attempted records one charge of the period dated period (scheduled or
// charge date) made on today. unknown: the service did not get the answer.
func (s *outcomes) Attempted(today, period Date, amount int64, pi string, o Outcome, unknown bool) error {
	p := s.Period(period)
	if p == nil {
		return fmt.Errorf("oracle: no period %s", period)
	}
	p.cancelPayable() // before a new attempt (customer.go)
	p.DueAgain = false
	a := Attempt{Day: today, Amount: amount, Outcome: o, PI: pi, Unresolved: unknown, Plan: s.plan}
	p.Attempts = append(p.Attempts, a)
	if !unknown {
		s.apply(p, a, today)
	}
	return nil
}

// apply records what Stripe did with a, learned on day.
func (s *state) apply(p *Period, a Attempt, day Date) {
	switch a.Outcome {
	case Succeeded:
		s.succeed(p, a, day)
	case Declined:
		p.set(Error)
		p.NotRetried = false
	case HardDeclined:
		p.set(Error)
		p.NotRetried = true
	case Processing:
		p.set(ACHSent)
	}
}

func (s *state) succeed(p *Period, a Attempt, day Date) {
	p.set(Completed)
	s.receipts = append(s.receipts, Receipt{Period: p.Scheduled, PI: a.PI, Amount: a.Amount, Processed: day, Plan: a.Plan})
	s.charged(a)
}

func (s *state) attempt(pi string) (*Period, *Attempt) {
	for _, p := range s.periods {
		for i := range p.Attempts {
			if p.Attempts[i].PI == pi {
				return p, &p.Attempts[i]
			}
		}
	}
	return nil, nil
}

// Settled is a bank debit's outcome arriving on day: COMPLETED, or ERROR
// (CANCELLED when the subscription was cancelled meanwhile).
func (s *outcomes) Settled(day Date, pi string, ok bool) error {
	p, a := s.attempt(pi)
	if p == nil || p.Status != ACHSent {
		return fmt.Errorf("oracle: %s is not a bank debit in flight", pi)
	}
	switch {
	case ok:
		a.Outcome = Succeeded
		s.succeed(p, *a, day)
	case s.cancelled:
		a.Outcome = Declined
		p.set(Cancelled)
	default:
		a.Outcome = Declined
		p.set(Error)
	}
	return nil
}

// Refunded is a full refund of a successful charge.
func (s *outcomes) Refunded(_ Date, pi string) error {
	p, _ := s.attempt(pi)
	if p == nil || p.Status != Completed {
		return fmt.Errorf("oracle: %s is not a completed charge", pi)
	}
	p.set(Refunded)
	return nil
}

// Busy reports whether today is a day a period of s is due, retried,
// skipped or marked stale, or an attempt is in flight: an operation then
// would race the day's job, on which §8 is silent.
func (s *dailyJobs) Busy(today Date) bool {
	for _, p := range s.periods {
		switch {
		case p.unresolved() != nil, p.Status == ACHSent:
			return true
		case (p.Status == Scheduled || p.Status == Paused) && p.Charge == today:
			return true
		case p.Status == Error && (slices.Contains(s.cfg.RetryDays, int(today-p.Charge)) || int(today-p.Charge) >= s.cfg.StaleDays || p.DueAgain):
			return true
		}
	}
	return false
}
