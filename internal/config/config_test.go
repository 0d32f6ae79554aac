package config_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/config"
)

func load(env map[string]string) (config.Config, error) {
	return loadFor(env, config.UsesServe)
}

func loadFor(env map[string]string, uses config.Uses) (config.Config, error) {
	return config.LoadFor(func(k string) (string, bool) { v, ok := env[k]; return v, ok }, uses)
}

// dev is env in development mode.
func dev(env map[string]string) map[string]string {
	out := map[string]string{"APP_ENV": "development"}
	for k, v := range env {
		out[k] = v
	}
	return out
}

// production is a complete production environment: nothing missing, no
// development value.
func production() map[string]string {
	return map[string]string{
		"STRIPE_WEBHOOK_SECRET":   "whsec_fake_prod_0123456789",
		"STRIPE_API_KEY":          "sk_" + "live_" + "not_a_real_key",
		"STRIPE_PLATFORM_ACCOUNT": "acct_1Platform",
		"DATABASE_URL":            "postgres://app:pw@db.internal:5432/payments",
		"INTERNAL_API_TOKEN":      "token-0123456789abcdef0123456789abcdef",
		"ACTIONS_URL":             "https://actions.internal/hook",
		"ACTIONS_SECRET":          "actions-0123456789",
	}
}

func TestDefaults(t *testing.T) {
	c, err := load(dev(nil))
	require.NoError(t, err)
	assert.True(t, c.Development)
	assert.Equal(t, "127.0.0.1:8080", c.ListenAddr)
	assert.Equal(t, 720*time.Hour, c.EventTTL)
	assert.Equal(t, "stripe-payments-events", c.EventsTable)
	assert.Equal(t, config.DevDynamoEndpoint, c.DynamoEndpoint)
	assert.Equal(t, []string{config.DevWebhookSecret}, c.WebhookSecrets)
	assert.Equal(t, config.DevInternalAPIToken, c.InternalAPIToken)
	assert.True(t, c.UsingDevWebhookSecret)
	assert.True(t, c.UsingDevAPIToken)
	assert.Empty(t, c.ActionsSecret, "without ACTIONS_URL the actions secret is unused and gets no default")
	assert.False(t, c.Livemode())
}

func TestProductionNeedsNoDefault(t *testing.T) {
	c, err := load(production())
	require.NoError(t, err)
	assert.False(t, c.Development)
	assert.Empty(t, c.DynamoEndpoint, "outside development an unset DYNAMODB_ENDPOINT means AWS, never DynamoDB Local")
	assert.False(t, c.UsingDevWebhookSecret)
	assert.False(t, c.UsingDevAPIToken)
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		check   func(t *testing.T, c config.Config)
		wantErr string
	}{
		{name: "rotation secrets", env: map[string]string{"STRIPE_WEBHOOK_SECRET": " whsec_fake_a , whsec_fake_b ,"},
			check: func(t *testing.T, c config.Config) {
				assert.Equal(t, []string{"whsec_fake_a", "whsec_fake_b"}, c.WebhookSecrets)
			}},
		{name: "empty endpoint means AWS", env: map[string]string{"DYNAMODB_ENDPOINT": ""},
			check: func(t *testing.T, c config.Config) { assert.Empty(t, c.DynamoEndpoint) }},
		{name: "disabled token disables internal API", env: map[string]string{"INTERNAL_API_TOKEN": "disabled"},
			check: func(t *testing.T, c config.Config) { assert.Empty(t, c.InternalAPIToken) }},
		{name: "blank token in development is the dev token, never off", env: map[string]string{"INTERNAL_API_TOKEN": " "},
			check: func(t *testing.T, c config.Config) { assert.Equal(t, config.DevInternalAPIToken, c.InternalAPIToken) }},
		{name: "actions URL gets the dev secret", env: map[string]string{"ACTIONS_URL": "http://127.0.0.1:9/a"},
			check: func(t *testing.T, c config.Config) { assert.Equal(t, config.DevActionsSecret, c.ActionsSecret) }},
		{name: "test key", env: map[string]string{"STRIPE_API_KEY": "sk_test_fake_abc"},
			check: func(t *testing.T, c config.Config) { assert.False(t, c.Livemode()) }},
		{name: "bad ttl", env: map[string]string{"EVENT_TTL": "forever"}, wantErr: "EVENT_TTL"},
		{name: "negative ttl", env: map[string]string{"EVENT_TTL": "-1h"}, wantErr: "EVENT_TTL"},
		{name: "publishable key", env: map[string]string{"STRIPE_API_KEY": "pk_test_fake_x"}, wantErr: "STRIPE_API_KEY"},
		{name: "bad platform account", env: map[string]string{"STRIPE_PLATFORM_ACCOUNT": "platform"}, wantErr: "STRIPE_PLATFORM_ACCOUNT"},
		{name: "bad log level", env: map[string]string{"LOG_LEVEL": "loud"}, wantErr: "LOG_LEVEL"},
		{name: "table name too short", env: map[string]string{"EVENTS_TABLE": "ab"}, wantErr: "EVENTS_TABLE"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(dev(tc.env))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			tc.check(t, c)
		})
	}
}

