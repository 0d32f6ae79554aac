package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/billing/schedule"
	"github.com/stripe-payments/stripe-payments/internal/stripeid"
)

// replacedByRule reports a period a rule change cancelled (it is no
// period of the subscription's rule any more).
func replacedByRule(p model.Period) bool {
	return p.Status == model.Cancelled && strings.HasPrefix(p.UpdatedEvent, "rule-changed")
}

// endedAheadBeforeReactivation reports a period a cancel ended ahead of
// its date, never attempted, that lies on or after the subscription's next
// period: only a reactivation leaves one there (docs/design.md §8 "Reactivation":
// the new schedule replaces it, and it is scheduled again when its date
// comes), so like a period a rule change replaced it is no period to keep
// a distance from.
func endedAheadBeforeReactivation(sub model.Subscription, p model.Period) bool {
	return p.Status == model.Cancelled && p.Attempts == 0 && !sub.NextPeriodDate.IsZero() &&
		!p.BillingDate.Before(sub.NextPeriodDate)
}

// nextAfterKept is the earliest date a rule change may schedule the next
// period on: one term after the latest period it must keep its distance
// from, one charged (whatever came of it) or ended (waived, skipped,
// stale); zero when there is none. Periods still to come (SCHEDULED,
// PAUSED) and the ones a rule change replaced do not count. The term is
// the kept period's own (the rule it was scheduled under, old the
// subscription's rule before the change): the period paid, or stood, for
// one term of that rule, and the new rule starts after it.
func nextAfterKept(sub model.Subscription, old dates.Rule, periods []model.Period) dates.Date {
	var after dates.Date
	seen := false
	for _, p := range periods {
		if p.Status == model.Scheduled && p.Attempts == 0 && p.InFlightKey == "" || p.Status == model.Paused || replacedByRule(p) ||
			endedAheadBeforeReactivation(sub, p) {
			continue
		}
		after = dates.Max(after, p.OneTermAfter(old))
		seen = seen || p.BillingDate.Equal(sub.LastChargedPeriod)
	}
	if !seen && !sub.LastChargedPeriod.IsZero() {
		// Charged, but its record was not read: the old rule's term.
		after = dates.Max(after, old.OneTermAfter(sub.LastChargedPeriod))
	}
	return after
}

// change applies field changes (docs/design.md §8 "Billing schedule semantics"):
//   - amount and payment method: the subscription and every period not yet
//     charged (SCHEDULED, PAUSED, and ERROR for its retries), never a charge
//     in flight;
//   - payment day, Friday week or term (a rule change): the next period
//     becomes the first date of the new rule at least one term (of the
//     kept period's rule) after the last charged (or ended: waived,
//     skipped, stale) period's scheduled date (none: the first after
//     today, on or after start_date), so no two periods are less than a
//     term apart; the replaced periods are CANCELLED;
//   - next_payment_date (a move): that one period is charged on the new
//     date, strictly between its neighbours' scheduled dates and not in the
//     past; it keeps its scheduled date, and so do the periods after it.
func (lc *Lifecycle) change(ctx context.Context, sub model.Subscription, ch Change) (model.Subscription, error) {
	if err := validateChange(sub, ch); err != nil {
		return sub, err
	}
	now, today := lc.Now(), lc.Today(sub)
	periods, err := lc.Store.ListPeriods(ctx, sub.AccountID, sub.SubscriptionID)
	if err != nil {
		return sub, err
	}
	ed := &edits{byDate: map[dates.Date]*model.Period{}}
	var cur *model.Period
	for _, p := range periods {
		if p.BillingDate.Equal(sub.NextPeriodDate) {
			p := p
			cur = &p
		}
	}
	if cur == nil {
		p := model.NewPeriod(sub, sub.NextPeriodDate, model.Scheduled, model.ProcAdmin, "recreated", now)
		cur = ed.touch(p)
	}
	storedSKU := sub.SKU
	planDir := changePlan(&sub, ch)
	if ch.Amount != nil || ch.PaymentMethod != nil || ch.SKU != nil {
		changeAmounts(&sub, ch, periods, cur, ed, today)
	}
	switch {
	case ch.PaymentDay != nil || ch.BillingWeek != nil || ch.Term != nil:
		if err := lc.changeRule(&sub, ch, periods, cur, ed, today, now); err != nil {
			return sub, err
		}
	case !ch.NextPaymentDate.IsZero():
		if err := lc.moveNextPayment(&sub, ch.NextPaymentDate, periods, cur, ed, today); err != nil {
			return sub, err
		}
	}

	tx := model.NewTx(ch.Cause, now)
	for _, d := range ed.order {
		tx.PutPeriod(ed.byDate[d], false)
	}
	putSubscription(tx, &sub, storedSKU) // a plan change moves it to its new key
	if err := lc.Store.Commit(ctx, tx); err != nil {
		return sub, fmt.Errorf("change subscription: %w", err)
	}
	lc.observePlan(planDir)
	return sub, nil
}

