package app_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPurchaseTakesEveryStripeIDShape: a product purchase takes the ids
// Stripe documents for test mode (pm_card_visa and its kin, which hold
// underscores and were refused with a 400 before), and refuses, with a clear
// error and nothing stored or sent to Stripe, any id that could break the
// Stripe API path it goes into (/v1/payment_methods/{pm}/attach) or a key.
func TestPurchaseTakesEveryStripeIDShape(t *testing.T) {
	e := startPurchaseApp(t)
	product := func(account string, mod map[string]any) map[string]any {
		b := map[string]any{"account": account, "stripe_account": merchant, "mode": "product", "customer": "cus_PfYl2mB3cD4eF5",
			"payment_method": "pm_card_visa", "items": []map[string]any{{"price": "price_A1", "quantity": 1}}}
		for k, v := range mod {
			b[k] = v
		}
		return b
	}

	accepted := []struct {
		name string
		mod  map[string]any
	}{
		{"pm_card_visa", map[string]any{"payment_method": "pm_card_visa"}},
		{"pm_card_chargeDeclined", map[string]any{"payment_method": "pm_card_chargeDeclined"}},
		{"pm_usBankAccount", map[string]any{"payment_method": "pm_usBankAccount"}},
		{"a live-shaped pm", map[string]any{"payment_method": "pm_1OqDcI2eZvKYlo2CkLmNoPqR"}},
		{"customer and price with underscores", map[string]any{"customer": "cus_test_1",
			"items": []map[string]any{{"price": "price_test_monthly", "quantity": 1}}}},
	}
	for _, tc := range accepted {
		t.Run("accepts "+tc.name, func(t *testing.T) {
			before := len(e.stripeCalls())
			status, p, _ := e.purchase(t, product(uuid.NewString(), tc.mod), "")
			require.Equal(t, http.StatusCreated, status, p)
			calls := e.stripeCalls()[before:]
			require.NotEmpty(t, calls)
			pm := product("", tc.mod)["payment_method"].(string)
			assert.Equal(t, "/v1/payment_methods/"+pm+"/attach", calls[0].Path, "the id reaches Stripe as given")
		})
	}

	var stored int
	require.NoError(t, e.app.Pool.QueryRow(context.Background(), `SELECT count(*) FROM purchases`).Scan(&stored))
	calls := len(e.stripe.Requests())
	bad := map[string]string{
		"slash":         "card/../../customers/cus_1",
		"hash":          "card#visa",
		"question mark": "card?visa=1",
		"percent":       "card%2Fvisa",
		"space":         "card visa",
		"tab":           "card\tvisa",
		"newline":       "card_visa\n",
		"NUL":           "card\x00visa",
		"control":       "card\x1bvisa",
		"non-ASCII":     "cärd",
		"nothing":       "",
		"overlong":      strings.Repeat("a", 251),
	}
	fields := []struct {
		field, prefix string
		set           func(v string) map[string]any
	}{
		{"stripe_account", "acct_", func(v string) map[string]any { return map[string]any{"stripe_account": v} }},
		{"customer", "cus_", func(v string) map[string]any { return map[string]any{"customer": v} }},
		{"payment_method", "pm_", func(v string) map[string]any { return map[string]any{"payment_method": v} }},
		{"items[0].price", "price_", func(v string) map[string]any {
			return map[string]any{"items": []map[string]any{{"price": v, "quantity": 1}}}
		}},
		{"recurring_price", "price_", func(v string) map[string]any { return map[string]any{"items": nil, "recurring_price": v} }},
	}
	for _, f := range fields {
		for name, rest := range bad {
			t.Run(f.field+" "+name, func(t *testing.T) {
				body := product(uuid.NewString(), f.set(f.prefix+rest))
				if body["items"] == nil {
					delete(body, "items")
				}
				status, p, _ := e.purchase(t, body, "")
				assert.Equal(t, http.StatusBadRequest, status, p)
				assert.Equal(t, "invalid_parameter", errorCode(p))
				assert.Contains(t, p["error"].(map[string]any)["message"], f.field)
			})
		}
		t.Run(f.field+" of another kind", func(t *testing.T) {
			body := product(uuid.NewString(), f.set("tok_visa"))
			if body["items"] == nil {
				delete(body, "items")
			}
			status, p, _ := e.purchase(t, body, "")
			assert.Equal(t, http.StatusBadRequest, status, p)
			assert.Contains(t, p["error"].(map[string]any)["message"], f.field)
		})
	}
	var after int
	require.NoError(t, e.app.Pool.QueryRow(context.Background(), `SELECT count(*) FROM purchases`).Scan(&after))
	assert.Equal(t, stored, after, "a refused purchase stores nothing")
	assert.Len(t, e.stripe.Requests(), calls, "a refused purchase never reaches Stripe")
}
