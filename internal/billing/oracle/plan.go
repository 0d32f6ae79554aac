package oracle

import (
	"fmt"
	"strings"
)

// docs/design.md §8 "Plan change", from the rule alone:
//
//   - a plan change (a new SKU with its amount) is an amount change that
//     also renames what is sold: every period not yet charged (scheduled,
//     paused, failed awaiting a retry or a pay now) is charged at the new
//     plan and records it, so a charge made from then on is for the new
//     plan and amount and its receipt names that plan; a charge made
//     before (in flight, or settling as a bank debit) keeps the plan it was
//     made for;
//   - none is charged twice or skipped because of it: the schedule does not
//     move (a plan change is no rule change);
//   - like an amount change, it makes the earlier PaymentIntents of the
//     periods it changes unpayable (§8 "One successful charge per period");
//   - a change to a lower amount shows pending_downgrade until the first
//     period at the new plan is charged (a successful charge made at that
//     plan and amount). A change to a higher amount ends a pending
//     downgrade (it was superseded); one to the same amount leaves it as it
//     was. A cancelled subscription shows none (nothing is pending on it);
//     a reactivation shows it again until that charge.
//
// Refused, changing nothing: on a cancelled subscription, an amount below
// 1, a SKU that cannot be one (empty, longer than 128, or with '#', '/',
// whitespace or NUL: SKUs become parts of keys).

// NewPlan is New with the plan (SKU) the subscription is created with.
func NewPlan(cfg Config, rule Rule, plan string, amount int64, start, today Date) (*Sub, error) {
	if !ValidPlan(plan) {
		return nil, fmt.Errorf("%w: plan %q", ErrRefused, plan)
	}
	s, err := New(cfg, rule, amount, start, today)
	if err != nil {
		return nil, err
	}
	s.plan = plan
	return s, nil
}

// ValidPlan reports whether plan can be a SKU.
func ValidPlan(plan string) bool {
	return plan != "" && len(plan) <= 128 && !strings.ContainsAny(plan, "#/ \t\r\n\x00")
}

// ChangePlan moves the subscription to plan at amount on today.
func (s *paymentChanges) ChangePlan(_ Date, plan string, amount int64) error {
	if s.cancelled || amount < 1 || !ValidPlan(plan) {
		return ErrRefused
	}
	if plan == s.plan && amount == s.amount {
		return nil // no change
	}
	switch {
	case amount < s.amount:
		s.pendingDowngrade = true
	case amount > s.amount:
		s.pendingDowngrade = false
	}
	s.plan, s.amount = plan, amount
	for _, p := range s.periods {
		if p.Status == Scheduled || p.Status == Paused || p.Status == Error {
			p.cancelPayable() // its plan changes (customer.go)
		}
	}
	return nil
}

// charged notes a successful charge a: one at the current plan and amount
// ends a pending downgrade.
func (s *state) charged(a Attempt) {
	if a.Plan == s.plan && a.Amount == s.amount {
		s.pendingDowngrade = false
	}
}

// Plan is the plan (SKU) of the next attempt.
func (s *Sub) Plan() string { return s.plan }

// PendingDowngrade is what the subscription shows as pending_downgrade.
func (s *Sub) PendingDowngrade() bool { return s.pendingDowngrade && !s.cancelled }
