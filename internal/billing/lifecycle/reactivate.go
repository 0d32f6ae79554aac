package lifecycle

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/billing/schedule"
	"github.com/stripe-payments/stripe-payments/internal/lock"
	"github.com/stripe-payments/stripe-payments/internal/stripeid"
)

// ErrNotCancelled: a reactivation of a subscription that is not CANCELLED.
var ErrNotCancelled = apperr.New(apperr.CodeConflict, "the subscription is not cancelled: only a CANCELLED subscription is reactivated")

// Reactivation is a reactivate request: what changes with it (nil: as it
// was).
type Reactivation struct {
	PaymentMethod *string
	Amount        *int64
	// SKU with Amount: a plan change made with the reactivation (plan.go).
	SKU *string
	// Cause identifies the request in history entries.
	Cause string
}

// Validate reports every problem of r at once, in one message (a client
// sees the first apperr error of a chain only).
func (r Reactivation) Validate() error {
	var errs []string
	if r.PaymentMethod != nil && !stripeid.Valid(*r.PaymentMethod, "pm_") {
		errs = append(errs, "payment_method: a Stripe payment method id (pm_...)")
	}
	if r.Amount != nil && (*r.Amount < 1 || *r.Amount > 99_999_999) {
		errs = append(errs, "amount: 1 to 99999999 minor units")
	}
	if err := validatePlan(Change{SKU: r.SKU, Amount: r.Amount}); err != nil {
		errs = append(errs, apperr.From(err).Message)
	}
	if len(errs) > 0 {
		return apperr.Invalid("%s", strings.Join(errs, "; "))
	}
	return nil
}

// Reactivate starts a CANCELLED subscription again (docs/design.md §8
// "Reactivation"), under the account's lock: it is scheduled by its rule
// from today as a create would — the rule's first date on or after today
// (and start_date), at least one term after the last charged period, and
// after every period that ended ahead of its date (periods that ended stay
// as they were). The period the cancel ended ahead of its date, never
// attempted, is scheduled again when its date is that one. The first new
// period has process REACTIVATION, and its history entry the cause
// user-reactivated; its reminder goes out as for any period.
// ErrNotCancelled (409) when it is not CANCELLED.
func (lc *Lifecycle) Reactivate(ctx context.Context, account, subID string, r Reactivation) (model.Subscription, error) {
	if err := r.Validate(); err != nil {
		return model.Subscription{}, err
	}
	if r.Cause == "" {
		r.Cause = "api:reactivate:" + uuid.NewString()[:8]
	}
	var out model.Subscription
	err := lc.WithLock(ctx, account, func(ctx context.Context, _ *lock.Lock) error {
		sub, err := lc.Store.GetSubscription(ctx, account, subID)
		if err != nil {
			return err
		}
		if sub.Status != model.SubCancelled {
			return fmt.Errorf("subscription %s is %s: %w", subID, sub.Status, ErrNotCancelled)
		}
		lc, err := lc.forSub(ctx, sub) // its test clock's "today", if it has one
		if err != nil {
			return err
		}
		out, err = lc.reactivate(ctx, sub, r)
		return err
	})
	return out, err
}

func (lc *Lifecycle) reactivate(ctx context.Context, sub model.Subscription, r Reactivation) (model.Subscription, error) {
	now, today := lc.Now(), lc.Today(sub)
	periods, err := lc.Store.ListPeriods(ctx, sub.AccountID, sub.SubscriptionID)
	if err != nil {
		return sub, err
	}
	storedSKU := sub.SKU
	planDir := changePlan(&sub, Change{SKU: r.SKU, Amount: r.Amount})
	if r.Amount != nil {
		sub.Amount = *r.Amount
	}
	if r.PaymentMethod != nil {
		sub.PaymentDetails.PaymentMethod = *r.PaymentMethod
	}
	rule := sub.Rule()
	lower := dates.Max(today, sub.StartDate)
	byDate := make(map[dates.Date]model.Period, len(periods))
	seen := false
	for _, p := range periods {
		byDate[p.BillingDate] = p
		if p.Attempts > 0 || p.InFlightKey != "" || p.Status == model.Completed || p.Status == model.Refunded || p.Status == model.ACHSent {
			// One term of the rule the period was scheduled under (a
			// MONTHLY period charged before a change to YEARLY: a month).
			lower = dates.Max(lower, p.OneTermAfter(rule))
			seen = seen || p.BillingDate.Equal(sub.LastChargedPeriod)
		}
	}
	if !seen && !sub.LastChargedPeriod.IsZero() {
		// Charged, but its record was not read: the rule's term.
		lower = dates.Max(lower, rule.OneTermAfter(sub.LastChargedPeriod))
	}
	// Periods that ended ahead of their dates (waived ahead) stay: the new
	// schedule starts after them.
	for _, p := range periods {
		if !p.BillingDate.Before(lower) && !reusable(p) {
			lower = p.BillingDate.AddDays(1)
		}
	}
	first := rule.FirstOnOrAfter(sub.NextPeriodDate, lower)
	for range 120 {
		if p, ok := byDate[first]; !ok || reusable(p) {
			break
		}
		first = rule.Next(first)
	}
	p, ok := byDate[first]
	if ok {
		schedule.Reopen(&p, sub, model.ProcReactivation, model.UpdatedEventReactivated)
	} else {
		p = model.NewPeriod(sub, first, model.Scheduled, model.ProcReactivation, model.UpdatedEventReactivated, now)
	}
	sub.Status = model.SubActive
	sub.PausedFrom, sub.PausedUntil, sub.PauseMonths = dates.Date{}, dates.Date{}, 0
	lc.Sched.Point(&sub, p, today, true)
	tx := model.NewTx(r.Cause, now)
	tx.PutPeriod(&p, false)
	putSubscription(tx, &sub, storedSKU) // a new plan: its new key
	if err := lc.Store.Commit(ctx, tx); err != nil {
		return sub, fmt.Errorf("reactivate: %w", err)
	}
	lc.observePlan(planDir)
	return sub, nil
}

// reusable reports a period a reactivation may schedule again: one the
// cancel ended ahead of its date, never attempted.
func reusable(p model.Period) bool {
	return p.Status == model.Cancelled && p.Attempts == 0 && p.InFlightKey == ""
}
