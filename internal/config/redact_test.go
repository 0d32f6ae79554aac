package config_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/config"
)

func TestSecretsAndRedactor(t *testing.T) {
	env := map[string]string{
		"STRIPE_WEBHOOK_SECRET":   "whsec_fake_old_0123456789,whsec_fake_new_0123456789",
		"STRIPE_API_KEY":          "sk_test_fake_abcdefghijkl",
		"INTERNAL_API_TOKEN":      "token-0123456789abcdef0123456789abcdef",
		"ACTIONS_SECRET":          "actions-0123456789",
		"ACTIONS_URL":             "https://hooks:hookpass123@example.com/actions",
		"DATABASE_URL":            "postgres://app:dbpass12345@db:5432/payments",
		"STRIPE_PLATFORM_ACCOUNT": "acct_1Platform",
	}
	cfg, err := config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	secrets := cfg.Secrets()
	assert.ElementsMatch(t, []string{"whsec_fake_old_0123456789", "whsec_fake_new_0123456789", "sk_test_fake_abcdefghijkl",
		"token-0123456789abcdef0123456789abcdef", "actions-0123456789", "dbpass12345", "hookpass123"}, secrets)

	var out bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{ReplaceAttr: config.Redactor(secrets...)}))
	log.Error("connect postgres://app:dbpass12345@db failed with key sk_test_fake_abcdefghijkl",
		"error", fmt.Errorf("wrapped: %w", errors.New(`stripe said {"payment_intent":{"client_secret":"pi_3MtwBw_secret_YrKJUKri"}}`)),
		slog.Group("request", "authorization", "Bearer token-0123456789", "body", []byte("whsec_fake_new_0123456789")),
		"count", 3)
	text := out.String()
	for _, s := range append(secrets, "pi_3MtwBw_secret_YrKJUKri") {
		assert.NotContains(t, text, s)
	}
	assert.Contains(t, text, "sk_test_****")
	assert.Contains(t, text, "[client_secret]")
	assert.Contains(t, text, `"count":3`)

	dev, err := config.Load(func(k string) (string, bool) { return "development", k == "APP_ENV" })
	require.NoError(t, err)
	assert.Empty(t, dev.Secrets(), "the public dev defaults are printed on purpose, never masked")
}

// docs/design.md §3 / RELIABILITY "Secrets never logged": a password in DATABASE_URL
// never shows in the configuration logged at start, in any form Postgres'
// driver takes it (URL user info, the URL's password parameter, a
// keyword/value string), and the redactor knows it.
func TestDatabasePasswordNeverLogged(t *testing.T) {
	const password = "dbpass12345"
	for _, url := range []string{
		"postgres://app:" + password + "@db:5432/payments",
		"postgres://app@db:5432/payments?sslmode=disable&password=" + password,
		"postgresql://db/payments?user=app&password=" + password,
		"host=db user=app password=" + password + " dbname=payments sslmode=disable",
		"host=db user=app password = '" + password + "' dbname=payments",
	} {
		t.Run(url, func(t *testing.T) {
			parsed, err := pgconn.ParseConfig(url)
			require.NoError(t, err)
			require.Equal(t, password, parsed.Password, "the driver takes this password")
			env := map[string]string{
				"STRIPE_WEBHOOK_SECRET": "whsec_fake_0123456789", "STRIPE_API_KEY": "sk_test_fake_abcdefghijkl",
				"INTERNAL_API_TOKEN": "token-0123456789abcdef0123456789abcdef", "STRIPE_PLATFORM_ACCOUNT": "acct_1Platform", "DATABASE_URL": url,
			}
			cfg, err := config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			require.NoError(t, err)
			var out bytes.Buffer
			slog.New(slog.NewJSONHandler(&out, nil)).Info("starting", "config", cfg) // as serve logs it, without the redactor
			assert.NotContains(t, out.String(), password)
			assert.Contains(t, out.String(), "db", "the rest of the URL is still shown")
			assert.Contains(t, cfg.Secrets(), password)
		})
	}
}
