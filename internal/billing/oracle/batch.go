package oracle

import "errors"

// ErrInFlight: a batch collection skips (and reports) a subscription with
// an attempt in flight.
var ErrInFlight = errors.New("oracle: an attempt is in flight: skipped and reported")

// Batch is §8 "Batch collection" for one subscription a batch selects on
// today: it charges the subscription's oldest ERROR period once, exactly as
// pay now would — hard-declined periods included — provided that period's
// charge date lies in [since, until] (NoDate: an open end; §4's time range
// of the ERROR periods). The caller reports the attempt with Attempted.
// ErrInFlight when an attempt of the subscription is in flight (skipped and
// reported); ErrRefused when the batch does not select it (no ERROR period,
// or its oldest is outside the range).
func (s *chargesOnDemand) Batch(today, since, until Date) (Due, error) {
	for _, p := range s.periods {
		if p.unresolved() != nil {
			return Due{}, ErrInFlight
		}
	}
	for _, p := range s.periods {
		if p.Status != Error {
			continue
		}
		if (since != NoDate && p.Charge < since) || (until != NoDate && p.Charge > until) {
			return Due{}, ErrRefused // the oldest is outside: pay now would charge it, not a later one
		}
		return Due{Period: p.Scheduled, Charge: p.Charge, Amount: s.amount, Plan: s.plan}, nil
	}
	return Due{}, ErrRefused
}
