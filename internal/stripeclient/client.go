// Package stripeclient builds the stripe-go API client from the service's
// configuration: API base URL (real Stripe, stripe-mock or an httptest fake),
// timeouts, retries, and logging through slog without secrets.
package stripeclient

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"
)

// Options of the client.
type Options struct {
	APIKey  string
	BaseURL string // STRIPE_API_BASE
	// HTTPClient defaults to one with a 30 s timeout.
	HTTPClient *http.Client
	// MaxNetworkRetries is stripe-go's retry count for connection errors,
	// 409 and 5xx (stripe-go reuses the idempotency key). Default 2.
	MaxNetworkRetries int64
	Log               *slog.Logger
	// QuietErrors logs stripe-go's errors at debug level, for callers that
	// handle and log every error themselves (the poller's 429 backoff).
	QuietErrors bool
}

// New returns a client for Stripe's API at opts.BaseURL.
func New(opts Options) *client.API {
	backend := NewBackend(opts)
	return client.New(opts.APIKey, &stripe.Backends{API: backend, Connect: backend, Uploads: backend})
}

// NewBackend returns the stripe-go backend behind New, for callers that make
// raw calls (the poller keeps each listed event's exact bytes).
func NewBackend(opts Options) stripe.Backend {
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	retries := opts.MaxNetworkRetries
	if retries == 0 {
		retries = 2
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	return stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(opts.BaseURL),
		HTTPClient:        hc,
		MaxNetworkRetries: stripe.Int64(retries),
		LeveledLogger:     leveledLogger{log: log.With("component", "stripe-go"), quiet: opts.QuietErrors},
	})
}

// leveledLogger routes stripe-go's logs to slog. stripe-go logs request
// paths and error messages, never the API key; at debug level it also logs
// every response body, which holds secrets (a PaymentIntent's
// client_secret) and buyers' personal data: those bodies are dropped.
type leveledLogger struct {
	log   *slog.Logger
	quiet bool // warnings and errors at debug level
}

func (l leveledLogger) Debugf(format string, v ...interface{}) {
	msg := fmt.Sprintf(format, v...)
	if strings.HasPrefix(msg, "Response: ") {
		msg = fmt.Sprintf("Response: %d bytes (body not logged)", len(msg)-len("Response: "))
	}
	l.log.Debug(msg)
}
func (l leveledLogger) Infof(format string, v ...interface{}) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l leveledLogger) Warnf(format string, v ...interface{}) {
	if l.quiet {
		l.log.Debug(fmt.Sprintf(format, v...))
		return
	}
	l.log.Warn(fmt.Sprintf(format, v...))
}
func (l leveledLogger) Errorf(format string, v ...interface{}) {
	if l.quiet {
		l.log.Debug(fmt.Sprintf(format, v...))
		return
	}
	l.log.Error(fmt.Sprintf(format, v...))
}