// TestFailClosed: outside development mode every missing or blank required
// setting is named, all in one error; APP_ENV values other than
// "development" (a typo, "production", blank) are production.
func TestFailClosed(t *testing.T) {
	required := []string{"STRIPE_WEBHOOK_SECRET", "STRIPE_API_KEY", "STRIPE_PLATFORM_ACCOUNT", "DATABASE_URL", "INTERNAL_API_TOKEN", "ACTIONS_SECRET"}
	for _, appEnv := range []string{"<unset>", "", "production", "Development", "dev"} {
		for _, name := range required {
			for _, value := range []string{"<unset>", "", "  ", ",", " , "} {
				if value == "," || value == " , " {
					if name != "STRIPE_WEBHOOK_SECRET" {
						continue // only the secret list splits on commas
					}
				}
				t.Run(fmt.Sprintf("APP_ENV=%q/%s=%q", appEnv, name, value), func(t *testing.T) {
					env := production()
					if appEnv != "<unset>" {
						env["APP_ENV"] = appEnv
					}
					delete(env, name)
					if value != "<unset>" {
						env[name] = value
					}
					_, err := load(env)
					require.Error(t, err)
					assert.Contains(t, err.Error(), "missing required settings")
					assert.Contains(t, err.Error(), name)
					for _, other := range required {
						if other != name {
							assert.NotContains(t, err.Error(), other+",", "only the missing one is named")
						}
					}
				})
			}
		}
	}
	t.Run("all missing at once, in one error", func(t *testing.T) {
		_, err := load(map[string]string{"ACTIONS_URL": "https://actions.internal/hook", "STRIPE_WEBHOOK_SECRET": " "})
		require.Error(t, err)
		line := ""
		for _, l := range strings.Split(err.Error(), "\n") {
			if strings.Contains(l, "missing required settings") {
				line = l
			}
		}
		for _, name := range required {
			assert.Contains(t, line, name)
		}
		assert.Contains(t, line, "disabled", "the error says how to turn the internal routes off")
	})
	t.Run("without ACTIONS_URL the actions secret is not required", func(t *testing.T) {
		env := production()
		delete(env, "ACTIONS_URL")
		delete(env, "ACTIONS_SECRET")
		_, err := load(env)
		require.NoError(t, err)
	})
	t.Run("disabled turns the internal routes off", func(t *testing.T) {
		env := production()
		env["INTERNAL_API_TOKEN"] = "disabled"
		c, err := load(env)
		require.NoError(t, err)
		assert.Empty(t, c.InternalAPIToken)
	})
}

