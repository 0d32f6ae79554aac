package actions_test

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/actions"
)

// The body POSTed to ACTIONS_URL (docs/design.md §6): the §6 fields in that order,
// purchase_id and subscription_id null when absent; billing actions add their
// details after them, and the period that names a moved reminder's effect is
// not sent.
func TestActionJSON(t *testing.T) {
	id := uuid.MustParse("6f1c2d3e-4a5b-4c6d-8e7f-0123456789ab")
	purchase, sub := "3b5c7d9e-1f2a-4b3c-9d4e-5f6a7b8c9d0e", "sub_1"
	tests := []struct {
		name string
		a    actions.Action
		want string
	}{
		{"purchase", actions.Action{ID: id, Type: actions.TypePurchaseFulfilled, Account: "acc-1", StripeAccount: "acct_1X",
			PurchaseID: &purchase, Created: "2026-12-01T10:00:00Z"},
			`{"id":"6f1c2d3e-4a5b-4c6d-8e7f-0123456789ab","type":"purchase.fulfilled","account":"acc-1","stripe_account":"acct_1X",` +
				`"purchase_id":"3b5c7d9e-1f2a-4b3c-9d4e-5f6a7b8c9d0e","subscription_id":null,"created":"2026-12-01T10:00:00Z"}`},
		{"billing reminder", actions.Action{ID: id, Type: "billing.reminder_due", Account: "acc-1", SubscriptionID: &sub,
			Created: "2026-11-24T10:00:00Z", BillingDetails: &actions.BillingDetails{SKU: "pro", Email: "a@example.com",
				BillingDate: "2026-12-01", Amount: 1500, Currency: "usd", Period: "2026-11-30"}},
			`{"id":"6f1c2d3e-4a5b-4c6d-8e7f-0123456789ab","type":"billing.reminder_due","account":"acc-1","stripe_account":"",` +
				`"purchase_id":null,"subscription_id":"sub_1","created":"2026-11-24T10:00:00Z",` +
				`"sku":"pro","billing_date":"2026-12-01","amount":1500,"currency":"usd"}`}, // no email: payloads carry none
		{"billing payment failed", actions.Action{ID: id, Type: "billing.payment_failed", Account: "acc-1", SubscriptionID: &sub,
			Created: "2026-12-01T10:00:00Z", BillingDetails: &actions.BillingDetails{SKU: "pro", BillingDate: "2026-12-01",
				Amount: 1500, Currency: "usd", PaymentIntent: "pi_1", Attempt: 2, Error: "card_declined"}},
			`{"id":"6f1c2d3e-4a5b-4c6d-8e7f-0123456789ab","type":"billing.payment_failed","account":"acc-1","stripe_account":"",` +
				`"purchase_id":null,"subscription_id":"sub_1","created":"2026-12-01T10:00:00Z",` +
				`"sku":"pro","billing_date":"2026-12-01","amount":1500,"currency":"usd","payment_intent":"pi_1","attempt":2,"error":"card_declined"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.Marshal(tc.a)
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(got))

			var back actions.Action
			require.NoError(t, json.Unmarshal(got, &back))
			want := tc.a
			if want.BillingDetails != nil {
				d := *want.BillingDetails
				d.Period, d.Email = "", "" // neither is sent
				want.BillingDetails = &d
			}
			assert.Equal(t, want, back, "a receiver decodes what was sent")
			assert.NotContains(t, string(got), "@", "an action payload carries no email")
		})
	}
}
