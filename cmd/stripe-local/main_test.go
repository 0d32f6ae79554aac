package main

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSettings(t *testing.T) {
	env := func(m map[string]string) func(string) string {
		return func(k string) string {
			if v, ok := m[k]; ok || k != "APP_ENV" {
				return v
			}
			return "development"
		}
	}
	s, err := readSettings(env(nil))
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:8082", s.Addr)
	assert.Equal(t, "http://127.0.0.1:8080/webhooks/stripe", s.WebhookURL)
	assert.Equal(t, "whsec_dev_local_only", s.WebhookSecret, "the service's dev secret")
	assert.Equal(t, "acct_local_demo", s.Account)
	assert.Equal(t, 20*time.Second, s.ACHDelay)
	assert.Equal(t, 6, s.MaxAttempts)
	assert.Zero(t, s.DropRate)
	assert.Empty(t, s.ThinTypes, "snapshot events only")
	assert.False(t, s.SnapshotToo)
	assert.Empty(t, s.StatePath, "in memory unless asked (make run asks)")

	s, err = readSettings(env(map[string]string{"LOCAL_STRIPE_THIN_EVENTS": "v1.payment_intent.succeeded, invoice.paid",
		"LOCAL_STRIPE_THIN_AND_SNAPSHOT": "true", "LOCAL_STRIPE_STATE": "/tmp/x/state.json"}))
	require.NoError(t, err)
	assert.Equal(t, []string{"v1.payment_intent.succeeded", "v1.invoice.paid"}, s.ThinTypes)
	assert.True(t, s.SnapshotToo)
	assert.Equal(t, "/tmp/x/state.json", s.StatePath)

	s, err = readSettings(env(map[string]string{"LISTEN_ADDR": "127.0.0.1:9000", "STRIPE_WEBHOOK_SECRET": "whsec_new, whsec_old",
		"LOCAL_STRIPE_DROP_RATE": "0.25", "LOCAL_STRIPE_ACH_DELAY": "2s"}))
	require.NoError(t, err)
	assert.Equal(t, "http://127.0.0.1:9000/webhooks/stripe", s.WebhookURL, "follows the service's LISTEN_ADDR")
	assert.Equal(t, "whsec_new", s.WebhookSecret, "signs with the first secret, as Stripe does after a rotation")
	assert.Equal(t, 0.25, s.DropRate)
	assert.Equal(t, 2*time.Second, s.ACHDelay)

	s, err = readSettings(env(map[string]string{"LOCAL_STRIPE_WEBHOOK_URL": "off"}))
	require.NoError(t, err)
	assert.Empty(t, s.WebhookURL)

	for k, v := range map[string]string{"LOCAL_STRIPE_DROP_RATE": "1.5", "LOCAL_STRIPE_ACH_DELAY": "soon",
		"LOCAL_STRIPE_MAX_ATTEMPTS": "0", "LOCAL_STRIPE_ACCOUNT": "cus_1", "LOCAL_STRIPE_RETRY_BASE": "-1s",
		"LOCAL_STRIPE_THIN_EVENTS": "v2.core.account.updated", "LOCAL_STRIPE_THIN_AND_SNAPSHOT": "maybe"} {
		_, err := readSettings(env(map[string]string{k: v}))
		assert.ErrorContains(t, err, k, "%s=%s is refused", k, v)
	}
}

// The local Stripe is a development tool (docs/design.md §3): it refuses to
// start outside development mode, on an address other than loopback, or
// with a live key in the environment, naming the variable.
func TestSettingsRefuseUnsafeStarts(t *testing.T) {
	base := map[string]string{"APP_ENV": "development"}
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string // "" accepted
	}{
		{"development mode", nil, ""},
		{"no APP_ENV", map[string]string{"APP_ENV": ""}, "APP_ENV"},
		{"production", map[string]string{"APP_ENV": "production"}, "APP_ENV"},
		{"Development", map[string]string{"APP_ENV": "Development"}, "APP_ENV"},
		{"every interface", map[string]string{"LOCAL_STRIPE_ADDR": "0.0.0.0:8082"}, "LOCAL_STRIPE_ADDR"},
		{"no host", map[string]string{"LOCAL_STRIPE_ADDR": ":8082"}, "LOCAL_STRIPE_ADDR"},
		{"every IPv6 interface", map[string]string{"LOCAL_STRIPE_ADDR": "[::]:8082"}, "LOCAL_STRIPE_ADDR"},
		{"a private address", map[string]string{"LOCAL_STRIPE_ADDR": "10.1.2.3:8082"}, "LOCAL_STRIPE_ADDR"},
		{"a host name", map[string]string{"LOCAL_STRIPE_ADDR": "stripe.internal:8082"}, "LOCAL_STRIPE_ADDR"},
		{"IPv6 loopback", map[string]string{"LOCAL_STRIPE_ADDR": "[::1]:8082"}, ""},
		{"localhost", map[string]string{"LOCAL_STRIPE_ADDR": "localhost:0"}, ""},
		{"a live secret key", map[string]string{"STRIPE_API_KEY": "sk_" + "live_" + "not_a_real_key"}, "STRIPE_API_KEY"},
		{"a live restricted key", map[string]string{"STRIPE_API_KEY": "rk_" + "live_" + "not_a_real_key"}, "STRIPE_API_KEY"},
		{"a test key", map[string]string{"STRIPE_API_KEY": "sk_test_fake_0123456789"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range base {
				env[k] = v
			}
			for k, v := range tc.env {
				env[k] = v
			}
			_, err := readSettings(func(k string) string { return env[k] })
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantErr)
			assert.NotContains(t, err.Error(), "not_a_real_key", "the error never echoes a key")
		})
	}
}

// run refuses an unsafe start before it listens: nothing is served.
func TestRunRefusesOutsideDevelopmentMode(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	err := run(ctx, func(k string) string {
		return map[string]string{"LOCAL_STRIPE_ADDR": "127.0.0.1:0", "LOCAL_STRIPE_WEBHOOK_URL": "off"}[k]
	}, slog.New(slog.DiscardHandler))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "APP_ENV")
}
