package config_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/config"
)

func load(env map[string]string) (config.Config, error) {
	return config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
}

func TestDefaults(t *testing.T) {
	c, err := load(nil)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:8080", c.ListenAddr)
	assert.Equal(t, 720*time.Hour, c.EventTTL)
	assert.Equal(t, "stripe-payments-events", c.EventsTable)
	assert.Equal(t, config.DevDynamoEndpoint, c.DynamoEndpoint)
	assert.True(t, c.UsingDevWebhookSecret)
	assert.False(t, c.Livemode())
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		check   func(t *testing.T, c config.Config)
		wantErr string
	}{
		{name: "rotation secrets", env: map[string]string{"STRIPE_WEBHOOK_SECRET": " whsec_a , whsec_b ,"},
			check: func(t *testing.T, c config.Config) { assert.Equal(t, []string{"whsec_a", "whsec_b"}, c.WebhookSecrets) }},
		{name: "empty endpoint means AWS", env: map[string]string{"DYNAMODB_ENDPOINT": ""},
			check: func(t *testing.T, c config.Config) { assert.Empty(t, c.DynamoEndpoint) }},
		{name: "empty token disables internal API", env: map[string]string{"INTERNAL_API_TOKEN": ""},
			check: func(t *testing.T, c config.Config) { assert.Empty(t, c.InternalAPIToken) }},
		{name: "live key", env: map[string]string{"STRIPE_API_KEY": "sk_live_abc"},
			check: func(t *testing.T, c config.Config) { assert.True(t, c.Livemode()) }},
		{name: "bad ttl", env: map[string]string{"EVENT_TTL": "forever"}, wantErr: "EVENT_TTL"},
		{name: "negative ttl", env: map[string]string{"EVENT_TTL": "-1h"}, wantErr: "EVENT_TTL"},
		{name: "publishable key", env: map[string]string{"STRIPE_API_KEY": "pk_test_x"}, wantErr: "STRIPE_API_KEY"},
		{name: "bad platform account", env: map[string]string{"STRIPE_PLATFORM_ACCOUNT": "platform"}, wantErr: "STRIPE_PLATFORM_ACCOUNT"},
		{name: "only commas", env: map[string]string{"STRIPE_WEBHOOK_SECRET": ",,"}, wantErr: "STRIPE_WEBHOOK_SECRET"},
		{name: "bad log level", env: map[string]string{"LOG_LEVEL": "loud"}, wantErr: "LOG_LEVEL"},
		{name: "table name too short", env: map[string]string{"EVENTS_TABLE": "ab"}, wantErr: "EVENTS_TABLE"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(tc.env)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			tc.check(t, c)
		})
	}
}

func TestLoggedConfigHidesSecrets(t *testing.T) {
	env := map[string]string{
		"STRIPE_WEBHOOK_SECRET": "whsec_supersecretvalue1",
		"STRIPE_API_KEY":        "sk_test_supersecretvalue2",
		"INTERNAL_API_TOKEN":    "supersecretvalue3",
		"ACTIONS_SECRET":        "supersecretvalue4",
		"DATABASE_URL":          "postgres://user:supersecretvalue5@db:5432/x",
	}
	c, err := load(env)
	require.NoError(t, err)
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "config", c)
	for i := 1; i <= 5; i++ {
		assert.NotContains(t, buf.String(), fmt.Sprintf("supersecretvalue%d", i))
	}
	assert.Contains(t, buf.String(), "sk_test_****")
	assert.Contains(t, buf.String(), "postgres://user:****@db:5432/x")
}
