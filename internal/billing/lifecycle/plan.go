package lifecycle

import (
	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
)

// Plan change (docs/design.md §8 "Plan change"): PATCH with a new `sku`
// and its `amount`. It is an amount change that also renames what is sold:
//
//   - every period not yet charged (SCHEDULED, PAUSED, ERROR awaiting a
//     retry or a pay now) takes the new SKU and amount, so its charge,
//     receipt and billing.payment_completed action name the plan it paid
//     for; a charge in flight or settling (ACHSENT) keeps the plan it was
//     made for (UpdateSubscription refuses while an attempt is in flight,
//     and holds the account's lock, so it never races a collection);
//   - the schedule does not move: no period is charged twice or skipped
//     because of it (the idempotency keys name account, subscription and
//     billing date, never the SKU);
//   - the subscription's key names its SKU (SUB#<id>#SKU#<sku>, docs/design.md §8),
//     so the subscription moves to its new key in the change's one
//     transaction: a delete of the old key conditioned on the version it
//     was read at, a put of the new one that must not exist, and its id
//     claim rewritten with the new SKU (still one id, one subscription).
//     Periods (PER#<id>#<date>), receipts and history are keyed by the id,
//     not the SKU: they stay where they are, with their history;
//   - pending_downgrade: a change to a lower amount shows it until the
//     first successful charge at the new plan and amount; a change to a
//     higher amount ends it (superseded); one to the same amount keeps it.

// validatePlan refuses a plan change that breaks a rule whatever the
// periods are: the SKU must be able to be part of a key, and it comes with
// its amount (docs/design.md §4: "plan: sku with its amount").
func validatePlan(ch Change) error {
	if ch.SKU == nil {
		return nil
	}
	if !model.ValidID(*ch.SKU) {
		return apperr.Invalid("sku: 1 to 128 characters, without '#', '/' or whitespace")
	}
	if ch.Amount == nil {
		return apperr.Invalid("sku: a plan change gives the new plan's amount too (sku with amount)")
	}
	return nil
}

// changePlan applies a plan change to sub (the periods follow in
// changeAmounts, which gives them sub's SKU): the pending downgrade, and
// the direction for the metric ("" when the plan does not change).
func changePlan(sub *model.Subscription, ch Change) string {
	if ch.SKU == nil || ch.Amount == nil || (*ch.SKU == sub.SKU && *ch.Amount == sub.Amount) {
		return ""
	}
	dir := "same"
	switch {
	case *ch.Amount < sub.Amount:
		sub.PendingDowngrade, dir = true, "down"
	case *ch.Amount > sub.Amount:
		sub.PendingDowngrade, dir = false, "up"
	}
	sub.SKU = *ch.SKU
	return dir
}

// planPeriod gives period q, not yet charged, sub's plan; false when it has
// it already.
func planPeriod(sub model.Subscription, q *model.Period) bool {
	if q.SKU == sub.SKU {
		return false
	}
	q.SKU, q.UpdatedEvent = sub.SKU, model.UpdatedEventPlanChanged+sub.SKU
	return true
}

// putSubscription writes sub in tx: moved to its new key when its SKU is
// no longer the one it was stored under.
func putSubscription(tx *model.Tx, sub *model.Subscription, storedSKU string) {
	if sub.SKU != storedSKU {
		tx.MoveSubscription(sub, storedSKU)
		return
	}
	tx.PutSubscription(sub)
}

// observePlan counts a committed plan change.
func (lc *Lifecycle) observePlan(dir string) {
	if o, ok := lc.Obs.(model.PlanObserver); ok && dir != "" {
		o.PlanChanged(dir)
	}
}