// validateChange refuses field changes that break a rule whatever the
// periods are.
func validateChange(sub model.Subscription, ch Change) error {
	if ch.Amount == nil && ch.PaymentMethod == nil && ch.PaymentDay == nil && ch.BillingWeek == nil && ch.Term == nil && ch.NextPaymentDate.IsZero() && ch.SKU == nil {
		return apperr.Invalid("nothing to change")
	}
	if err := validatePlan(ch); err != nil {
		return err
	}
	if ch.PaymentMethod != nil && !stripeid.Valid(*ch.PaymentMethod, "pm_") {
		return apperr.Invalid("payment_method: a Stripe payment method id (pm_...)")
	}
	if sub.Status == model.SubCancelled {
		return apperr.Invalid("the subscription is CANCELLED")
	}
	ruleChange := ch.PaymentDay != nil || ch.BillingWeek != nil || ch.Term != nil
	if (ruleChange || !ch.NextPaymentDate.IsZero()) && sub.Status != model.SubActive {
		return apperr.Invalid("billing dates change only on an ACTIVE subscription (it is %s)", sub.Status)
	}
	if ruleChange && !ch.NextPaymentDate.IsZero() {
		return apperr.Invalid("change the payment day, billing week or term, or move the next payment, not both at once")
	}
	if ch.Amount != nil && (*ch.Amount < 1 || *ch.Amount > 99_999_999) {
		return apperr.Invalid("amount: 1 to 99999999 minor units")
	}
	return nil
}

// edits are the periods a change writes: each once, in its final state, in
// the order first touched.
type edits struct {
	byDate map[dates.Date]*model.Period
	order  []dates.Date
}

// touch is the period of p's date as edited so far (p itself the first
// time).
func (e *edits) touch(p model.Period) *model.Period {
	if q, ok := e.byDate[p.BillingDate]; ok {
		return q
	}
	e.byDate[p.BillingDate] = &p
	e.order = append(e.order, p.BillingDate)
	return &p
}

// changeAmounts applies a new amount or payment method to sub and every
// period not yet charged. A new payment method also makes every ERROR
// period due at the next collection run (its index entry moves to today;
// the job retries it, process RETRY), hard-declined ones included (docs/design.md
// §8 "Amount or payment method change").
func changeAmounts(sub *model.Subscription, ch Change, periods []model.Period, cur *model.Period, ed *edits, today dates.Date) {
	if ch.Amount != nil {
		sub.Amount = *ch.Amount
	}
	if ch.PaymentMethod != nil {
		sub.PaymentDetails.PaymentMethod = *ch.PaymentMethod
	}
	for _, p := range append(periods, *cur) {
		// Not yet charged: scheduled, paused, or failed (its retries).
		if p.InFlightKey != "" || !(p.Status == model.Scheduled || p.Status == model.Paused || p.Status == model.Error) {
			continue
		}
		q := ed.touch(p)
		if ch.Amount != nil && q.Amount != *ch.Amount {
			q.Amount, q.UpdatedEvent = *ch.Amount, "amount-changed"
		}
		if ch.PaymentMethod != nil && q.PaymentDetails.PaymentMethod != *ch.PaymentMethod {
			q.PaymentDetails.PaymentMethod, q.UpdatedEvent = *ch.PaymentMethod, "payment-method-changed"
			if q.Status == model.Error && !q.NextAttemptDate.IsZero() && q.NextAttemptDate.After(today) {
				q.NextAttemptDate = today
			}
		}
		planPeriod(*sub, q) // a plan change: charged at the new plan, and records it
		q.Process = model.ProcAdmin
	}
}

