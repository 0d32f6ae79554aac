package config_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Outside development mode INTERNAL_API_TOKEN has at least 32 characters,
// 12 of them distinct (docs/design.md §3); "disabled" still turns the routes off, and development mode
// keeps its short dev token.
func TestInternalAPITokenLength(t *testing.T) {
	tests := []struct {
		name, token string
		dev         bool
		wantErr     bool
	}{
		{"31 characters", strings.Repeat("a", 31), false, true},
		{"one character", "Z", false, true},
		{"a weak password", "hunter2", false, true},
		{"32 characters", "0123456789abcdef0123456789abcdef", false, false},
		{"32 of one character", strings.Repeat("a", 32), false, true},
		{"openssl rand -hex 32", "4f1c2b8e9d0a7f3e6b5c4d2a1e0f9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a", false, false},
		{"disabled", "disabled", false, false},
		{"short in development mode", "x", true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := production()
			env["INTERNAL_API_TOKEN"] = tc.token
			if tc.dev {
				env = dev(env)
				env["STRIPE_API_KEY"] = "sk_test_fake_0123456789"
			}
			c, err := load(env)
			if !tc.wantErr {
				require.NoError(t, err)
				if tc.token == "disabled" {
					assert.Empty(t, c.InternalAPIToken)
				}
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "INTERNAL_API_TOKEN: at least 32 characters")
			assert.Contains(t, err.Error(), "openssl rand -hex 32", "the error says how to make one")
			assert.NotContains(t, err.Error(), tc.token, "the error does not echo the token")
		})
	}
}

func TestAdminSettings(t *testing.T) {
	c, err := load(dev(nil))
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:8081", c.Admin.ListenAddr)
	assert.Empty(t, c.Admin.TrustedProxies, "no proxy is believed unless named")
	assert.Equal(t, 30*time.Minute, c.Admin.SessionIdle)
	assert.Equal(t, 12*time.Hour, c.Admin.SessionMaxAge)

	c, err = load(dev(map[string]string{"ADMIN_LISTEN_ADDR": "10.0.0.5:9000", "TRUSTED_PROXIES": "10.0.0.0/8, 192.168.1.7 ,fd00::/8",
		"OPS_SESSION_IDLE_TIMEOUT": "5m", "OPS_SESSION_MAX_AGE": "1h"}))
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.5:9000", c.Admin.ListenAddr)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32"),
		netip.MustParsePrefix("fd00::/8")}, c.Admin.TrustedProxies)
	assert.Equal(t, 5*time.Minute, c.Admin.SessionIdle)
	assert.Equal(t, time.Hour, c.Admin.SessionMaxAge)

	for name, env := range map[string]map[string]string{
		"ADMIN_LISTEN_ADDR":        {"LISTEN_ADDR": "127.0.0.1:9000", "ADMIN_LISTEN_ADDR": "127.0.0.1:9000"},
		"TRUSTED_PROXIES":          {"TRUSTED_PROXIES": "10.0.0.0/8,proxy.internal"},
		"OPS_SESSION_IDLE_TIMEOUT": {"OPS_SESSION_IDLE_TIMEOUT": "2h", "OPS_SESSION_MAX_AGE": "1h"},
		"OPS_SESSION_MAX_AGE":      {"OPS_SESSION_MAX_AGE": "soon"},
	} {
		_, err := load(dev(env))
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), name+":")
	}
}
