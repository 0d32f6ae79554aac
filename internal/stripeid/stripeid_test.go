package stripeid_test

import (
	"strings"
	"testing"

	"github.com/stripe-payments/stripe-payments/internal/stripeid"
)

// Every id shape Stripe issues, and the ones it documents for test mode
// (https://docs.stripe.com/testing), passes; nothing that could break a URL
// path, a DynamoDB key or an idempotency key does.
func TestValid(t *testing.T) {
	accepted := []struct{ id, prefix string }{
		{"pm_card_visa", "pm_"},
		{"pm_card_chargeDeclined", "pm_"},
		{"pm_card_visa_chargeDeclinedInsufficientFunds", "pm_"},
		{"pm_usBankAccount", "pm_"},
		{"pm_1OqDcI2eZvKYlo2CkLmNoPqR", "pm_"},
		{"tok_visa", "tok_"},
		{"tok_chargeDeclined", "tok_"},
		{"cus_PfYl2mB3cD4eF5", "cus_"},
		{"acct_1Nv0FGQ9RKHgCVdK", "acct_"},
		{"evt_1NG8Du2eZvKYlo2CUI79vXWy", "evt_"},
		{"pi_3MtwBwLkdIwHu7ix28a3tqPa", "pi_"},
		{"sub_1MowQVLkdIwHu7ixeRlqHVzs", "sub_"},
		{"sub_sched_1Mr3YcLkdIwHu7ixYCFhXHNb", "sub_sched_"},
		{"in_1MtHbELkdIwHu7ixl4OzzPMv", "in_"},
		{"price_1MoBy5LkdIwHu7ixZhnattbh", "price_"},
		{"acct_" + strings.Repeat("a", 250), "acct_"},
	}
	for _, tc := range accepted {
		if !stripeid.Valid(tc.id, tc.prefix) {
			t.Errorf("Valid(%q, %q) = false, want true", tc.id, tc.prefix)
		}
	}
	refused := []struct{ name, id, prefix string }{
		{"empty", "", "pm_"},
		{"prefix only", "pm_", "pm_"},
		{"other prefix", "card_visa", "pm_"},
		{"prefix of another case", "PM_card_visa", "pm_"},
		{"slash", "pm_card/../../customers/cus_1", "pm_"},
		{"hash", "pm_card#visa", "pm_"},
		{"question mark", "pm_card?visa=1", "pm_"},
		{"percent", "pm_card%2Fvisa", "pm_"},
		{"space", "pm_card visa", "pm_"},
		{"tab", "pm_card\tvisa", "pm_"},
		{"newline", "pm_card_visa\n", "pm_"},
		{"NUL", "pm_card\x00visa", "pm_"},
		{"DEL", "pm_card\x7fvisa", "pm_"},
		{"dot", "pm_card.visa", "pm_"},
		{"dash", "pm_card-visa", "pm_"},
		{"non-ASCII", "pm_cärd", "pm_"},
		{"overlong", "acct_" + strings.Repeat("a", 251), "acct_"},
	}
	for _, tc := range refused {
		if stripeid.Valid(tc.id, tc.prefix) {
			t.Errorf("%s: Valid(%q, %q) = true, want false", tc.name, tc.id, tc.prefix)
		}
	}
}
