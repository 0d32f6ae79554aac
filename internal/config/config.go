// Package config loads the service configuration from the environment,
// validates it once, and masks secrets whenever it is logged.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net/mail"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/stripeid"
)

// Dev defaults. They apply only in development mode (APP_ENV=development,
// which `make run` and `make test` set) and are printed at start so nobody
// mistakes them for production values.
const (
	DevWebhookSecret    = "whsec_dev_local_only"
	DevAPIKey           = "sk_test_dev_local_only"
	DevInternalAPIToken = "dev-internal-token"
	DevActionsSecret    = "dev-actions-secret"
	DevDatabaseURL      = "postgres://postgres@127.0.0.1:55432/stripe_payments?sslmode=disable"
	DevDynamoEndpoint   = "http://127.0.0.1:8766"
	DevPlatformAccount  = "acct_platform_dev"
)

// DevLocalStripeAddr is where `make run` starts the local Stripe
// (cmd/stripe-local), LOCAL_STRIPE_ADDR's default.
const DevLocalStripeAddr = "127.0.0.1:8082"

// stripeAPIBase is STRIPE_API_BASE's default (docs/design.md §3 "The embedded
// default for Stripe"): the local Stripe in development mode, Stripe itself
// otherwise.
func stripeAPIBase(dev bool, get func(key, def string) string) string {
	if dev {
		return "http://" + get("LOCAL_STRIPE_ADDR", DevLocalStripeAddr)
	}
	return "https://api.stripe.com"
}

// DevelopmentEnv is the APP_ENV value under which the dev defaults apply.
const DevelopmentEnv = "development"

// InternalAPIDisabled is the INTERNAL_API_TOKEN value that turns the internal
// and purchase routes off (a blank value is a missing one, never "off").
const InternalAPIDisabled = "disabled"

// Config is every setting of the service. Fields map one to one onto the
// environment variables of docs/design.md §3.
type Config struct {
	Development         bool // APP_ENV=development: dev defaults apply
	ListenAddr          string
	WebhookSecrets      []string
	StripeAPIKey        string
	StripeAPIBase       string
	PlatformAccount     string
	DatabaseURL         string
	DynamoEndpoint      string
	AWSRegion           string
	EventsTable         string
	BillingTable        string
	BillingHistoryTable string
	LocksTable          string
	InternalAPIToken    string // empty: the internal routes are off (INTERNAL_API_TOKEN=disabled)
	EventTTL            time.Duration
	ActionsURL          string
	ActionsSecret       string
	WebhookTolerance    time.Duration
	WebhookMaxBody      int64
	LogLevel            slog.Level
	ShutdownTimeout     time.Duration
	IngestMaxBatch      int
	PprofAddr           string // PPROF_ADDR: net/http/pprof on its own listener; empty = off
	SESFromAddress      string // SES_FROM_ADDRESS: reminder emails through SES from it; empty = off
	SESEndpoint         string // SES_ENDPOINT: SES API endpoint override (tests); empty = AWS
	SESConfigurationSet string // SES_CONFIGURATION_SET: optional
	IngestFlushers      int
	IngestRecords       IngestRecords // the events table's write-behind: INGEST_WRITE_BEHIND, INGEST_RECORD_WRITERS, INGEST_RECORD_BACKLOG
	PollEvery           time.Duration // POLL_EVERY: run the poller inside serve; 0 = off
	ReconcileEvery      time.Duration // RECONCILE_EVERY: start a reconciliation inside serve this often; 0 = off
	ReconcileWindow     time.Duration // RECONCILE_WINDOW: final objects changed within it are reconciled (default 90 days)
	EventBridgeQueueURL string        // EVENTBRIDGE_QUEUE_URL: the EventBridge intake's SQS queue; empty = off
	// BillingTriggersQueueURL is BILLING_TRIGGERS_QUEUE_URL: the SQS queue of
	// the platform's income and balance events that trigger a collection
	// (docs/design.md §8); empty = off.
	BillingTriggersQueueURL string
	SQSEndpoint             string // SQS_ENDPOINT: SQS API endpoint override (the local SQS server); empty = AWS
	StripeAPIVersion        string // STRIPE_API_VERSION: the api_version events are expected to carry (default: the version stripe-go pins)
	UsingDevWebhookSecret   bool
	UsingDevAPIToken        bool
	Billing                 BillingConfig
	Outbox                  OutboxConfig
	Retention               RetentionConfig // DEAD_LETTER_RETENTION, OPS_RETENTION (docs/retention.md)
	Limits                  LimitsConfig
	Admin                   AdminConfig // ADMIN_LISTEN_ADDR, TRUSTED_PROXIES, console sessions (admin.go)
}

