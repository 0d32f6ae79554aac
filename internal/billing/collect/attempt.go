package collect

import (
	"context"
	"errors"
	"fmt"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/billing/settle"
	"github.com/stripe-payments/stripe-payments/internal/lock"
)

// attempt charges period p of sub, holding the account's lock l, in one
// sequence:
//
//  1. an attempt already in flight (a crash, or no answer from Stripe) is
//     settled first: within Stripe's idempotency window it is resent with
//     its key; past it Stripe is asked for the PaymentIntent it made
//     (resolve.go);
//  2. a new attempt cancels the period's PaymentIntent the customer could
//     still pay (package outcome, payable.go), then is claimed: a conditional write
//     of its idempotency key, on the subscription as read;
//  3. Stripe charges (the Charger), with the attempt's key;
//  4. the kernel settles the answer (settle.Decide) and the Recorder
//     writes it (outcome.Recorder.Record);
//  5. a decline whose retry is due already is retried (afterDecline).
//
// It returns the subscription as written, and whether it was.
func (c *Collector) attempt(ctx context.Context, l *lock.Lock, sub model.Subscription, p model.Period, proc model.Process, today dates.Date, rep *model.Report) (model.Subscription, bool, error) {
	now := c.Now()
	var (
		res      model.ChargeResult
		resolved bool // res is what Stripe said when asked, not a charge's answer
		// attemptDay: the day the attempt in flight was made, when its
		// answer comes only now (resent or looked up); zero for a new one.
		attemptDay dates.Date
	)
	if p.InFlightKey != "" && !p.InFlightAt.IsZero() {
		attemptDay = dates.In(p.InFlightAt, sub.Location())
	}
	if p.InFlightKey != "" && sub.Status == model.SubCancelled {
		// Cannot happen: changes are refused while an attempt is in flight.
		c.Log.Error("billing job: attempt in flight on a CANCELLED subscription; not charging",
			"account", p.AccountID, "subscription_id", p.SubscriptionID, "billing_date", p.BillingDate.String())
		rep.LeftUnresolved(p)
		return sub, false, nil
	}
	if p.InFlightKey != "" && c.Wall().Sub(p.SentAt()) > c.Cfg.IdempotencyWindow { // Stripe's time, not a test clock's
		var (
			again bool
			err   error
		)
		sub, p, res, resolved, again, err = c.resolveLost(ctx, sub, p, proc, today, rep)
		if err != nil || (!resolved && !again) {
			return sub, false, err
		}
		if again {
			attemptDay = dates.Date{} // the lost attempt is recorded; a new one is made today
			if l != nil && !l.Valid() {
				return sub, false, fmt.Errorf("before charging: %w", lock.ErrNotOwner)
			}
		}
	}
	attemptNo := p.Attempts + 1
	if !resolved {
		resent := p.InFlightKey != ""
		if !resent && model.Payable(p) {
			// One successful charge per period: the period's earlier
			// PaymentIntent the customer could still pay is cancelled
			// first; when the customer has just paid it, that payment is
			// applied and nothing is charged.
			paid, err := c.rec.CancelPayable(ctx, p)
			if err != nil {
				return sub, false, fmt.Errorf("before attempt %d on %s %s: %w", attemptNo, p.SubscriptionID, p.BillingDate, err)
			}
			if paid != nil {
				if err := c.rec.ApplyPaid(ctx, p, paid); err != nil {
					return sub, false, fmt.Errorf("apply %s, paid by the customer: %w", paid.ID, err)
				}
				rep.Add(func(r *model.Report) { r.PaidByCustomer++ })
				return sub, false, nil
			}
		}
		if !resent {
			// Claim: re-check on the table that the subscription is still
			// ACTIVE and unchanged, and record the attempt's idempotency
			// key before charging.
			p.InFlightKey, p.InFlightAt, p.InFlightSent = model.IdempotencyKey(p, attemptNo), now, c.Wall()
			if p.Status == model.Error && (p.NextAttemptDate.IsZero() || p.NextAttemptDate.After(today)) {
				// A pay now ahead of the retry days (or on a period with
				// no next look, hence no index entry): should its outcome
				// be unknown, the next job run must find the period (the
				// index entry is on NextAttemptDate) and resolve it.
				p.NextAttemptDate = today
			}
			if p.InitialRunDate.IsZero() {
				p.InitialRunDate = now
			}
			claim := model.NewTx("claim", now)
			claim.CheckSubscription(sub)
			claim.PutPeriod(&p, true)
			if err := c.Store.Commit(ctx, claim); err != nil {
				if errors.Is(err, model.ErrConflict) {
					rep.Add(func(r *model.Report) { r.Skipped++ })
					return sub, false, nil // changed since the index read: nothing to charge now
				}
				return sub, false, fmt.Errorf("claim: %w", err)
			}
		}
		// A rerun of an attempt in flight reuses its claim: the
		// subscription was re-read under the lock, and no change is
		// accepted while an attempt is in flight, so it is as it was
		// charged (ACTIVE, or PAUSED for the retry of a period charged
		// before the pause).
		if l != nil && !l.Valid() {
			return sub, false, fmt.Errorf("before charging: %w", lock.ErrNotOwner)
		}
		rep.ChargedOn(p.PaymentDetails.StripeAccount)
		// The charge, with the attempt's idempotency key, stops when the
		// job is cancelled or the lock is lost.
		cctx, stop := context.WithCancel(ctx)
		defer stop()
		if l != nil {
			defer context.AfterFunc(l.Context(), stop)()
		}
		var err error
		res, err = c.Charger.Charge(cctx, chargeRequest(p, attemptNo))
		if err != nil && resent {
			// Within the window Stripe replays a saved 500 for the key:
			// ask it for the PaymentIntent instead. Only a find settles it
			// here: the original request may still be running at Stripe.
			if lk, lerr := c.Charger.FindAttempt(ctx, model.AttemptQueryOf(p)); lerr == nil && lk.Found {
				c.Log.Info("billing job: unknown outcome resolved by asking Stripe", "account", p.AccountID,
					"subscription_id", p.SubscriptionID, "billing_date", p.BillingDate.String(),
					"payment_intent", lk.Result.PaymentIntent, "found_by", lk.How)
				c.Obs.OutcomeResolved(model.OutcomeName(lk.Result.Outcome))
				res, err = lk.Result, nil
			}
		}
		if err != nil {
			c.Obs.OutcomeUnknown()
			rep.Add(func(r *model.Report) { r.Unknown++ })
			rep.LeftUnresolved(p)
			rep.Because(fmt.Sprintf("charge of %s %s: outcome unknown", p.SubscriptionID, p.BillingDate), err)
			return sub, false, fmt.Errorf("charge %s %s: %w", p.SubscriptionID, p.BillingDate, err)
		}
	}
	// Settle: the kernel decides what the answer does to the period, the
	// Recorder writes it (resolved: the history says it was looked up).
	in := c.rec.Input(sub, p, settle.HappenedOf(res.Outcome), res.PaymentIntent, proc, today)
	answered(&in, res, attemptNo)
	st := settle.Decide(in)
	cause := c.Cause("collect", p, today)
	if resolved {
		cause = c.Cause("resolve", p, today)
	}
	if err := c.rec.Record(ctx, c.Log, model.NewTx(cause, in.Now), &sub, &st, today); err != nil {
		return sub, false, fmt.Errorf("record attempt (the charge is in Stripe; a rerun or its webhook records it): %w", err)
	}
	counted(rep, res, resolved)
	if res.Outcome == model.Declined {
		return c.afterDecline(ctx, l, sub, st.Period, attemptDay, today, rep)
	}
	return sub, true, nil
}

