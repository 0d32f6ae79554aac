package collect

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/lock"
)

// docs/design.md §8 "Collections triggered by the platform": the platform
// knows when a member has money (income detected, a first balance) and
// says so; the account's unpaid periods are then collected at once, oldest
// first, under the account's lock, each with a new attempt key and its own
// amount, process WEBHOOK (income) or WEBHOOK_BALANCE (balance). Unpaid
// means ERROR: a period whose charge date has not come is the scheduled
// run's, and a trigger never charges ahead of it. The intake (the queue,
// the API, the durable record and its processor) is package
// internal/billing/trigger; this file is the collector's side it calls.
//
// Limits: one triggered attempt per period per model.Config.TriggerMinGap
// (Period.TriggeredAt, written with the attempt's claim, so the limit holds
// across replicas and restarts); a hard-declined period waits until its
// payment method is another one than the one refused; an attempt in flight
// is settled by the collection job first; a period past its stale date is
// the job's to mark.

// Per-period outcomes of a trigger (TriggeredPeriod.Outcome).
const (
	TriggeredPaid       = "paid"       // the charge succeeded (or the customer had just paid)
	TriggeredProcessing = "processing" // a bank debit, settling later
	TriggeredDeclined   = "declined"   // the period stays ERROR, its retries go on
	// TriggeredTooSoon: a trigger already made an attempt on the period
	// within BILLING_TRIGGER_MIN_GAP.
	TriggeredTooSoon = "too_soon"
	// TriggeredWaitsForMethod: hard-declined, and its payment method is
	// still the one refused.
	TriggeredWaitsForMethod = "waits_for_payment_method"
	// TriggeredInFlight: an attempt of the subscription is in flight; the
	// collection job settles it first.
	TriggeredInFlight = "in_flight"
	// TriggeredStale: past its stale date; the collection job marks it.
	TriggeredStale = "stale"
	// TriggeredChanged: the subscription changed under the claim; nothing
	// was charged.
	TriggeredChanged = "changed"
	// TriggeredFailed: the attempt returned an error (its outcome may be
	// unknown: the period keeps the attempt in flight for the collection
	// job to resolve).
	TriggeredFailed = "failed"
)

// Outcomes of a whole trigger (TriggerResult.Outcome): a closed set, the
// metrics' label.
const (
	TriggerCollected      = "collected"       // at least one period paid
	TriggerProcessing     = "processing"      // none paid, a bank debit submitted
	TriggerDeclined       = "declined"        // attempts made, none paid
	TriggerNotAttempted   = "not_attempted"   // unpaid periods, none tried (gap, hard decline, in flight, stale)
	TriggerNothingUnpaid  = "nothing_unpaid"  // the account owes nothing
	TriggerUnknownAccount = "unknown_account" // no subscription of the account: ignored
	TriggerFailed         = "failed"          // an attempt returned an error
)

// TriggerOutcomes lists every TriggerResult.Outcome (the metrics' label set).
var TriggerOutcomes = []string{TriggerCollected, TriggerProcessing, TriggerDeclined, TriggerNotAttempted,
	TriggerNothingUnpaid, TriggerUnknownAccount, TriggerFailed}

// TriggeredPeriod is what a trigger did with one unpaid period.
type TriggeredPeriod struct {
	SubscriptionID string
	BillingDate    dates.Date
	Amount         int64
	Currency       string
	Outcome        string
	// AttemptNo is the attempt made (0: none).
	AttemptNo     int
	PaymentIntent string
	DeclineCode   string
	Error         string
}

// TriggerResult is what one trigger did.
type TriggerResult struct {
	Outcome string
	Process model.Process
	// Today is the day the trigger acted on (a test clock's for an account
	// on one; the first subscription's when they differ).
	Today    dates.Date
	Periods  []TriggeredPeriod
	Attempts int
}

// ValidTriggerProcess reports whether proc is a triggered collection's.
func ValidTriggerProcess(proc model.Process) bool {
	return proc == model.ProcWebhook || proc == model.ProcWebhookBalance
}