// apiVersionPattern is a Stripe API version: a date, and a release name
// since 2024-09-30 (acacia, basil, clover...).
var apiVersionPattern = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}(\.[a-z]+)?$`)

// Uses names the required settings a subcommand uses. Only those are
// required (outside development mode) and given dev defaults (inside it);
// a subcommand never fails for a secret it does not use.
type Uses struct {
	WebhookSecret   bool // STRIPE_WEBHOOK_SECRET
	StripeAPIKey    bool // STRIPE_API_KEY
	PlatformAccount bool // STRIPE_PLATFORM_ACCOUNT
	Database        bool // DATABASE_URL
	InternalAPI     bool // INTERNAL_API_TOKEN
	Actions         bool // ACTIONS_SECRET, when ACTIONS_URL is set
}

// What each subcommand uses.
var (
	// UsesServe: everything.
	UsesServe = Uses{WebhookSecret: true, StripeAPIKey: true, PlatformAccount: true, Database: true, InternalAPI: true, Actions: true}
	// UsesMigrate: the databases only.
	UsesMigrate = Uses{Database: true}
	// UsesPoll: the Events API, the events table and the checkpoints; the
	// webhook secret only when replays are signed and POSTed (see poll).
	UsesPoll = Uses{StripeAPIKey: true, PlatformAccount: true, Database: true}
	// UsesBilling: Stripe charges, the billing tables and the outbox.
	UsesBilling = Uses{StripeAPIKey: true, Database: true}
	// UsesSign: the webhook secret (events sign without -secret).
	UsesSign = Uses{WebhookSecret: true}
)

// Lookup reads one variable; os.LookupEnv in production, a map in tests.
type Lookup func(key string) (string, bool)

// FromEnv loads the configuration of serve from the process environment.
func FromEnv() (Config, error) { return Load(os.LookupEnv) }

// FromEnvFor loads the configuration a subcommand uses from the process
// environment.
func FromEnvFor(uses Uses) (Config, error) { return LoadFor(os.LookupEnv, uses) }

// Load builds the Config of serve (every required setting) from lookup.
func Load(lookup Lookup) (Config, error) { return LoadFor(lookup, UsesServe) }

// LoadFor builds a Config from lookup for a subcommand that uses the given
// required settings, then validates it. Production fails closed (docs/design.md §3):
// dev defaults apply only under APP_ENV=development; outside it every
// missing or blank required setting is named in one error; and a live key
// together with any dev value is refused in every mode.
func LoadFor(lookup Lookup, uses Uses) (Config, error) {
	get := func(key, def string) string {
		if v, ok := lookup(key); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
		return def
	}
	appEnv, _ := lookup("APP_ENV")
	dev := strings.TrimSpace(appEnv) == DevelopmentEnv
	// devDefault is def in development mode and for a used setting, else "".
	devDefault := func(used bool, def string) string {
		if dev && used {
			return def
		}
		return ""
	}
	c := Config{
		Development:             dev,
		ListenAddr:              get("LISTEN_ADDR", "127.0.0.1:8080"),
		StripeAPIKey:            get("STRIPE_API_KEY", devDefault(uses.StripeAPIKey, DevAPIKey)),
		StripeAPIBase:           strings.TrimRight(get("STRIPE_API_BASE", stripeAPIBase(dev, get)), "/"),
		PlatformAccount:         get("STRIPE_PLATFORM_ACCOUNT", devDefault(uses.PlatformAccount, DevPlatformAccount)),
		DatabaseURL:             get("DATABASE_URL", devDefault(uses.Database, DevDatabaseURL)),
		DynamoEndpoint:          get("DYNAMODB_ENDPOINT", devDefault(true, DevDynamoEndpoint)),
		AWSRegion:               get("AWS_REGION", "us-east-1"),
		EventsTable:             get("EVENTS_TABLE", "stripe-payments-events"),
		BillingTable:            get("BILLING_TABLE", "stripe-payments-billing"),
		BillingHistoryTable:     get("BILLING_HISTORY_TABLE", "stripe-payments-billing-history"),
		LocksTable:              get("LOCKS_TABLE", "stripe-payments-locks"),
		ActionsURL:              get("ACTIONS_URL", ""),
		PprofAddr:               get("PPROF_ADDR", ""),
		SESFromAddress:          get("SES_FROM_ADDRESS", ""),
		SESEndpoint:             get("SES_ENDPOINT", ""),
		SESConfigurationSet:     get("SES_CONFIGURATION_SET", ""),
		EventBridgeQueueURL:     get("EVENTBRIDGE_QUEUE_URL", ""),
		BillingTriggersQueueURL: get("BILLING_TRIGGERS_QUEUE_URL", ""),
		SQSEndpoint:             get("SQS_ENDPOINT", ""),
		StripeAPIVersion:        get("STRIPE_API_VERSION", stripe.APIVersion),
		InternalAPIToken:        get("INTERNAL_API_TOKEN", devDefault(uses.InternalAPI, DevInternalAPIToken)),
		WebhookTolerance:        300 * time.Second,
		WebhookMaxBody:          1 << 20,
		ShutdownTimeout:         20 * time.Second,
	}
	// The actions secret signs deliveries to ACTIONS_URL: without a URL it
	// is unused, and gets no default.
	c.ActionsSecret = get("ACTIONS_SECRET", devDefault(uses.Actions && c.ActionsURL != "", DevActionsSecret))
	// DYNAMODB_ENDPOINT set to the empty string means "real AWS".
	if v, ok := lookup("DYNAMODB_ENDPOINT"); ok && strings.TrimSpace(v) == "" {
		c.DynamoEndpoint = ""
	}
	c.UsingDevAPIToken = dev && uses.InternalAPI && get("INTERNAL_API_TOKEN", "") == ""
	for _, s := range strings.Split(get("STRIPE_WEBHOOK_SECRET", ""), ",") {
		if s = strings.TrimSpace(s); s != "" {
			c.WebhookSecrets = append(c.WebhookSecrets, s)
		}
	}
	if len(c.WebhookSecrets) == 0 && dev && uses.WebhookSecret {
		c.WebhookSecrets, c.UsingDevWebhookSecret = []string{DevWebhookSecret}, true
	}

	var errs []error
	if missing := c.missing(uses); len(missing) > 0 {
		errs = append(errs, fmt.Errorf("missing required settings (dev defaults apply only with APP_ENV=%s): %s",
			DevelopmentEnv, strings.Join(missing, ", ")))
	}
	if devs := c.devValues(); c.Livemode() && len(devs) > 0 {
		errs = append(errs, fmt.Errorf("STRIPE_API_KEY is a live key but %s hold development values: refused in every mode",
			strings.Join(devs, ", ")))
	}
	var adminErr error
	c.Admin, adminErr = loadAdmin(get, c, uses)
	errs = append(errs, adminErr)
	if c.InternalAPIToken == InternalAPIDisabled {
		c.InternalAPIToken = ""
	}
	var err error
	if c.EventTTL, err = time.ParseDuration(get("EVENT_TTL", "720h")); err != nil {
		errs = append(errs, fmt.Errorf("EVENT_TTL: %w", err))
	}
	if c.IngestMaxBatch, err = strconv.Atoi(get("INGEST_MAX_BATCH", strconv.Itoa(DefaultIngestMaxBatch))); err != nil || c.IngestMaxBatch < 1 || c.IngestMaxBatch > 100 {
		errs = append(errs, errors.New("INGEST_MAX_BATCH: an integer from 1 to 100"))
	}
	if c.IngestFlushers, err = strconv.Atoi(get("INGEST_FLUSHERS", strconv.Itoa(DefaultIngestFlushers))); err != nil || c.IngestFlushers < 1 || c.IngestFlushers > 64 {
		errs = append(errs, errors.New("INGEST_FLUSHERS: an integer from 1 to 64"))
	}
	c.IngestRecords, err = loadIngestRecords(get)
	errs = append(errs, err)
	c.IngestRecords.resolveFreshWrite(c.DynamoEndpoint)
	if v := get("POLL_EVERY", ""); v != "" {
		if c.PollEvery, err = time.ParseDuration(v); err != nil {
			errs = append(errs, fmt.Errorf("POLL_EVERY: %w", err))
		} else if c.PollEvery < time.Second {
			errs = append(errs, errors.New("POLL_EVERY: at least 1s (empty turns polling off)"))
		}
	}
	if v := get("RECONCILE_EVERY", ""); v != "" {
		if c.ReconcileEvery, err = time.ParseDuration(v); err != nil {
			errs = append(errs, fmt.Errorf("RECONCILE_EVERY: %w", err))
		} else if c.ReconcileEvery < time.Minute {
			errs = append(errs, errors.New("RECONCILE_EVERY: at least 1m (empty turns it off)"))
		}
	}
	if c.ReconcileWindow, err = time.ParseDuration(get("RECONCILE_WINDOW", "2160h")); err != nil || c.ReconcileWindow < 24*time.Hour {
		errs = append(errs, errors.New("RECONCILE_WINDOW: a duration of at least 24h, such as 2160h (90 days)"))
	}
	if err := c.LogLevel.UnmarshalText([]byte(get("LOG_LEVEL", "info"))); err != nil {
		errs = append(errs, fmt.Errorf("LOG_LEVEL: %w", err))
	}
	c.Billing, err = loadBilling(get)
	errs = append(errs, err)
	c.Outbox, err = loadOutbox(get, c.EventTTL, c.Billing.LookbackDays)
	errs = append(errs, err)
	c.Limits, err = loadLimits(get)
	errs = append(errs, err)
	c.Retention, err = loadRetention(get)
	errs = append(errs, err)
	if !dev {
		errs = append(errs, c.productionRules(uses))
	}
	errs = append(errs, c.Validate())
	return c, errors.Join(errs...)
}

// productionRules are the settings refused outside development mode
// (docs/design.md §3 "Production fails closed"); INTERNAL_API_TOKEN's own
// rule is in loadAdmin.
func (c Config) productionRules(uses Uses) error {
	var errs []error
	// The key goes with every request to Stripe: never in clear text.
	if u, err := url.Parse(c.StripeAPIBase); uses.StripeAPIKey && (err != nil || !strings.EqualFold(u.Scheme, "https") || u.Host == "") {
		errs = append(errs, errors.New("STRIPE_API_BASE: must be an https:// URL outside development mode "+
			"(the API key is sent with every request), such as https://api.stripe.com"))
	}
	// Profiles and traces show memory, requests and secrets in flight.
	if c.PprofAddr != "" {
		if err := LoopbackAddr(c.PprofAddr); err != nil {
			errs = append(errs, fmt.Errorf("PPROF_ADDR: must bind to loopback outside development mode "+
				"(profiles show what is in memory): %w", err))
		}
	}
	return errors.Join(errs...)
}

// missing names the required settings of uses that are empty (after the dev
// defaults, so only outside development mode can one be missing).
func (c Config) missing(uses Uses) []string {
	var out []string
	need := func(used bool, name, value string) {
		if used && value == "" {
			out = append(out, name)
		}
	}
	if uses.WebhookSecret && len(c.WebhookSecrets) == 0 {
		out = append(out, "STRIPE_WEBHOOK_SECRET")
	}
	need(uses.StripeAPIKey, "STRIPE_API_KEY", c.StripeAPIKey)
	need(uses.PlatformAccount, "STRIPE_PLATFORM_ACCOUNT", c.PlatformAccount)
	need(uses.Database, "DATABASE_URL", c.DatabaseURL)
	if uses.InternalAPI && c.InternalAPIToken == "" {
		out = append(out, "INTERNAL_API_TOKEN (set it to "+InternalAPIDisabled+" to turn the internal routes off)")
	}
	if uses.Actions && c.ActionsURL != "" && c.ActionsSecret == "" {
		out = append(out, "ACTIONS_SECRET (ACTIONS_URL is set)")
	}
	return out
}

// devValues names the settings that hold a development value, however they
// got it (a default or set by hand).
func (c Config) devValues() []string {
	var out []string
	for _, s := range c.WebhookSecrets {
		if s == DevWebhookSecret {
			out = append(out, "STRIPE_WEBHOOK_SECRET")
			break
		}
	}
	for _, v := range []struct{ name, value, dev string }{
		{"STRIPE_API_KEY", c.StripeAPIKey, DevAPIKey},
		{"STRIPE_PLATFORM_ACCOUNT", c.PlatformAccount, DevPlatformAccount},
		{"DATABASE_URL", c.DatabaseURL, DevDatabaseURL},
		{"DYNAMODB_ENDPOINT", c.DynamoEndpoint, DevDynamoEndpoint},
		{"INTERNAL_API_TOKEN", c.InternalAPIToken, DevInternalAPIToken},
		{"ACTIONS_SECRET", c.ActionsSecret, DevActionsSecret},
	} {
		if v.value == v.dev {
			out = append(out, v.name)
		}
	}
	return out
}

// Validate reports every invalid setting at once; a missing required one is
// reported by LoadFor, which knows what the subcommand uses.
func (c Config) Validate() error {
	var errs []error
	if c.SESFromAddress != "" {
		if _, err := mail.ParseAddress(c.SESFromAddress); err != nil {
			errs = append(errs, fmt.Errorf("SES_FROM_ADDRESS: %w", err))
		}
	}
	if c.StripeAPIKey != "" && !strings.HasPrefix(c.StripeAPIKey, "sk_") && !strings.HasPrefix(c.StripeAPIKey, "rk_") {
		errs = append(errs, errors.New("STRIPE_API_KEY: must be a secret (sk_) or restricted (rk_) key"))
	}
	if c.PlatformAccount != "" && !stripeid.Valid(c.PlatformAccount, "acct_") {
		errs = append(errs, errors.New("STRIPE_PLATFORM_ACCOUNT: must be a Stripe account id (acct_ then letters, digits or _)"))
	}
	if !apiVersionPattern.MatchString(c.StripeAPIVersion) {
		errs = append(errs, errors.New("STRIPE_API_VERSION: a Stripe API version such as 2023-10-16 or 2025-09-30.clover"))
	}
	if c.EventTTL <= 0 {
		errs = append(errs, errors.New("EVENT_TTL: must be positive"))
	}
	if c.EventBridgeQueueURL != "" {
		if u, err := url.Parse(c.EventBridgeQueueURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, errors.New("EVENTBRIDGE_QUEUE_URL: must be an SQS queue URL (https://sqs.<region>.amazonaws.com/<account>/<queue>)"))
		}
	}
	if c.BillingTriggersQueueURL != "" {
		if u, err := url.Parse(c.BillingTriggersQueueURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, errors.New("BILLING_TRIGGERS_QUEUE_URL: must be an SQS queue URL (https://sqs.<region>.amazonaws.com/<account>/<queue>)"))
		}
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
		slog.Bool("development", c.Development),
		slog.String("listen_addr", c.ListenAddr),
		slog.Int("webhook_secrets", len(c.WebhookSecrets)),
		slog.String("stripe_api_key", Mask(c.StripeAPIKey)),
		slog.String("stripe_api_base", c.StripeAPIBase),
		slog.String("stripe_api_version", c.StripeAPIVersion),
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
		slog.String("reconcile_every", c.ReconcileEvery.String()),
		slog.String("reconcile_window", c.ReconcileWindow.String()),
		slog.String("eventbridge_queue_url", c.EventBridgeQueueURL),
		slog.String("billing_triggers_queue_url", c.BillingTriggersQueueURL),
		slog.String("sqs_endpoint", c.SQSEndpoint),
		slog.Any("billing", durationsReadable(c.Billing)),
		slog.Any("outbox", durationsReadable(c.Outbox)), slog.Any("retention", durationsReadable(c.Retention)),
		slog.Any("limits", durationsReadable(c.Limits)),
		slog.Any("admin", durationsReadable(c.Admin)),
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

// MaskURL hides the password of a connection string, in each place
// Postgres' driver takes one from: the URL's user info, its password
// parameter, or a keyword/value string (host=… password=…).
func MaskURL(raw string) string {
	_, masked := connPassword(raw)
	return masked
}

var (
	// queryPassword is a URL's password parameter.
	queryPassword = regexp.MustCompile(`([?&]password=)([^&#]*)`)
	// dsnPassword is the password of a keyword/value string: bare, or
	// single-quoted with backslash escapes (libpq's format, which pgx takes).
	dsnPassword = regexp.MustCompile(`((?:^|\s)password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s']\S*)`)
	dsnEscape   = regexp.MustCompile(`\\(.)`)
)

// connPassword returns the password raw carries (empty if none) and raw
// with it masked.
func connPassword(raw string) (password, masked string) {
	if !strings.Contains(raw, "://") {
		m := dsnPassword.FindStringSubmatch(raw)
		if m == nil {
			return "", raw
		}
		password = m[2]
		if strings.HasPrefix(password, "'") {
			password = dsnEscape.ReplaceAllString(password[1:len(password)-1], "$1")
		}
		return password, dsnPassword.ReplaceAllString(raw, "${1}****")
	}
	masked = raw
	if m := queryPassword.FindStringSubmatch(raw); m != nil {
		if password, _ = url.QueryUnescape(m[2]); password == "" {
			password = m[2]
		}
		masked = queryPassword.ReplaceAllString(raw, "${1}****")
	}
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			password = pw
		}
	}
	// Mask up to the last @ of the whole string: more than the user info
	// if a later part holds an @, never less.
	start := strings.Index(masked, "://") + 3
	at := strings.LastIndex(masked, "@")
	if at < start {
		return password, masked
	}
	user, _, ok := strings.Cut(masked[start:at], ":")
	if !ok {
		return password, masked
	}
	return password, masked[:start] + user + ":****" + masked[at:]
}
