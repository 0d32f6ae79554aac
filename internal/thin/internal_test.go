package thin

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestIsAccountEvent(t *testing.T) {
	for typ, want := range map[string]bool{
		"v2.core.account.created":                                           true,
		"v2.core.account.updated":                                           true,
		"v2.core.account.closed":                                            true,
		"v2.core.account[configuration.merchant].updated":                   true,
		"v2.core.account[requirements].updated":                             true,
		"v2.core.account[configuration.merchant].capability_status_updated": false,
		"v2.core.account_link.returned":                                     false,
		"v2.core.account_person.created":                                    false,
		"v1.account.updated":                                                false,
		"v2.core.account":                                                   false,
	} {
		assert.Equal(t, want, isAccountEvent(typ), typ)
	}
}

func TestStateEventType(t *testing.T) {
	cases := []struct{ object, status, want string }{
		{"payment_intent", "succeeded", "payment_intent.succeeded"},
		{"payment_intent", "processing", "payment_intent.processing"},
		{"payment_intent", "requires_payment_method", "payment_intent.payment_failed"},
		{"payment_intent", "", ""}, // requires_payment_method without an error is cleared by the caller
		{"payment_intent", "requires_confirmation", ""},
		{"payment_intent", "canceled", ""},
		{"invoice", "paid", "invoice.paid"},
		{"invoice", "open", ""},
		{"subscription", "active", "customer.subscription.updated"},
		{"customer", "", ""},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, stateEventType(c.object, c.status), "%s %s", c.object, c.status)
	}
}