// chargeRequest is attempt n on p, with the attempt's idempotency key.
func chargeRequest(p model.Period, n int) model.ChargeRequest {
	return model.ChargeRequest{
		StripeAccount: p.PaymentDetails.StripeAccount, Customer: p.PaymentDetails.Customer,
		PaymentMethod: p.PaymentDetails.PaymentMethod, Amount: p.Amount, Currency: p.Currency,
		IdempotencyKey: p.InFlightKey, Description: fmt.Sprintf("%s %s", p.SKU, p.BillingDate),
		Metadata: model.AttemptMeta(p, n),
	}
}

// answered completes the kernel's input with Stripe's answer to attempt
// n (a charge's, or a lookup's).
func answered(in *settle.Input, res model.ChargeResult, n int) {
	in.OfAttempt, in.AttemptNo, in.Error, in.DeclineCode, in.Method = true, n, res.Error, res.DeclineCode, res.Method
}

// counted adds an answer recorded to the run's report.
func counted(rep *model.Report, res model.ChargeResult, resolved bool) {
	rep.Add(func(r *model.Report) {
		if resolved {
			r.Resolved++
		}
		switch res.Outcome {
		case model.Succeeded:
			r.Succeeded++
		case model.Processing:
			r.Processing++
		default:
			r.Declined++
		}
	})
}

// afterDecline follows a decline recorded late: the retry due since the
// attempt's day is made at once, or the period is given up on when its
// stale date has come. It returns the subscription as written.
func (c *Collector) afterDecline(ctx context.Context, l *lock.Lock, sub model.Subscription, p model.Period, attemptDay, today dates.Date, rep *model.Report) (
	model.Subscription, bool, error) {
	if !p.NotRetried && !attemptDay.IsZero() && attemptDay.Before(today) && sub.Status != model.SubCancelled {
		// The declined attempt was made on attemptDay and its answer came
		// only now (resent within the idempotency window, or looked up): a
		// retry due since then (its day-1 retry) is due now.
		if next, stale := c.Cfg.Retry.NextAttempt(p.Due(), attemptDay); !stale && !next.After(today) &&
			!c.Cfg.Retry.IsStale(p.Due(), today) {
			retried, _, err := c.attempt(ctx, l, sub, p, model.ProcRetry, today, rep)
			return retried, true, err
		}
	}
	if p.Status == model.Error && c.Cfg.Retry.IsStale(p.Due(), today) {
		// Its answer came on or after the stale date (a pay now, or an
		// attempt resolved late): no retry is left, the period is given up
		// on today, as a retry day would have (a crash before this write
		// leaves it due today in the index: the rerun marks it).
		if err := c.markStale(ctx, &p, model.ProcRetry, today, rep); err != nil {
			return sub, true, err
		}
	}
	return sub, true, nil
}

// markStale gives up on a failed period past its stale date.
func (c *Collector) markStale(ctx context.Context, p *model.Period, proc model.Process, today dates.Date, rep *model.Report) error {
	now := c.Now()
	tx := model.NewTx(c.Cause("stale", *p, today), now)
	p.Status, p.Process, p.UpdatedEvent, p.CompletionDate, p.NextAttemptDate = model.Stale, proc, "stale", now, dates.Date{}
	tx.PutPeriod(p, false)
	if err := c.Store.Commit(ctx, tx); err != nil {
		return fmt.Errorf("mark stale: %w", err)
	}
	rep.Add(func(r *model.Report) { r.Stale++ })
	return nil
}
