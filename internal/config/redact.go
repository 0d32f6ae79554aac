package config

import (
	"log/slog"
	"regexp"
	"strings"
)

// clientSecret matches Stripe client secrets (PaymentIntents, SetupIntents,
// sources): "<id>_secret_<random>". Stripe's API answers (and the errors
// stripe-go builds from them) carry them; a log line never should.
var clientSecret = regexp.MustCompile(`\b(?:pi|seti|src)_[A-Za-z0-9]+_secret_[A-Za-z0-9_-]+`)

// Secrets lists the configured secrets that no log line may show: the
// webhook secrets, the Stripe API key, the internal API token, the actions
// secret and the passwords in DATABASE_URL and ACTIONS_URL. The dev defaults
// are left out: they are public and printed at start on purpose.
func (c Config) Secrets() []string {
	var out []string
	add := func(s string) {
		switch s {
		case "", DevWebhookSecret, DevAPIKey, DevInternalAPIToken, DevActionsSecret:
			return
		}
		out = append(out, s)
	}
	for _, s := range c.WebhookSecrets {
		add(s)
	}
	add(c.StripeAPIKey)
	add(c.InternalAPIToken)
	add(c.ActionsSecret)
	for _, raw := range []string{c.DatabaseURL, c.ActionsURL} {
		if pw, _ := connPassword(raw); pw != "" {
			add(pw)
		}
	}
	return out
}

// Redactor returns a slog ReplaceAttr that masks, in the message and in
// every string or error attribute, each of secrets (those of at least 8
// characters: a shorter one would mask ordinary words) and every Stripe
// client secret. It is the last line of defence; code must still not log
// secrets, and the tests check the program's output for them.
func Redactor(secrets ...string) func(groups []string, a slog.Attr) slog.Attr {
	var masked []string
	for _, s := range secrets {
		if len(s) >= 8 {
			masked = append(masked, s)
		}
	}
	redact := func(s string) string {
		for _, secret := range masked {
			if strings.Contains(s, secret) {
				s = strings.ReplaceAll(s, secret, Mask(secret))
			}
		}
		if strings.Contains(s, "_secret_") {
			s = clientSecret.ReplaceAllString(s, "[client_secret]")
		}
		return s
	}
	return func(_ []string, a slog.Attr) slog.Attr {
		switch a.Value.Kind() {
		case slog.KindString:
			if s := a.Value.String(); s != "" {
				a.Value = slog.StringValue(redact(s))
			}
		case slog.KindAny:
			switch v := a.Value.Any().(type) {
			case error:
				a.Value = slog.StringValue(redact(v.Error()))
			case []byte:
				a.Value = slog.StringValue(redact(string(v)))
			}
		}
		return a
	}
}
