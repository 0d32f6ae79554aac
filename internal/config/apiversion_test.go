package config_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"
)

// STRIPE_API_VERSION is the api_version events are expected to carry: by
// default the one stripe-go pins (and sends); a value that is not a Stripe
// API version is refused at start.
func TestStripeAPIVersion(t *testing.T) {
	cases := []struct {
		name, value, want, err string
	}{
		{"default", "", stripe.APIVersion, ""},
		{"dated", "2024-06-20", "2024-06-20", ""},
		{"named release", "2025-09-30.clover", "2025-09-30.clover", ""},
		{"not a version", "latest", "", "STRIPE_API_VERSION"},
		{"no date", "clover", "", "STRIPE_API_VERSION"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			if tc.value != "" {
				env["STRIPE_API_VERSION"] = tc.value
			}
			c, err := load(dev(env))
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, c.StripeAPIVersion)
		})
	}
}
