package collect

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/billing/settle"
	"github.com/stripe-payments/stripe-payments/internal/lock"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
)

// IsAttemptKey reports whether s is an attempt's idempotency key
// (IdempotencyKey), as opposed to a PaymentIntent's id: the reconciliation
// names an attempt whose outcome is unknown by its key, the only name it
// has until Stripe is asked.
func IsAttemptKey(s string) bool { return strings.HasPrefix(s, "billing:") }

// InFlightRequest names an attempt in flight for ResolveInFlight.
type InFlightRequest struct {
	Account, Subscription string
	BillingDate           dates.Date
	// Key is the attempt's idempotency key as listed: a period whose
	// attempt in flight has another key now (settled since, and a new one
	// made) is left alone.
	Key string
	// MinAge: an attempt sent more recently than this (in real time) is
	// left alone: Stripe may still be working on the original request.
	MinAge time.Duration
	// DryRun: Stripe is asked, nothing is recorded.
	DryRun bool
	// Wait for the account's lock (a collection run holds it) up to this.
	Wait time.Duration
}

// ResolveOutcome is what ResolveInFlight did.
type ResolveOutcome string

const (
	// ResolveNotInFlight: the period has no attempt in flight with that
	// key any more (settled since); nothing was asked.
	ResolveNotInFlight ResolveOutcome = "not_in_flight"
	// ResolveTooYoung: the attempt is younger than MinAge; nothing was asked.
	ResolveTooYoung ResolveOutcome = "too_young"
	// ResolveSettled: the attempt's outcome is recorded (what Stripe
	// made of it, or lost when Stripe never made it).
	ResolveSettled ResolveOutcome = "settled"
	// ResolveLeft: Stripe was asked and nothing was recorded: a dry run,
	// or not found within the idempotency window (the original request
	// may still be running at Stripe; only a find settles it then).
	ResolveLeft ResolveOutcome = "left"
)

// Resolution is what ResolveInFlight found and did, in words for the
// reconciliation's finding.
type Resolution struct {
	Outcome ResolveOutcome
	// Attempt is the number of the attempt in flight; Since when it was sent.
	Attempt int
	Since   time.Time
	// Stripe: what Stripe says ("" when it was not asked).
	Stripe string
	// Action: what was done (or, in a dry run, would be).
	Action string
}

