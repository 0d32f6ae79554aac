package loadtest

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/google/uuid"
)

// CustomerUpdated returns a customer.updated event shaped like Stripe's
// (API version 2023-10-16), with a unique event id and a unique customer id,
// so that every delivery is new work for any consumer (the side-by-side
// benchmark against another ingester sends the same stream to both).
func CustomerUpdated(now time.Time) []byte {
	id := strings.ReplaceAll(uuid.NewString(), "-", "")[:24]
	customer := map[string]any{
		"id": "cus_bench" + id, "object": "customer", "address": nil, "balance": 0, "created": now.Unix() - 86400,
		"currency": "usd", "default_source": nil, "delinquent": false, "description": "benchmark customer",
		"discount": nil, "email": "buyer+" + id[:12] + "@example.com", "invoice_prefix": strings.ToUpper(id[:8]),
		"invoice_settings": map[string]any{"custom_fields": nil, "default_payment_method": nil, "footer": nil, "rendering_options": nil},
		"livemode":         false, "metadata": map[string]any{"account": uuid.NewString()}, "name": "Benchmark Buyer",
		"next_invoice_sequence": 1, "phone": nil, "preferred_locales": []any{"en"}, "shipping": nil,
		"tax_exempt": "none", "test_clock": nil,
	}
	ev := map[string]any{
		"id": "evt_bench" + id, "object": "event", "api_version": "2023-10-16", "created": now.Unix(),
		"data": map[string]any{
			"object":              customer,
			"previous_attributes": map[string]any{"email": nil, "name": nil},
		},
		"livemode": false, "pending_webhooks": 1, "type": "customer.updated",
		"request": map[string]any{"id": "req_bench" + id[:14], "idempotency_key": uuid.NewString()},
	}
	b, _ := json.Marshal(ev) // maps of plain values: cannot fail
	return b
}
