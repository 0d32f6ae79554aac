package billing_test

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/oracle"
)

// oraclePlans are the SKUs plan changes draw from (creates use sku-0..2).
var oraclePlans = []string{"sku-0", "sku-1", "sku-2", "plan-lite", "plan-plus"}

// operatePlan maybe changes q's plan (§8 "Plan change"), in the model and
// in the service alike: up, down, or a new name at the same amount; across
// a paused period or with an ERROR period awaiting its retry, as they come;
// with racing, on a day the collection acts on a period (the change comes
// before the day's jobs; an attempt whose outcome is unknown makes the
// service refuse, on which the model is silent: not generated); now and
// then bad input, which both refuse, changing nothing.
func (w *oracleWorld) operatePlan(q *oracleSeq, day dates.Date, racing bool) {
	m, od := q.model, oracle.MustParse(day.String())
	var paused, failing bool
	for _, p := range m.Periods() {
		if slices.ContainsFunc(p.Attempts, func(a oracle.Attempt) bool { return a.Unresolved }) {
			return
		}
		paused = paused || p.Status == oracle.Paused
		failing = failing || p.Status == oracle.Error
	}
	cur := m.Amount()
	sku := oraclePlans[q.rng.IntN(len(oraclePlans))]
	var amount int64
	var dir string
	noAmount := false
	switch r := q.rng.IntN(100); {
	case r < 8:
		dir = "bad"
		switch q.rng.IntN(5) {
		case 0:
			amount = 0
		case 1:
			amount = -int64(1 + q.rng.IntN(1000))
		case 2:
			sku, amount = "bad#sku", cur
		case 3:
			sku, amount = "", cur
		default:
			noAmount, amount = true, cur // sku without its amount
		}
	case r < 50:
		dir, amount = "down", max(1, cur*int64(40+q.rng.IntN(55))/100)
	case r < 85:
		dir, amount = "up", min(99_999_999, cur+int64(1+q.rng.IntN(5000)))
	default:
		dir, amount = "same", cur
		for sku == m.Plan() {
			sku = oraclePlans[q.rng.IntN(len(oraclePlans))]
		}
	}
	if dir != "bad" && amount == cur && dir != "same" {
		dir = "same" // a down draw at 1 minor unit
	}
	kind := "plan-" + dir
	var kinds []string
	switch {
	case dir == "bad":
	case racing:
		kinds = append(kinds, "plan-racing")
	case paused:
		kinds = append(kinds, "plan-while-paused")
	case failing:
		kinds = append(kinds, "plan-while-failing")
	}
	for _, k := range append([]string{"plan", kind}, kinds...) {
		if _, out := oracleExcluded[k]; out {
			return
		}
	}
	ch := billing.Change{SKU: &sku, Amount: &amount}
	var refused error
	if noAmount {
		ch.Amount = nil
		refused = oracle.ErrRefused // §4: sku with its amount
	} else {
		refused = m.ChangePlan(od, sku, amount)
	}
	desc := fmt.Sprintf("plan %q amount %d (%s%s)", sku, amount, kind, map[bool]string{true: ", racing the day's collection"}[racing])
	if noAmount {
		desc = fmt.Sprintf("plan %q without amount", sku)
	}
	q.logf(day, "%s%s", desc, map[bool]string{true: " (refused by the rules)"}[refused != nil])
	q.touched = true
	_, err := w.e.Service.UpdateSubscription(context.Background(), q.account, q.subID, ch)
	if refused != nil {
		if !errors.Is(err, apperr.ErrInvalid) {
			w.fail(q, day, "%s: the rules refuse it (%v), the service answered %v", desc, refused, err)
		}
		w.stat("op:plan-bad")
		return
	}
	if err != nil {
		w.fail(q, day, "%s refused, though docs/design.md §8 allows it: %v", desc, err)
		return
	}
	w.stat("op:plan")
	w.stat("op:" + kind)
	for _, k := range kinds {
		w.stat("op:" + k)
	}
}
