// Package apptest starts the real program for end-to-end tests: app.New on
// fresh namespaces of the local stack (a Postgres database, DynamoDB tables
// of its own), migrated, listening on random loopback ports (public and
// admin), with every worker `serve` runs (app.Start), a fake Stripe at the
// HTTP level behind STRIPE_API_BASE, and everything stopped and dropped in
// t.Cleanup. A test
// changes the program only the way an operator would, through the
// environment, plus the options of app.New.
package apptest

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/app"
	"github.com/stripe-payments/stripe-payments/internal/config"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// Defaults of the environment (Options.Env overrides them).
const (
	Secret = "whsec_fake_apptest_not_a_secret"
	Token  = "test-internal-token"
	APIKey = "sk_test_fake_apptest"
)

// Options of New and Start; the zero value is a development-mode program.
type Options struct {
	// Env overrides the test environment, variable by variable (see Env).
	Env map[string]string
	// Logs receives the program's JSON logs (default: discarded).
	Logs io.Writer
	// Stripe is the fake Stripe behind STRIPE_API_BASE (default: a fresh
	// one accepting any test key). Env's STRIPE_API_BASE wins over it.
	Stripe *stripetest.Stripe
	// App are the options of app.New.
	App []app.Option
}

// App is the real program of one test.
type App struct {
	*app.App
	// URL is the public listener's base URL (the webhook, /healthz) and
	// AdminURL the admin listener's (the console, the APIs, /metrics,
	// /readyz), after Start.
	URL      string
	AdminURL string
	// Fake is the fake Stripe behind STRIPE_API_BASE.
	Fake *stripetest.Stripe
	// Env is the environment the program was configured from.
	Env map[string]string
}

// Env is the environment of a test program: development mode on random
// loopback ports (both listeners), this test's Postgres database and
// DynamoDB table names, the package's secret, token and key, then
// overrides.
func Env(t testing.TB, overrides map[string]string) map[string]string {
	t.Helper()
	env := map[string]string{
		"APP_ENV":               "development",
		"LISTEN_ADDR":           "127.0.0.1:0",
		"ADMIN_LISTEN_ADDR":     "127.0.0.1:0",
		"STRIPE_WEBHOOK_SECRET": Secret,
		"STRIPE_API_KEY":        APIKey,
		"DATABASE_URL":          testenv.DatabaseURL(t),
		"DYNAMODB_ENDPOINT":     testenv.DynamoEndpoint(t),
		"EVENTS_TABLE":          testenv.TableName("events"),
		"BILLING_TABLE":         testenv.TableName("billing"),
		"BILLING_HISTORY_TABLE": testenv.TableName("billing-history"),
		"LOCKS_TABLE":           testenv.TableName("locks"),
		"INTERNAL_API_TOKEN":    Token,
	}
	for k, v := range overrides {
		env[k] = v
	}
	return env
}

// New builds and migrates the program without listening; its tables are
// deleted and its clients closed when the test ends.
func New(t testing.TB, o Options) *App {
	t.Helper()
	a := &App{Fake: o.Stripe}
	if a.Fake == nil {
		a.Fake = stripetest.New(t, stripetest.Options{})
	}
	a.Env = Env(t, map[string]string{"STRIPE_API_BASE": a.Fake.URL})
	for k, v := range o.Env {
		a.Env[k] = v
	}
	cfg, err := config.Load(func(k string) (string, bool) { v, ok := a.Env[k]; return v, ok })
	require.NoError(t, err, "test configuration")
	logs := o.Logs
	if logs == nil {
		logs = io.Discard
	}
	ctx := context.Background()
	a.App, err = app.New(ctx, cfg, slog.New(slog.NewJSONHandler(logs, nil)), o.App...)
	require.NoError(t, err, "app.New")
	t.Cleanup(a.Close) // after Shutdown, if started; closing twice is harmless
	require.NoError(t, a.Migrate(ctx), "migrate")
	t.Cleanup(func() {
		for _, spec := range a.TableSpecs() {
			_, _ = a.Dynamo.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(spec.Name)})
		}
	})
	return a
}

// Start is New, then the program listens and runs every worker of serve
// (app.Start) until the test ends, when it is shut down gracefully (10 s).
func Start(t testing.TB, o Options) *App {
	t.Helper()
	a := New(t, o)
	a.Listen(t)
	return a
}

// Listen starts a program built by New (app.Start) and stops it when the
// test ends.
func (a *App) Listen(t testing.TB) {
	t.Helper()
	require.NoError(t, a.Start(context.Background()), "start")
	a.URL, a.AdminURL = a.Server.URL(), a.Admin.URL()
	t.Cleanup(func() { require.NoError(t, a.Shutdown(10*time.Second), "shutdown") })
}

// Secret is the webhook secret events are signed with: the last of
// STRIPE_WEBHOOK_SECRET's (the newest during a rotation).
func (a *App) Secret() string {
	s := strings.Split(a.Env["STRIPE_WEBHOOK_SECRET"], ",")
	return strings.TrimSpace(s[len(s)-1])
}

// Sign returns the Stripe-Signature of payload, signed now with Secret.
func (a *App) Sign(payload []byte) string {
	return stripetest.Sign(payload, a.Secret(), time.Now())
}

// Deliver posts payload to the webhook, signed, and returns the answer's
// status and body.
func (a *App) Deliver(t testing.TB, payload []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, a.URL+"/webhooks/stripe", bytes.NewReader(payload))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", a.Sign(payload))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, body
}
