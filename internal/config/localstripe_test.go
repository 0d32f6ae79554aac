package config_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// DESIGN §3 "The embedded default for Stripe": in development mode
// STRIPE_API_BASE defaults to the local Stripe (LOCAL_STRIPE_ADDR), never
// outside it; an explicit STRIPE_API_BASE always wins.
func TestStripeAPIBaseDefaultsToTheLocalStripeInDevelopment(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"development", dev(nil), "http://127.0.0.1:8082"},
		{"development, LOCAL_STRIPE_ADDR", dev(map[string]string{"LOCAL_STRIPE_ADDR": "127.0.0.1:9999"}), "http://127.0.0.1:9999"},
		{"development, a real test key's base", dev(map[string]string{"STRIPE_API_BASE": "https://api.stripe.com/"}), "https://api.stripe.com"},
		{"production", production(), "https://api.stripe.com"},
		{"production ignores LOCAL_STRIPE_ADDR", func() map[string]string {
			e := production()
			e["LOCAL_STRIPE_ADDR"] = "127.0.0.1:9999"
			return e
		}(), "https://api.stripe.com"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(tc.env)
			require.NoError(t, err)
			assert.Equal(t, tc.want, c.StripeAPIBase)
		})
	}
}
