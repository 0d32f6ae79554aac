package billing_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/billing"
)

// A decline without a code or message was stored and shown as ": ".
func TestDeclineTextNeverEmpty(t *testing.T) {
	tests := []struct{ code, msg, want string }{
		{"card_declined", "Your card was declined.", "card_declined: Your card was declined."},
		{"card_declined", "", "card_declined"},
		{"", "Your card was declined.", "Your card was declined."},
		{"", "", "declined (Stripe gave no code or message)"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, billing.DeclineText(tc.code, tc.msg), "%q %q", tc.code, tc.msg)
	}
}

func TestFeedOfAFailureWithoutCodeOrMessage(t *testing.T) {
	obj := map[string]any{"id": "pi_1", "object": "payment_intent", "status": "requires_payment_method",
		"metadata":           map[string]any{billing.MetaAccount: "a", billing.MetaSubscription: "s", billing.MetaDate: "2027-01-31"},
		"last_payment_error": map[string]any{"type": "card_error"}}
	raw, err := json.Marshal(obj)
	require.NoError(t, err)
	msg, ok, err := billing.FeedFromEvent(&stripe.Event{ID: "evt_1", Type: "payment_intent.payment_failed", Data: &stripe.EventData{Raw: raw}})
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "declined (Stripe gave no code or message)", msg.Error)
}
