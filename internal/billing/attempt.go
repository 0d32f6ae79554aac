package billing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/billing/settle"
	"github.com/stripe-payments/stripe-payments/internal/lock"
)

// attempt charges a period: claim (conditional write), charge, record.
// An attempt already in flight (a crash, or no answer from Stripe) is
// settled first: within Stripe's idempotency window it is resent with its
// key; past it, or when the resend has no answer either, Stripe is asked for
// the PaymentIntent it made (resolve.go). It returns the subscription as
// written, and whether it was.
func (s *Service) attempt(ctx context.Context, l *lock.Lock, sub Subscription, p Period, proc Process, today dates.Date, rep *Report) (Subscription, bool, error) {
	now := s.now()
	var (
		res      ChargeResult
		resolved bool // res is what Stripe said when asked, not a charge's answer
		// attemptDay: the day the attempt in flight was made, when its
		// answer comes only now (resent or looked up); zero for a new one.
		attemptDay dates.Date
	)
	if p.InFlightKey != "" && !p.InFlightAt.IsZero() {
		attemptDay = dates.In(p.InFlightAt, sub.Location())
	}
	if p.InFlightKey != "" && sub.Status == SubCancelled {
		// Cannot happen: changes are refused while an attempt is in flight.
		s.log.Error("billing job: attempt in flight on a CANCELLED subscription; not charging",
			"account", p.AccountID, "subscription_id", p.SubscriptionID, "billing_date", p.BillingDate.String())
		rep.LeftUnresolved(p)
		return sub, false, nil
	}
	if p.InFlightKey != "" && s.wall().Sub(p.SentAt()) > s.cfg.IdempotencyWindow { // Stripe's time, not a test clock's
		var (
			again bool
			err   error
		)
		sub, p, res, resolved, again, err = s.resolveLost(ctx, sub, p, proc, today, rep)
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
		var (
			skipped bool
			err     error
		)
		p, res, skipped, err = s.claimAndCharge(ctx, l, sub, p, attemptNo, today, now, rep)
		if skipped || err != nil {
			return sub, false, err
		}
	}
	sub, p, err := s.recordOutcome(ctx, sub, p, res, resolved, attemptNo, proc, today, rep)
	if err != nil {
		return sub, false, err
	}
	return s.afterDecline(ctx, l, sub, p, res, attemptDay, today, rep)
}

// claimAndCharge makes attempt n on p at Stripe: a new attempt is claimed
// first (conditional write of its idempotency key), an attempt in flight is
// resent with its key. skipped: the subscription changed since the index
// read (nothing to charge now). The error is non-nil when the outcome is
// unknown (the attempt stays in flight) or the claim failed.
func (s *Service) claimAndCharge(ctx context.Context, l *lock.Lock, sub Subscription, p Period, attemptNo int, today dates.Date, now time.Time, rep *Report) (
	_ Period, res ChargeResult, skipped bool, err error) {
	resent := p.InFlightKey != ""
	if !resent {
		// One successful charge per period (payable.go): the period's
		// earlier PaymentIntent the customer could still pay is cancelled
		// first; when the customer has just paid it, that payment is
		// applied and nothing is charged.
		paid, err := s.cancelPayable(ctx, p)
		if err != nil {
			return p, res, false, fmt.Errorf("before attempt %d on %s %s: %w", attemptNo, p.SubscriptionID, p.BillingDate, err)
		}
		if paid != nil {
			if err := s.applyPaid(ctx, p, paid); err != nil {
				return p, res, false, fmt.Errorf("apply %s, paid by the customer: %w", paid.ID, err)
			}
			rep.Add(func(r *Report) { r.PaidByCustomer++ })
			return p, res, true, nil
		}
		// Claim: re-check on the table that the subscription is still
		// ACTIVE and unchanged, and record the attempt's idempotency key
		// before charging.
		p.InFlightKey, p.InFlightAt, p.InFlightSent = IdempotencyKey(p, attemptNo), now, s.wall()
		if p.Status == Error && (p.NextAttemptDate.IsZero() || p.NextAttemptDate.After(today)) {
			// A pay now ahead of the retry days (or on a period with no
			// next look, hence no index entry): should its outcome be
			// unknown, the next job run must find the period (the index
			// entry is on NextAttemptDate) and resolve it (finding F17).
			p.NextAttemptDate = today
		}
		if p.InitialRunDate.IsZero() {
			p.InitialRunDate = now
		}
		claim := NewTx("claim", now)
		claim.CheckSubscription(sub)
		claim.PutPeriod(&p, true)
		if err := s.store.Commit(ctx, claim); err != nil {
			if errors.Is(err, ErrConflict) {
				rep.Add(func(r *Report) { r.Skipped++ })
				return p, res, true, nil // changed since the index read: nothing to charge now
			}
			return p, res, false, fmt.Errorf("claim: %w", err)
		}
	}
	// A rerun of an attempt in flight reuses its claim: the subscription
	// was re-read under the lock, and no change is accepted while an
	// attempt is in flight, so it is as it was charged (ACTIVE, or
	// PAUSED for the retry of a period charged before the pause).
	if l != nil && !l.Valid() {
		return p, res, false, fmt.Errorf("before charging: %w", lock.ErrNotOwner)
	}
	rep.ChargedOn(p.PaymentDetails.StripeAccount)
	res, err = s.charge(ctx, l, p, attemptNo)
	if err != nil && resent {
		// Within the window Stripe replays a saved 500 for the key: ask
		// it for the PaymentIntent instead. Only a find settles it here:
		// the original request may still be running at Stripe.
		if lk, lerr := s.charger.FindAttempt(ctx, model.AttemptQueryOf(p)); lerr == nil && lk.Found {
			s.log.Info("billing job: unknown outcome resolved by asking Stripe", "account", p.AccountID,
				"subscription_id", p.SubscriptionID, "billing_date", p.BillingDate.String(),
				"payment_intent", lk.Result.PaymentIntent, "found_by", lk.How)
			s.obs.OutcomeResolved(model.OutcomeName(lk.Result.Outcome))
			res, err = lk.Result, nil
		}
	}
	if err != nil {
		s.obs.OutcomeUnknown()
		rep.Add(func(r *Report) { r.Unknown++ })
		rep.LeftUnresolved(p)
		rep.Because(fmt.Sprintf("charge of %s %s: outcome unknown", p.SubscriptionID, p.BillingDate), err)
		return p, res, false, fmt.Errorf("charge %s %s: %w", p.SubscriptionID, p.BillingDate, err)
	}
	return p, res, false, nil
}