// changeRule applies a new payment day, Friday week or term: the next
// period is the new rule's first date at least one term after the last
// kept period, and the periods of the old rule from the cursor on are
// cancelled.
func (lc *Lifecycle) changeRule(sub *model.Subscription, ch Change, periods []model.Period, cur *model.Period, ed *edits, today dates.Date, now time.Time) error {
	old := sub.Rule()
	rule := old
	if ch.PaymentDay != nil {
		rule.Day, rule.Week = *ch.PaymentDay, 0
	}
	if ch.BillingWeek != nil {
		rule.Week, rule.Day = *ch.BillingWeek, 0
	}
	if ch.Term != nil {
		rule.Term = *ch.Term
	}
	if err := rule.Validate(); err != nil {
		return apperr.Invalid("%v", err)
	}
	sub.PaymentDay, sub.BillingWeek, sub.Term = rule.Day, rule.Week, rule.Term
	lower := dates.Max(today.AddDays(1), sub.StartDate)
	if after := nextAfterKept(*sub, old, periods); !after.IsZero() {
		lower = dates.Max(lower, after)
	}
	// A YEARLY rule keeps its month when only its day changes; a new term
	// takes the month of its first date (as a create does).
	next := rule.FirstOnOrAfter(cur.BillingDate, lower)
	if rule.Term != old.Term {
		next = rule.First(lower)
	}
	// The new rule's dates from next on, as far as records go: a record of
	// the old rule on one of them (day 28 → 29 meets Feb 28 again) is a
	// period of the new rule too, to charge, not to cancel.
	last := next
	for _, p := range periods {
		last = dates.Max(last, p.BillingDate)
	}
	ofNewRule := map[dates.Date]bool{}
	for d := next; !d.After(last); d = rule.Next(d) {
		ofNewRule[d] = true
	}
	// Every other period scheduled from the cursor on belongs to the old
	// rule: cancelled.
	var target *model.Period
	for _, p := range append(periods, *cur) {
		if p.Status != model.Scheduled || p.InFlightKey != "" || p.BillingDate.Before(cur.BillingDate) {
			continue
		}
		switch {
		case p.BillingDate.Equal(next):
			target = ed.touch(p)
		case ofNewRule[p.BillingDate]:
			if p.Term != sub.Term || p.BillingWeek != sub.BillingWeek {
				q := ed.touch(p)
				q.Term, q.BillingWeek, q.Process, q.UpdatedEvent = sub.Term, sub.BillingWeek, model.ProcAdmin, "rule-changed-kept"
			}
		default:
			q := ed.touch(p)
			q.Status, q.Process, q.UpdatedEvent = model.Cancelled, model.ProcAdmin, "rule-changed-to-"+next.String()
			q.ChargeDate, q.CompletionDate = dates.Date{}, now
		}
	}
	// Periods an earlier rule change replaced, on later dates of the new
	// rule, are scheduled again now (as the cursor would reopen them).
	for _, p := range periods {
		if p.BillingDate.After(next) && ofNewRule[p.BillingDate] && replacedByRule(p) && p.Attempts == 0 {
			schedule.Reopen(ed.touch(p), *sub, model.ProcAdmin, "rule-changed-from-"+cur.BillingDate.String())
		}
	}
	if target == nil {
		for _, p := range periods {
			if p.BillingDate.Equal(next) {
				if !replacedByRule(p) || p.Attempts > 0 {
					return fmt.Errorf("period %s exists and is %s: %w", next, p.Status, model.ErrConflict)
				}
				target = ed.touch(p)
				schedule.Reopen(target, *sub, model.ProcAdmin, "rule-changed-from-"+cur.BillingDate.String())
			}
		}
	}
	if target == nil {
		target = ed.touch(model.NewPeriod(*sub, next, model.Scheduled, model.ProcAdmin, "rule-changed-from-"+cur.BillingDate.String(), now))
	}
	target.ChargeDate = dates.Date{}
	target.Term, target.BillingWeek = sub.Term, sub.BillingWeek // a period of the new rule, whatever its record was
	lc.Sched.Point(sub, *target, today, true)
	return nil
}

// moveNextPayment moves the charge of the next period to to: strictly
// between its neighbours' scheduled dates and not in the past.
func (lc *Lifecycle) moveNextPayment(sub *model.Subscription, to dates.Date, periods []model.Period, cur *model.Period, ed *edits, today dates.Date) error {
	if cur.Status != model.Scheduled || cur.InFlightKey != "" {
		return fmt.Errorf("next period %s is %s: %w", cur.BillingDate, cur.Status, model.ErrConflict)
	}
	if to.Before(today) {
		return apperr.Invalid("next_payment_date must not be in the past (today is %s)", today)
	}
	following := sub.Rule().Next(cur.BillingDate)
	if !to.Before(following) {
		return apperr.Invalid("next_payment_date must be before the following period (%s)", following)
	}
	for _, p := range periods {
		if p.BillingDate.Before(cur.BillingDate) && !replacedByRule(p) && !to.After(p.BillingDate) {
			return apperr.Invalid("next_payment_date must be after the previous period (%s)", p.BillingDate)
		}
	}
	q := ed.touch(*cur)
	q.ChargeDate, q.Process, q.UpdatedEvent = to, model.ProcAdmin, "charge-date-moved-to-"+to.String()
	if to.Equal(q.BillingDate) {
		q.ChargeDate = dates.Date{}
	}
	// The new charge date is announced (one reminder per charge date),
	// unless it did not change.
	lc.Sched.Point(sub, *q, today, !q.Due().Equal(cur.Due()))
	return nil
}
