// Package config loads the service configuration from the environment,
// validates it once, and masks secrets whenever it is logged.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net/mail"
	"os"
	"strconv"
	"strings"
	"time"
)

// Dev defaults. They are for local development only and are printed at start
// so nobody mistakes them for production values.
const (
	DevWebhookSecret    = "whsec_dev_local_only"
	DevAPIKey           = "sk_test_dev_local_only"
	DevInternalAPIToken = "dev-internal-token"
	DevActionsSecret    = "dev-actions-secret"
	DevDatabaseURL      = "postgres://postgres@127.0.0.1:55432/stripe_payments?sslmode=disable"
	DevDynamoEndpoint   = "http://127.0.0.1:8766"
)

// Config is every setting of the service. Fields map one to one onto the
// environment variables of DESIGN §3.
type Config struct {
	ListenAddr            string
	WebhookSecrets        []string
	StripeAPIKey          string
	StripeAPIBase         string
	PlatformAccount       string
	DatabaseURL           string
	DynamoEndpoint        string
	AWSRegion             string
	EventsTable           string
	BillingTable          string
	BillingHistoryTable   string
	LocksTable            string
	InternalAPIToken      string
	EventTTL              time.Duration
	ActionsURL            string
	ActionsSecret         string
	WebhookTolerance      time.Duration
	WebhookMaxBody        int64
	LogLevel              slog.Level
	ShutdownTimeout       time.Duration
	IngestMaxBatch        int
	PprofAddr             string // PPROF_ADDR: net/http/pprof on its own listener; empty = off
	SESFromAddress        string // SES_FROM_ADDRESS: reminder emails through SES from it; empty = off
	SESEndpoint           string // SES_ENDPOINT: SES API endpoint override (tests); empty = AWS
	SESConfigurationSet   string // SES_CONFIGURATION_SET: optional
	IngestFlushers        int
	PollEvery             time.Duration // POLL_EVERY: run the poller inside serve; 0 = off
	UsingDevWebhookSecret bool
	UsingDevAPIToken      bool
	Billing               BillingConfig
}

// Lookup reads one variable; os.LookupEnv in production, a map in tests.
type Lookup func(key string) (string, bool)

// FromEnv loads the configuration from the process environment.
func FromEnv() (Config, error) { return Load(os.LookupEnv) }

// Load builds a Config from lookup, applying dev defaults, then validates it.
func Load(lookup Lookup) (Config, error) {
	get := func(key, def string) string {
		if v, ok := lookup(key); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
		return def
	}
	_, hasSecret := lookup("STRIPE_WEBHOOK_SECRET")
	_, hasToken := lookup("INTERNAL_API_TOKEN")
	c := Config{
		ListenAddr:          get("LISTEN_ADDR", "127.0.0.1:8080"),
		StripeAPIKey:        get("STRIPE_API_KEY", DevAPIKey),
		StripeAPIBase:       strings.TrimRight(get("STRIPE_API_BASE", "https://api.stripe.com"), "/"),
		PlatformAccount:     get("STRIPE_PLATFORM_ACCOUNT", "acct_platform_dev"),
		DatabaseURL:         get("DATABASE_URL", DevDatabaseURL),
		DynamoEndpoint:      get("DYNAMODB_ENDPOINT", DevDynamoEndpoint),
		AWSRegion:           get("AWS_REGION", "us-east-1"),
		EventsTable:         get("EVENTS_TABLE", "stripe-payments-events"),
		BillingTable:        get("BILLING_TABLE", "stripe-payments-billing"),
		BillingHistoryTable: get("BILLING_HISTORY_TABLE", "stripe-payments-billing-history"),
		LocksTable:          get("LOCKS_TABLE", "stripe-payments-locks"),
		ActionsURL:          get("ACTIONS_URL", ""),
		PprofAddr:           get("PPROF_ADDR", ""),
		SESFromAddress:      get("SES_FROM_ADDRESS", ""),
		SESEndpoint:         get("SES_ENDPOINT", ""),
		SESConfigurationSet: get("SES_CONFIGURATION_SET", ""),
		ActionsSecret:       get("ACTIONS_SECRET", DevActionsSecret),
		WebhookTolerance:    300 * time.Second,
		WebhookMaxBody:      1 << 20,
		ShutdownTimeout:     20 * time.Second,
	}
	// DYNAMODB_ENDPOINT set to the empty string means "real AWS".
	if v, ok := lookup("DYNAMODB_ENDPOINT"); ok && strings.TrimSpace(v) == "" {
		c.DynamoEndpoint = ""
	}
	// INTERNAL_API_TOKEN set to the empty string disables the internal routes.
	if v, ok := lookup("INTERNAL_API_TOKEN"); ok {
		c.InternalAPIToken = strings.TrimSpace(v)
	} else {
		c.InternalAPIToken = DevInternalAPIToken
	}
	c.UsingDevAPIToken = !hasToken
	c.UsingDevWebhookSecret = !hasSecret
	for _, s := range strings.Split(get("STRIPE_WEBHOOK_SECRET", DevWebhookSecret), ",") {
		if s = strings.TrimSpace(s); s != "" {
			c.WebhookSecrets = append(c.WebhookSecrets, s)
		}
	}

	var errs []error
	var err error
	if c.EventTTL, err = time.ParseDuration(get("EVENT_TTL", "720h")); err != nil {
		errs = append(errs, fmt.Errorf("EVENT_TTL: %w", err))
	}
	if c.IngestMaxBatch, err = strconv.Atoi(get("INGEST_MAX_BATCH", "25")); err != nil || c.IngestMaxBatch < 1 || c.IngestMaxBatch > 100 {
		errs = append(errs, errors.New("INGEST_MAX_BATCH: an integer from 1 to 100"))
	}
	if c.IngestFlushers, err = strconv.Atoi(get("INGEST_FLUSHERS", "2")); err != nil || c.IngestFlushers < 1 || c.IngestFlushers > 64 {
		errs = append(errs, errors.New("INGEST_FLUSHERS: an integer from 1 to 64"))
	}
	if v := get("POLL_EVERY", ""); v != "" {
		if c.PollEvery, err = time.ParseDuration(v); err != nil {
			errs = append(errs, fmt.Errorf("POLL_EVERY: %w", err))
		} else if c.PollEvery < time.Second {
			errs = append(errs, errors.New("POLL_EVERY: at least 1s (empty turns polling off)"))
		}
	}
	if err := c.LogLevel.UnmarshalText([]byte(get("LOG_LEVEL", "info"))); err != nil {
		errs = append(errs, fmt.Errorf("LOG_LEVEL: %w", err))
	}
	c.Billing, err = loadBilling(get)
	errs = append(errs, err)
	errs = append(errs, c.Validate())
	return c, errors.Join(errs...)
}