// recordOutcome records what Stripe did with attempt n on p (settle):
// resolved says it was looked up, not a charge's answer. It returns the
// subscription and the period as written.
func (s *Service) recordOutcome(ctx context.Context, sub Subscription, p Period, res ChargeResult, resolved bool, attemptNo int,
	proc Process, today dates.Date, rep *Report) (Subscription, Period, error) {
	in := s.settleInput(sub, p, settle.HappenedOf(res.Outcome), res.PaymentIntent, proc, today)
	in.OfAttempt, in.AttemptNo, in.Error, in.DeclineCode, in.Method = true, attemptNo, res.Error, res.DeclineCode, res.Method
	st := settle.Decide(in)
	cause := s.cause("collect", p, today)
	if resolved {
		cause = s.cause("resolve", p, today) // the history says the outcome was looked up
	}
	if err := s.record(ctx, s.log, NewTx(cause, in.Now), &sub, &st, today); err != nil {
		return sub, p, fmt.Errorf("record attempt (the charge is in Stripe; a rerun or its webhook records it): %w", err)
	}
	rep.Add(func(r *Report) {
		if resolved {
			r.Resolved++
		}
		switch res.Outcome {
		case Succeeded:
			r.Succeeded++
		case Processing:
			r.Processing++
		default:
			r.Declined++
		}
	})
	return sub, st.Period, nil
}

// afterDecline follows a decline recorded late: the retry due since the
// attempt's day is made at once, or the period is given up on when its
// stale date has come. It returns the subscription as written.
func (s *Service) afterDecline(ctx context.Context, l *lock.Lock, sub Subscription, p Period, res ChargeResult, attemptDay, today dates.Date, rep *Report) (
	Subscription, bool, error) {
	if res.Outcome == Declined && !p.NotRetried && !attemptDay.IsZero() && attemptDay.Before(today) && sub.Status != SubCancelled {
		// The declined attempt was made on attemptDay and its answer came
		// only now (resent within the idempotency window, or looked up): a
		// retry due since then (its day-1 retry) is due now (finding F14).
		if next, stale := s.cfg.Retry.NextAttempt(p.Due(), attemptDay); !stale && !next.After(today) &&
			!s.cfg.Retry.IsStale(p.Due(), today) {
			retried, _, err := s.attempt(ctx, l, sub, p, ProcRetry, today, rep)
			return retried, true, err
		}
	}
	if res.Outcome == Declined && p.Status == Error && s.cfg.Retry.IsStale(p.Due(), today) {
		// Its answer came on or after the stale date (a pay now, or an
		// attempt resolved late): no retry is left, the period is given up
		// on today, as a retry day would have (a crash before this write
		// leaves it due today in the index: the rerun marks it).
		if err := s.markStale(ctx, &p, ProcRetry, today, rep); err != nil {
			return sub, true, err
		}
	}
	return sub, true, nil
}

// markStale gives up on a failed period past its stale date.
func (s *Service) markStale(ctx context.Context, p *Period, proc Process, today dates.Date, rep *Report) error {
	now := s.now()
	tx := NewTx(s.cause("stale", *p, today), now)
	p.Status, p.Process, p.UpdatedEvent, p.CompletionDate, p.NextAttemptDate = Stale, proc, "stale", now, dates.Date{}
	tx.PutPeriod(p, false)
	if err := s.store.Commit(ctx, tx); err != nil {
		return fmt.Errorf("mark stale: %w", err)
	}
	rep.Add(func(r *Report) { r.Stale++ })
	return nil
}

// charge makes attempt n on p at Stripe, with the attempt's idempotency key.
// The charge stops when the job is cancelled or the lock is lost.
func (s *Service) charge(ctx context.Context, l *lock.Lock, p Period, n int) (ChargeResult, error) {
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	if l != nil {
		defer context.AfterFunc(l.Context(), stop)()
	}
	return s.charger.Charge(cctx, ChargeRequest{
		StripeAccount: p.PaymentDetails.StripeAccount, Customer: p.PaymentDetails.Customer,
		PaymentMethod: p.PaymentDetails.PaymentMethod, Amount: p.Amount, Currency: p.Currency,
		IdempotencyKey: p.InFlightKey, Description: fmt.Sprintf("%s %s", p.SKU, p.BillingDate),
		Metadata: model.AttemptMeta(p, n),
	})
}