// ResolveInFlight settles an attempt whose outcome is unknown for the
// reconciliation (docs/design.md §11) as a collection run would (resolve.go):
// under the account's billing lock, with the period read again under it,
// Stripe asked at the budget's charges class, the outcome recorded through
// the settle kernel with a history entry of cause "resolve". It never
// charges: past the idempotency window an attempt Stripe never made is
// recorded as lost (the next collection run makes a new one, or the
// period goes STALE); within it only a find settles it (the next
// collection run resends it with its key).
func (c *Collector) ResolveInFlight(ctx context.Context, req InFlightRequest) (Resolution, error) {
	if c.Charger == nil {
		return Resolution{}, errors.New("resolve an attempt in flight: no Stripe charger configured")
	}
	if req.DryRun {
		// Only reads: the lock would hold a collection up for nothing.
		return c.resolveInFlight(ctx, nil, req)
	}
	var res Resolution
	deadline := time.Now().Add(req.Wait)
	for {
		err := c.WithLock(ctx, req.Account, func(ctx context.Context, l *lock.Lock) error {
			var err error
			res, err = c.resolveInFlight(ctx, l, req)
			return err
		})
		if !errors.Is(err, model.ErrLocked) || time.Now().After(deadline) {
			if err != nil {
				return res, fmt.Errorf("resolve attempt %s: %w", req.Key, err)
			}
			return res, nil
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// resolveInFlight is ResolveInFlight with the lock held (l nil: a dry run).
func (c *Collector) resolveInFlight(ctx context.Context, l *lock.Lock, req InFlightRequest) (Resolution, error) {
	// The collection's lookups draw on the budget at the charges class
	// (its charger's); a reconciliation's at background would let a busy
	// poller hold up the settling of a charge.
	ctx = stripebudget.WithClass(ctx, stripebudget.Charges)
	p, err := c.Store.GetPeriod(ctx, req.Account, req.Subscription, req.BillingDate)
	if errors.Is(err, apperr.ErrNotFound) {
		return Resolution{Outcome: ResolveNotInFlight}, nil
	}
	if err != nil {
		return Resolution{}, err
	}
	if p.InFlightKey == "" || p.InFlightKey != req.Key {
		return Resolution{Outcome: ResolveNotInFlight}, nil
	}
	res := Resolution{Attempt: p.Attempts + 1, Since: p.SentAt()}
	sub, err := c.Store.GetSubscription(ctx, req.Account, req.Subscription)
	if err != nil {
		return res, err
	}
	if sub.Status == model.SubCancelled {
		// As the collection: cannot happen (changes are refused while an
		// attempt is in flight), so nothing is recorded on it unseen.
		return res, errors.New("attempt in flight on a CANCELLED subscription; left for an operator")
	}
	svc, err := c.forSub(ctx, sub)
	if err != nil {
		return res, err
	}
	age := svc.Wall().Sub(p.SentAt()) // Stripe's time, not a test clock's
	if age < req.MinAge {
		res.Outcome = ResolveTooYoung
		return res, nil
	}
	today := svc.Today(sub)
	proc := model.ProcInitial
	if p.Status == model.Error {
		proc = model.ProcRetry
	}
	rep := &model.Report{Job: "reconcile", Date: today.String()}
	pastWindow := age > svc.Cfg.IdempotencyWindow
	if pastWindow && !req.DryRun {
		if l != nil && !l.Valid() {
			return res, fmt.Errorf("before resolving: %w", lock.ErrNotOwner)
		}
		// The collection's own path: ask, and record the attempt as lost
		// when Stripe never made it.
		sub, p2, looked, resolved, again, err := svc.resolveLost(ctx, sub, p, proc, today, rep)
		if err != nil {
			return res, err
		}
		switch {
		case resolved:
			res.Stripe = stripeSays(looked)
			return svc.settleFound(ctx, sub, p, looked, proc, today, rep, res)
		case again || p2.Status == model.Stale:
			res.Outcome, res.Stripe = ResolveSettled, "no PaymentIntent of the attempt"
			res.Action = fmt.Sprintf("settled as lost (not charged): period %s, attempt %d recorded", p2.Status, res.Attempt)
			if p2.Status != model.Stale {
				res.Action += "; the next collection run makes a new attempt"
			}
			return res, nil
		}
		res.Outcome, res.Stripe, res.Action = ResolveLeft, "unknown", "still unknown: "+rep.Why()
		return res, errors.New(res.Action)
	}
	lk, err := svc.Charger.FindAttempt(ctx, model.AttemptQueryOf(p))
	if err != nil {
		return res, fmt.Errorf("asking Stripe about attempt %d: %w", res.Attempt, err)
	}
	res.Outcome = ResolveLeft
	switch {
	case !lk.Found && pastWindow: // a dry run
		res.Stripe, res.Action = "no PaymentIntent of the attempt", "none (dry run): would settle it as lost (not charged)"
		return res, nil
	case !lk.Found:
		res.Stripe = "no PaymentIntent of the attempt (yet)"
		res.Action = "still unknown: within Stripe's idempotency window the original request may still be running; " +
			"the next collection run resends it with its key"
		return res, nil
	case req.DryRun:
		res.Stripe = stripeSays(lk.Result)
		res.Action = "none (dry run): would record it as attempt " + strconv.Itoa(res.Attempt) + "'s outcome"
		return res, nil
	}
	if l != nil && !l.Valid() {
		return res, fmt.Errorf("before recording: %w", lock.ErrNotOwner)
	}
	svc.Log.Info("reconciliation: unknown outcome resolved by asking Stripe", "account", p.AccountID,
		"subscription_id", p.SubscriptionID, "billing_date", p.BillingDate.String(),
		"payment_intent", lk.Result.PaymentIntent, "found_by", lk.How)
	svc.Obs.OutcomeResolved(model.OutcomeName(lk.Result.Outcome))
	res.Stripe = stripeSays(lk.Result)
	return svc.settleFound(ctx, sub, p, lk.Result, proc, today, rep, res)
}

// settleFound records the PaymentIntent Stripe made for p's attempt in
// flight as its outcome, as the collection does (attempt, cause
// "resolve"). A decline's retry is the next collection run's: the
// reconciliation never charges.
func (c *Collector) settleFound(ctx context.Context, sub model.Subscription, p model.Period, found model.ChargeResult, proc model.Process, today dates.Date,
	rep *model.Report, res Resolution) (Resolution, error) {
	in := c.rec.Input(sub, p, settle.HappenedOf(found.Outcome), found.PaymentIntent, proc, today)
	answered(&in, found, p.Attempts+1)
	st := settle.Decide(in)
	if err := c.rec.Record(ctx, c.Log, model.NewTx(c.Cause("resolve", p, today), in.Now), &sub, &st, today); err != nil {
		return res, fmt.Errorf("record attempt (the charge is in Stripe; a rerun or its webhook records it): %w", err)
	}
	counted(rep, found, true)
	after := st.Period
	res.Outcome = ResolveSettled
	res.Action = fmt.Sprintf("settled as %s from %s", after.Status, found.PaymentIntent)
	if after.Status == model.Completed {
		res.Action += ", its receipt recorded"
	}
	return res, nil
}

// stripeSays is a found PaymentIntent in words.
func stripeSays(r model.ChargeResult) string {
	s := "payment_intent " + r.PaymentIntent + " " + model.OutcomeName(r.Outcome)
	if r.Outcome == model.Declined && r.DeclineCode != "" {
		s += " (" + r.DeclineCode + ")"
	}
	return s
}