// Validate reports every invalid setting at once.
func (c Config) Validate() error {
	var errs []error
	if len(c.WebhookSecrets) == 0 {
		errs = append(errs, errors.New("STRIPE_WEBHOOK_SECRET: at least one secret is required"))
	}
	if c.SESFromAddress != "" {
		if _, err := mail.ParseAddress(c.SESFromAddress); err != nil {
			errs = append(errs, fmt.Errorf("SES_FROM_ADDRESS: %w", err))
		}
	}
	if !strings.HasPrefix(c.StripeAPIKey, "sk_") && !strings.HasPrefix(c.StripeAPIKey, "rk_") {
		errs = append(errs, errors.New("STRIPE_API_KEY: must be a secret (sk_) or restricted (rk_) key"))
	}
	if !strings.HasPrefix(c.PlatformAccount, "acct_") {
		errs = append(errs, errors.New("STRIPE_PLATFORM_ACCOUNT: must start with acct_"))
	}
	if c.EventTTL <= 0 {
		errs = append(errs, errors.New("EVENT_TTL: must be positive"))
	}
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("DATABASE_URL: required"))
	}
	for name, v := range map[string]string{"EVENTS_TABLE": c.EventsTable, "BILLING_TABLE": c.BillingTable, "BILLING_HISTORY_TABLE": c.BillingHistoryTable, "LOCKS_TABLE": c.LocksTable} {
		if len(v) < 3 || len(v) > 255 {
			errs = append(errs, fmt.Errorf("%s: a table name has 3 to 255 characters", name))
		}
	}
	return errors.Join(errs...)
}

// Livemode reports whether the API key is a live key; events whose livemode
// differs are ignored.
func (c Config) Livemode() bool {
	return strings.HasPrefix(c.StripeAPIKey, "sk_live_") || strings.HasPrefix(c.StripeAPIKey, "rk_live_")
}

// LogValue masks every secret so a logged Config never leaks one.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("listen_addr", c.ListenAddr),
		slog.Int("webhook_secrets", len(c.WebhookSecrets)),
		slog.String("stripe_api_key", Mask(c.StripeAPIKey)),
		slog.String("stripe_api_base", c.StripeAPIBase),
		slog.String("platform_account", c.PlatformAccount),
		slog.String("database_url", MaskURL(c.DatabaseURL)),
		slog.String("dynamodb_endpoint", c.DynamoEndpoint),
		slog.String("aws_region", c.AWSRegion),
		slog.String("events_table", c.EventsTable),
		slog.String("billing_table", c.BillingTable),
		slog.String("billing_history_table", c.BillingHistoryTable),
		slog.String("locks_table", c.LocksTable),
		slog.Bool("internal_api_enabled", c.InternalAPIToken != ""),
		slog.String("event_ttl", c.EventTTL.String()),
		slog.Bool("actions_enabled", c.ActionsURL != ""),
		slog.Bool("reminder_emails", c.SESFromAddress != ""),
		slog.String("poll_every", c.PollEvery.String()),
		slog.Any("billing", c.Billing),
	)
}

// Mask keeps a recognisable prefix of a secret and hides the rest.
func Mask(secret string) string {
	if secret == "" {
		return ""
	}
	for _, prefix := range []string{"sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_"} {
		if strings.HasPrefix(secret, prefix) {
			return prefix + "****"
		}
	}
	return "****"
}

// MaskURL hides the password of a connection URL.
func MaskURL(raw string) string {
	at := strings.LastIndex(raw, "@")
	scheme := strings.Index(raw, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return raw
	}
	creds := raw[scheme+3 : at]
	if i := strings.Index(creds, ":"); i >= 0 {
		return raw[:scheme+3] + creds[:i] + ":****" + raw[at:]
	}
	return raw
}