// unpaid is one ERROR period a trigger looks at, with its subscription and
// the service on the subscription's clock.
type unpaid struct {
	svc      *Collector
	sub      model.Subscription
	p        model.Period
	inFlight bool // an attempt of the subscription is in flight
}

// CollectTriggered collects account's unpaid periods for a platform trigger
// (process proc: WEBHOOK or WEBHOOK_BALANCE), under the account's lock
// (ErrLocked: nothing happened, try again shortly). The error is non-nil
// only when nothing was charged, so the caller may try the trigger again;
// a failure after an attempt is in the result (TriggerFailed), since trying
// the whole trigger again would not be the same trigger any more.
func (c *Collector) CollectTriggered(ctx context.Context, account string, proc model.Process) (TriggerResult, error) {
	out := TriggerResult{Process: proc, Periods: []TriggeredPeriod{}}
	if !ValidTriggerProcess(proc) {
		return out, fmt.Errorf("collect triggered: process %q is not a trigger's", proc)
	}
	if !model.ValidID(account) {
		return out, fmt.Errorf("collect triggered: account %q is not a valid id", account)
	}
	if c.Charger == nil {
		return out, errors.New("collect triggered: no Stripe charger configured")
	}
	err := c.WithLock(ctx, account, func(ctx context.Context, l *lock.Lock) error {
		list, known, err := c.unpaidOf(ctx, account)
		if err != nil {
			return err
		}
		if !known {
			out.Outcome = TriggerUnknownAccount
			return nil
		}
		if len(list) > 0 {
			out.Today = list[0].svc.Today(list[0].sub)
		}
		for _, u := range list {
			tp, err := u.svc.triggerOne(ctx, l, u, proc)
			out.Periods = append(out.Periods, tp)
			if tp.AttemptNo > 0 {
				out.Attempts++
			}
			if err != nil {
				if out.Attempts == 0 && tp.AttemptNo == 0 {
					return err // nothing charged: the trigger may be tried again
				}
				break // the rest waits: Stripe or the store is failing
			}
		}
		out.Outcome = triggerOutcome(out.Periods)
		return nil
	})
	if err != nil {
		return TriggerResult{Process: proc, Periods: []TriggeredPeriod{}}, err
	}
	return out, nil
}

