package model

// OpMoveSubscription writes Subscription at its key (its SKU's) after
// deleting the item at its old key (Write.FromSKU) if that is still at
// Expect; the new key must not exist. Its value is apart from the iota list
// of tx.go so that other writes can be added there.
const OpMoveSubscription WriteOp = 64

// MoveSubscription moves sub from the key of fromSKU to the key of its
// SKU, if the old item is still at sub.Version, and advances sub.Version.
func (tx *Tx) MoveSubscription(sub *Subscription, fromSKU string) {
	expect := sub.Version
	sub.Version++
	sub.UpdatedAt = tx.now
	tx.writes = append(tx.writes, Write{Op: OpMoveSubscription, Expect: expect, Subscription: *sub, FromSKU: fromSKU})
}

// UpdatedEventPlanChanged is the history cause of a period a plan change
// moved to its new plan (updated_event "plan-changed-to-<sku>").
const UpdatedEventPlanChanged = "plan-changed-to-"

// PlanObserver is an Observer that also counts plan changes by direction
// (up, down, same: the amount compared with the one before).
type PlanObserver interface {
	PlanChanged(direction string)
}
