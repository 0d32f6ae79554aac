package config_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Outside development mode (docs/design.md §3 "Production fails closed"):
// STRIPE_API_BASE is an https:// URL, a profiling listener binds to
// loopback only, and INTERNAL_API_TOKEN has at least 12 distinct
// characters. Each refusal names its variable; development mode accepts
// all of them.
func TestProductionRefusesUnsafeSettings(t *testing.T) {
	tests := []struct {
		name, key, value string
		wantErr          string // "" accepted
	}{
		{"Stripe over http", "STRIPE_API_BASE", "http://api.stripe.com", "STRIPE_API_BASE: must be an https:// URL"},
		{"Stripe over http, upper case", "STRIPE_API_BASE", "HTTP://api.stripe.com", "STRIPE_API_BASE: must be an https:// URL"},
		{"the local Stripe", "STRIPE_API_BASE", "http://127.0.0.1:8082", "STRIPE_API_BASE: must be an https:// URL"},
		{"no scheme", "STRIPE_API_BASE", "api.stripe.com", "STRIPE_API_BASE: must be an https:// URL"},
		{"https without a host", "STRIPE_API_BASE", "https://", "STRIPE_API_BASE: must be an https:// URL"},
		{"Stripe over https", "STRIPE_API_BASE", "https://api.stripe.com", ""},
		{"a proxy over https", "STRIPE_API_BASE", "https://stripe-proxy.internal:8443/", ""},
		{"pprof on every interface", "PPROF_ADDR", ":6060", "PPROF_ADDR: must bind to loopback"},
		{"pprof on 0.0.0.0", "PPROF_ADDR", "0.0.0.0:6060", "PPROF_ADDR: must bind to loopback"},
		{"pprof on [::]", "PPROF_ADDR", "[::]:6060", "PPROF_ADDR: must bind to loopback"},
		{"pprof on a private address", "PPROF_ADDR", "10.0.0.5:6060", "PPROF_ADDR: must bind to loopback"},
		{"pprof on a host name", "PPROF_ADDR", "pprof.internal:6060", "PPROF_ADDR: must bind to loopback"},
		{"pprof without a port", "PPROF_ADDR", "127.0.0.1", "PPROF_ADDR: must bind to loopback"},
		{"pprof on 127.0.0.1", "PPROF_ADDR", "127.0.0.1:6060", ""},
		{"pprof on [::1]", "PPROF_ADDR", "[::1]:6060", ""},
		{"pprof on localhost", "PPROF_ADDR", "localhost:6060", ""},
		{"32 of one character", "INTERNAL_API_TOKEN", strings.Repeat("a", 32), "INTERNAL_API_TOKEN: at least 32 characters with at least 12 distinct ones"},
		{"64 characters, 11 distinct", "INTERNAL_API_TOKEN", strings.Repeat("abcdefghijk", 6)[:64], "INTERNAL_API_TOKEN: at least 32 characters with at least 12 distinct ones"},
		{"32 characters, 12 distinct", "INTERNAL_API_TOKEN", strings.Repeat("abcdefghijkl", 3)[:32], ""},
		{"disabled", "INTERNAL_API_TOKEN", "disabled", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := production()
			env[tc.key] = tc.value
			_, err := load(env)
			if tc.wantErr == "" {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				if tc.key == "INTERNAL_API_TOKEN" {
					assert.NotContains(t, err.Error(), tc.value, "the error does not echo the token")
				}
			}

			d := dev(map[string]string{tc.key: tc.value, "STRIPE_API_KEY": "sk_test_fake_0123456789"})
			_, err = load(d)
			assert.NoError(t, err, "development mode accepts %s=%s", tc.key, tc.value)
		})
	}
}