// TestSubcommandsNeedOnlyWhatTheyUse: each subcommand requires the settings
// it uses and no other.
func TestSubcommandsNeedOnlyWhatTheyUse(t *testing.T) {
	all := []string{"STRIPE_WEBHOOK_SECRET", "STRIPE_API_KEY", "STRIPE_PLATFORM_ACCOUNT", "DATABASE_URL", "INTERNAL_API_TOKEN", "ACTIONS_SECRET"}
	tests := []struct {
		name  string
		uses  config.Uses
		needs []string
	}{
		{"serve", config.UsesServe, all},
		{"migrate", config.UsesMigrate, []string{"DATABASE_URL"}},
		{"poll", config.UsesPoll, []string{"STRIPE_API_KEY", "STRIPE_PLATFORM_ACCOUNT", "DATABASE_URL"}},
		{"billing", config.UsesBilling, []string{"STRIPE_API_KEY", "DATABASE_URL"}},
		{"events sign", config.UsesSign, []string{"STRIPE_WEBHOOK_SECRET"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadFor(map[string]string{"ACTIONS_URL": "https://actions.internal/hook"}, tc.uses)
			require.Error(t, err)
			for _, name := range all {
				if contains(tc.needs, name) {
					assert.Contains(t, err.Error(), name)
				} else {
					assert.NotContains(t, err.Error(), name)
				}
			}
			env := production()
			for _, name := range all {
				if !contains(tc.needs, name) {
					delete(env, name)
				}
			}
			_, err = loadFor(env, tc.uses)
			require.NoError(t, err, "only %v set", tc.needs)
		})
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestLiveKeyRefusesDevValues: a live key with any development value,
// defaulted or set by hand, is refused in every mode.
func TestLiveKeyRefusesDevValues(t *testing.T) {
	devValues := map[string]string{
		"STRIPE_WEBHOOK_SECRET":   config.DevWebhookSecret,
		"STRIPE_PLATFORM_ACCOUNT": config.DevPlatformAccount,
		"DATABASE_URL":            config.DevDatabaseURL,
		"DYNAMODB_ENDPOINT":       config.DevDynamoEndpoint,
		"INTERNAL_API_TOKEN":      config.DevInternalAPIToken,
		"ACTIONS_SECRET":          config.DevActionsSecret,
	}
	for _, key := range []string{"sk_" + "live_" + "not_a_real_key", "rk_" + "live_" + "not_a_real_key"} {
		for name, value := range devValues {
			for _, mode := range []string{"development", "production"} {
				t.Run(fmt.Sprintf("%s/%s/set by hand/%s", key[:8], name, mode), func(t *testing.T) {
					env := production()
					env["STRIPE_API_KEY"] = key
					env[name] = value
					if name == "STRIPE_WEBHOOK_SECRET" {
						env[name] = "whsec_fake_prod_0123456789," + value // one of a rotation is enough
					}
					if mode == "development" {
						env["APP_ENV"] = "development"
					}
					_, err := load(env)
					require.Error(t, err)
					assert.Contains(t, err.Error(), "live key")
					assert.Contains(t, err.Error(), name)
					assert.NotContains(t, err.Error(), value, "the error names the variable, never its value")
				})
			}
			if name == "DYNAMODB_ENDPOINT" {
				continue // no dev default outside development; set by hand above
			}
			t.Run(fmt.Sprintf("%s/%s/dev default", key[:8], name), func(t *testing.T) {
				env := dev(production())
				env["STRIPE_API_KEY"] = key
				delete(env, name)
				_, err := load(env)
				require.Error(t, err)
				assert.Contains(t, err.Error(), "live key")
				assert.Contains(t, err.Error(), name)
			})
		}
	}
	t.Run("a live key with production values starts", func(t *testing.T) {
		c, err := load(production())
		require.NoError(t, err)
		assert.True(t, c.Livemode())
	})
	t.Run("a test key with dev values starts outside development", func(t *testing.T) {
		env := production()
		env["STRIPE_API_KEY"] = "sk_test_fake_0123456789"
		for name, value := range devValues {
			env[name] = value
		}
		// except the dev token, which the length rule refuses outside
		// development mode (TestInternalAPITokenLength)
		env["INTERNAL_API_TOKEN"] = "token-0123456789abcdef0123456789abcdef"
		_, err := load(env)
		require.NoError(t, err)
		env["INTERNAL_API_TOKEN"] = config.DevInternalAPIToken
		_, err = load(env)
		require.ErrorContains(t, err, "INTERNAL_API_TOKEN: at least 32 characters")
	})
}

func TestLoggedConfigHidesSecrets(t *testing.T) {
	env := map[string]string{
		"STRIPE_WEBHOOK_SECRET": "whsec_fake_supersecretvalue1",
		"STRIPE_API_KEY":        "sk_test_fake_supersecretvalue2",
		"INTERNAL_API_TOKEN":    "supersecretvalue3",
		"ACTIONS_SECRET":        "supersecretvalue4",
		"DATABASE_URL":          "postgres://user:supersecretvalue5@db:5432/x",
	}
	c, err := load(dev(env))
	require.NoError(t, err)
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "config", c)
	for i := 1; i <= 5; i++ {
		assert.NotContains(t, buf.String(), fmt.Sprintf("supersecretvalue%d", i))
	}
	assert.Contains(t, buf.String(), "sk_test_****")
	assert.Contains(t, buf.String(), "postgres://user:****@db:5432/x")
}
