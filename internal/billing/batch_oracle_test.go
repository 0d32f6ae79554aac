package billing_test

import (
	"context"
	"errors"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/oracle"
)

// batch is an operator's batch collection selecting the sequence's account
// (docs/design.md §8 "Batch collection"), half the time with a time range: the
// service's selection must be the model's (the oldest ERROR period in the
// range, or the subscription skipped while an attempt is in flight, or not
// selected), and its charge the one the model expects.
func (w *oracleWorld) batch(q *oracleSeq, day dates.Date, oldest oracle.Date) {
	ctx := context.Background()
	od := oracle.MustParse(day.String())
	since, until := oracle.NoDate, oracle.NoDate
	sel := billing.BatchSelection{AccountIDs: []string{q.account}}
	if q.rng.IntN(2) == 0 {
		since = od.AddDays(-q.rng.IntN(40))
	}
	if q.rng.IntN(4) == 0 {
		until = od.AddDays(-q.rng.IntN(10))
		if since != oracle.NoDate && until < since {
			since = oracle.NoDate
		}
	}
	if oldest != oracle.NoDate && q.rng.IntN(4) != 0 {
		// Mostly a range that holds the oldest ERROR period's charge date
		// (the batch an operator runs after an incident); else the random
		// one, which may leave it out.
		if since != oracle.NoDate && since > oldest {
			since = oldest
		}
		if until != oracle.NoDate && until < oldest {
			until = oldest
		}
	}
	if since != oracle.NoDate {
		sel.Since = dates.MustParse(since.String())
	}
	if until != oracle.NoDate {
		sel.Until = dates.MustParse(until.String())
	}
	due, merr := q.model.Batch(od, since, until)
	cands, err := w.e.Service.SelectBatch(ctx, sel)
	if err != nil {
		w.fail(q, day, "batch selection %+v: %v", sel, err)
		return
	}
	switch {
	case errors.Is(merr, oracle.ErrRefused):
		if len(cands) != 0 {
			w.fail(q, day, "batch %+v selected %+v; the rules select nothing", sel, cands)
		}
		w.stat("op:batch:not-selected")
		return
	case errors.Is(merr, oracle.ErrInFlight):
		if len(cands) != 1 || cands[0].Skip != billing.SkipInFlight {
			w.fail(q, day, "batch %+v selected %+v; the rules skip it (an attempt in flight)", sel, cands)
		}
		w.stat("op:batch:in-flight")
		return
	case merr != nil:
		w.fail(q, day, "batch: the model: %v", merr)
		return
	}
	if len(cands) != 1 || cands[0].Skip != "" || cands[0].BillingDate.String() != due.Period.String() {
		w.fail(q, day, "batch %+v selected %+v; the rules charge the period %s", sel, cands, due.Period)
		return
	}
	q.logf(day, "batch (%s)", due.Period)
	q.touched = true
	q.expectPays = append(q.expectPays, due)
	res, err := w.e.Service.BatchCharge(ctx, q.account, q.subID, cands[0].BillingDate, nil, func(billing.BatchAttempt) error { return nil })
	if err != nil {
		w.downMu.Lock()
		lost := q.in.StripeAccount != "" && w.down[q.in.StripeAccount] == day
		w.downMu.Unlock()
		if !lost {
			w.fail(q, day, "batch refused with an ERROR period %s: %v", due.Period, err)
			return
		}
	} else if res.Outcome == billing.BatchNothing || res.Outcome == billing.BatchSkippedInFlight {
		w.fail(q, day, "batch did not charge the ERROR period %s: %s", due.Period, res.Outcome)
		return
	}
	w.stat("op:batch")
}
