package collect

import (
	"context"
	"fmt"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/billing/settle"
)

// Unknown outcomes (docs/design.md §8 "Failures"). A charge that got no trustworthy
// answer (timeout, 5xx) leaves its period with the attempt in flight
// (InFlightKey, InFlightAt). Nothing else happens to that period until the
// outcome is known:
//
//   - within Stripe's idempotency window, a rerun resends the attempt with
//     its key (Stripe answers with the same PaymentIntent, or executes it
//     if it never started); when that too has no answer, Stripe is asked
//     for the PaymentIntent (below), and only a find settles it: the
//     original request may still be running;
//   - past the window a resend could charge twice, so Stripe is asked
//     first: the Search API by the metadata the attempt set, then the
//     customer's PaymentIntents created since the attempt started (List is
//     strongly consistent; search lags). Found: its outcome is recorded as
//     the attempt's (COMPLETED with a receipt, ACHSENT, or ERROR on the
//     ordinary retry days). Not found: Stripe never made it; the lost
//     attempt is recorded in the history, and only then a new attempt is
//     made (with a new key), or the period is marked STALE when it is past
//     BILLING_STALE_DAYS.
//
// Until then every run that meets the period counts it as unresolved: its
// report is not OK (the CLI exits 1), and the unresolved-periods gauge says
// how many.

// Unknown outcomes (docs/design.md §8 "Failures"). A charge that got no trustworthy
// answer (timeout, 5xx) leaves its period with the attempt in flight
// (InFlightKey, InFlightAt). Nothing else happens to that period until the
// outcome is known:
//
//   - within Stripe's idempotency window, a rerun resends the attempt with
//     its key (Stripe answers with the same PaymentIntent, or executes it
//     if it never started); when that too has no answer, Stripe is asked
//     for the PaymentIntent (below), and only a find settles it: the
//     original request may still be running;
//   - past the window a resend could charge twice, so Stripe is asked
//     first: the Search API by the metadata the attempt set, then the
//     customer's PaymentIntents created since the attempt started (List is
//     strongly consistent; search lags). Found: its outcome is recorded as
//     the attempt's (COMPLETED with a receipt, ACHSENT, or ERROR on the
//     ordinary retry days). Not found: Stripe never made it; the lost
//     attempt is recorded in the history, and only then a new attempt is
//     made (with a new key), or the period is marked STALE when it is past
//     BILLING_STALE_DAYS.
//
// Until then every run that meets the period counts it as unresolved: its
// report is not OK (the CLI exits 1), and the unresolved-periods gauge says
// how many.

// resolveLost settles an attempt in flight for longer than the idempotency
// window by asking Stripe for its PaymentIntent. It returns, with the
// subscription and period as they now are:
//   - resolved: the PaymentIntent was found; res is its outcome, to record
//     as the attempt's;
//   - again: it was not found and the lost attempt is recorded; make a new
//     attempt now;
//   - neither: nothing more to do in this run (Stripe could not be asked:
//     still unresolved; or the period went STALE).
func (c *Collector) resolveLost(ctx context.Context, sub model.Subscription, p model.Period, proc model.Process, today dates.Date, rep *model.Report) (
	_ model.Subscription, _ model.Period, res model.ChargeResult, resolved, again bool, err error) {
	log := c.Log.With("account", p.AccountID, "subscription_id", p.SubscriptionID, "billing_date", p.BillingDate.String(),
		"attempt", p.Attempts+1, "in_flight_since", p.InFlightAt)
	lk, err := c.Charger.FindAttempt(ctx, model.AttemptQueryOf(p))
	if err != nil {
		log.Error("billing job: outcome of an attempt unknown past the idempotency window, and Stripe could not be asked; rerun the job (docs/runbooks/StripePaymentsBillingUnresolvedCharges.md)", "error", err)
		rep.LeftUnresolved(p)
		rep.Because(fmt.Sprintf("asking Stripe about the attempt on %s %s", p.SubscriptionID, p.BillingDate), err)
		return sub, p, res, false, false, nil
	}
	if lk.Found {
		log.Info("billing job: unknown outcome resolved by asking Stripe", "payment_intent", lk.Result.PaymentIntent,
			"found_by", lk.How, "outcome", model.OutcomeName(lk.Result.Outcome))
		c.Obs.OutcomeResolved(model.OutcomeName(lk.Result.Outcome))
		return sub, p, lk.Result, true, false, nil
	}
	// Stripe never made it: the attempt is over. Record it, then charge
	// anew (or give up when the period is too old).
	c.Obs.OutcomeResolved("not_found")
	in := c.rec.Input(sub, p, settle.HappenedLost, "", proc, today)
	st := settle.Decide(in)
	if err := c.rec.Record(ctx, log, model.NewTx(c.Cause("resolve", p, today), in.Now), &sub, &st, today); err != nil {
		return sub, p, res, false, false, fmt.Errorf("record lost attempt: %w", err)
	}
	p, stale := st.Period, st.GaveUp
	rep.Add(func(r *model.Report) {
		r.Resolved++
		if stale {
			r.Stale++
		}
	})
	log.Warn("billing job: no PaymentIntent found for an attempt whose outcome was unknown; recorded as lost", "stale", stale)
	return sub, p, res, false, !stale, nil
}