// unpaidOf lists the account's ERROR periods oldest first (by charge date,
// then subscription); known is false when the account has no subscription.
// Cancelled subscriptions are left out: their ERROR periods end CANCELLED
// at their next look.
func (c *Collector) unpaidOf(ctx context.Context, account string) (list []unpaid, known bool, err error) {
	cursor := ""
	for {
		page, err := c.Store.ListSubscriptions(ctx, account, 100, cursor)
		if err != nil {
			return nil, false, fmt.Errorf("subscriptions of %s: %w", account, err)
		}
		for _, sub := range page.Items {
			known = true
			if sub.Status == model.SubCancelled {
				continue
			}
			svc, err := c.forSub(ctx, sub) // its test clock's "today", if it has one
			if err != nil {
				return nil, false, err
			}
			periods, err := c.Store.ListPeriods(ctx, account, sub.SubscriptionID)
			if err != nil {
				return nil, false, fmt.Errorf("periods of %s: %w", sub.SubscriptionID, err)
			}
			inFlight := false
			for _, p := range periods {
				inFlight = inFlight || p.InFlightKey != ""
			}
			for _, p := range periods {
				if p.Status == model.Error {
					list = append(list, unpaid{svc: svc, sub: sub, p: p, inFlight: inFlight})
				}
			}
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	sort.SliceStable(list, func(i, j int) bool {
		a, b := list[i].p, list[j].p
		if !a.Due().Equal(b.Due()) {
			return a.Due().Before(b.Due())
		}
		if a.SubscriptionID != b.SubscriptionID {
			return a.SubscriptionID < b.SubscriptionID
		}
		return a.BillingDate.Before(b.BillingDate)
	})
	return list, known, nil
}

// triggerOne makes the triggered attempt on one unpaid period, or says why
// not. s is the service on the period's subscription's clock.
func (c *Collector) triggerOne(ctx context.Context, l *lock.Lock, u unpaid, proc model.Process) (TriggeredPeriod, error) {
	p, sub := u.p, u.sub
	tp := TriggeredPeriod{SubscriptionID: p.SubscriptionID, BillingDate: p.BillingDate, Amount: p.Amount, Currency: p.Currency,
		PaymentIntent: p.TransactionID, DeclineCode: p.DeclineCode}
	now, today := c.Now(), c.Today(sub)
	switch {
	case u.inFlight:
		tp.Outcome = TriggeredInFlight
		return tp, nil
	case c.Cfg.Retry.IsStale(p.Due(), today):
		tp.Outcome = TriggeredStale
		return tp, nil
	case p.NotRetried && (p.HardDeclinedMethod == "" || p.HardDeclinedMethod == p.PaymentDetails.PaymentMethod):
		tp.Outcome = TriggeredWaitsForMethod
		return tp, nil
	case !p.TriggeredAt.IsZero() && now.Sub(p.TriggeredAt) < c.Cfg.TriggerMinGap:
		tp.Outcome = TriggeredTooSoon
		return tp, nil
	}
	// The claim writes TriggeredAt with the attempt's key: the gap holds
	// for every replica from the moment the attempt may reach Stripe.
	p.TriggeredAt = now
	tp.AttemptNo = p.Attempts + 1
	rep := &model.Report{Job: "trigger"}
	_, _, err := c.attempt(ctx, l, sub, p, proc, today, rep)
	if err != nil {
		if rep.Unknown == 0 && !claimed(ctx, c, p) {
			tp.AttemptNo = 0 // nothing was claimed, so nothing was sent
		}
		tp.Outcome, tp.Error = TriggeredFailed, err.Error()
		return tp, err
	}
	if rep.Skipped > 0 {
		tp.Outcome, tp.AttemptNo = TriggeredChanged, 0
		return tp, nil
	}
	after, err := c.Store.GetPeriod(ctx, p.AccountID, p.SubscriptionID, p.BillingDate)
	if err != nil {
		tp.Outcome, tp.Error = TriggeredFailed, fmt.Sprintf("read the period after the attempt: %v", err)
		return tp, nil // the attempt is recorded; only this read failed
	}
	if rep.PaidByCustomer > 0 {
		tp.AttemptNo = 0 // the customer had paid an earlier PaymentIntent: nothing charged
	}
	tp.PaymentIntent, tp.DeclineCode = after.TransactionID, after.DeclineCode
	switch after.Status {
	case model.Completed, model.Refunded:
		tp.Outcome = TriggeredPaid
	case model.ACHSent:
		tp.Outcome = TriggeredProcessing
	default:
		tp.Outcome = TriggeredDeclined
	}
	return tp, nil
}

// claimed reports whether the attempt on p was claimed (its key is on the
// period): an error after the claim may have reached Stripe.
func claimed(ctx context.Context, c *Collector, p model.Period) bool {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	cur, err := c.Store.GetPeriod(rctx, p.AccountID, p.SubscriptionID, p.BillingDate)
	if err != nil {
		return true // cannot tell: say it may have been sent
	}
	return cur.Attempts > p.Attempts || cur.InFlightKey == model.IdempotencyKey(p, p.Attempts+1)
}

// triggerOutcome sums up what a trigger did with each period.
func triggerOutcome(ps []TriggeredPeriod) string {
	if len(ps) == 0 {
		return TriggerNothingUnpaid
	}
	has := map[string]bool{}
	for _, p := range ps {
		has[p.Outcome] = true
	}
	switch {
	case has[TriggeredPaid]:
		return TriggerCollected
	case has[TriggeredProcessing]:
		return TriggerProcessing
	case has[TriggeredFailed]:
		return TriggerFailed
	case has[TriggeredDeclined]:
		return TriggerDeclined
	}
	return TriggerNotAttempted
}
