package config_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBillingHardDeclineCodes(t *testing.T) {
	c, err := load(dev(nil))
	require.NoError(t, err)
	assert.Equal(t, []string{"lost_card", "stolen_card", "pickup_card", "restricted_card", "fraudulent",
		"invalid_account", "card_not_supported", "currency_not_supported", "expired_card",
		"incorrect_number", "invalid_number", "authentication_required"}, c.Billing.HardDeclineCodes, "docs/design.md §8's list")
	c, err = load(dev(map[string]string{"BILLING_HARD_DECLINE_CODES": "lost_card, do_not_honor"}))
	require.NoError(t, err)
	assert.Equal(t, []string{"lost_card", "do_not_honor"}, c.Billing.HardDeclineCodes)
	for _, bad := range []string{"lost_card,,stolen_card", "Lost Card", "lost_card;stolen_card"} {
		_, err := load(dev(map[string]string{"BILLING_HARD_DECLINE_CODES": bad}))
		assert.ErrorContains(t, err, "BILLING_HARD_DECLINE_CODES", bad)
	}
}
