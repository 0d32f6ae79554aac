package poller_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/handler"
	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
	"github.com/stripe-payments/stripe-payments/poller"
	"github.com/stripe-payments/stripe-payments/webhook"
)

const (
	platform = "acct_1PlatformTest0000"
	acctA    = "acct_1ConnectedAAAAAA"
	acctB    = "acct_1ConnectedBBBBBB"
	secret   = "whsec_fake_poller_test_secret"
)

// Replay modes: through the real webhook server, or in-process.
const (
	modeTarget    = "target"
	modeInProcess = "in-process"
)

// env is one test's world: a fake Stripe Events API, and the real service
// (webhook server, DynamoDB events table, Postgres database) on fresh
// namespaces of the local stack.
type env struct {
	t   testing.TB
	api *stripetest.Stripe
	app *apptest.App
	// handler is an in-process handler on the same stores, with an applier
	// that writes one effects row per application and can be told to fail.
	handler *handler.Handler
	logs    *testenv.Logs

	vars map[string]string
	// observer, when set, is the pollers' Observer.
	observer poller.Observer

	mu   sync.Mutex
	now  time.Time
	fail map[string]bool
}

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{t: t, api: stripetest.New(t, stripetest.Options{Key: "sk_test_poller_fake"}), logs: &testenv.Logs{}, now: time.Now().UTC().Truncate(time.Second), fail: map[string]bool{}}
	// apptest's environment (this test's database and tables), with the
	// poller tests' Stripe, secret and platform account.
	vars := apptest.Env(t, map[string]string{
		"STRIPE_WEBHOOK_SECRET":   secret,
		"STRIPE_API_KEY":          e.api.Key,
		"STRIPE_API_BASE":         e.api.URL,
		"STRIPE_PLATFORM_ACCOUNT": platform,
		"INTERNAL_API_TOKEN":      "disabled",
	})
	e.vars = vars
	e.app = e.startApp(t, vars)
	_, err := e.app.Pool.Exec(context.Background(), `CREATE TABLE effects (event_id text NOT NULL)`)
	require.NoError(t, err)
	effect := func(ctx context.Context, tx handler.Tx, ev *stripe.Event) error {
		e.mu.Lock()
		fail := e.fail[ev.ID]
		e.mu.Unlock()
		if fail {
			return errors.New("injected failure")
		}
		_, err := tx.Exec(ctx, `INSERT INTO effects (event_id) VALUES ($1)`, ev.ID)
		return err
	}
	var routes handler.Routes
	for _, typ := range []string{"payment_intent.succeeded", "invoice.paid", "customer.subscription.created", "charge.refunded", "customer.created"} {
		routes = routes.With(typ, effect)
	}
	e.handler = handler.New(handler.Config{PlatformAccount: platform, EventTTL: 720 * time.Hour},
		e.app.Events, ledger.New(e.app.Pool), slog.New(slog.NewJSONHandler(e.logs, nil)), handler.WithRoutes(routes))
	return e
}

// appVars is a copy of the environment the env's program runs with.
func (e *env) appVars() map[string]string {
	return maps.Clone(e.vars)
}

// startApp runs the real program (internal/apptest) with vars as its
// environment and the env's fake Stripe.
func (e *env) startApp(t testing.TB, vars map[string]string) *apptest.App {
	t.Helper()
	return apptest.Start(t, apptest.Options{Env: vars, Logs: e.logs, Stripe: e.api})
}

// buildApp is startApp without listening.
func (e *env) buildApp(t testing.TB, vars map[string]string) *apptest.App {
	t.Helper()
	return apptest.New(t, apptest.Options{Env: vars, Logs: e.logs, Stripe: e.api})
}

func (e *env) clock() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

func (e *env) setNow(t time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.now = t.UTC()
}

func (e *env) failOn(id string, fail bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fail[id] = fail
}

// poller builds a poller on the env's stores; mode picks the replayer.
func (e *env) poller(mode string, cfg poller.Config) *poller.Poller {
	return e.pollerWith(mode, cfg, poller.APIConfig{})
}

func (e *env) pollerWith(mode string, cfg poller.Config, api poller.APIConfig) *poller.Poller {
	e.t.Helper()
	cfg.PlatformAccount = platform
	if cfg.RetryBackoff == 0 {
		cfg.RetryBackoff = time.Millisecond
	}
	api.Key, api.BaseURL = e.api.Key, e.api.URL
	if api.Rate == 0 {
		api.Rate = -1
	}
	if api.MinBackoff == 0 {
		api.MinBackoff, api.MaxBackoff = 2*time.Millisecond, 20*time.Millisecond
	}
	log := slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var replayer poller.Replayer
	switch mode {
	case modeTarget:
		replayer = poller.NewWebhookReplayer(e.app.Server.URL()+webhook.Path, secret, nil)
	case modeInProcess:
		replayer = poller.NewHandlerReplayer(e.handler)
	default:
		e.t.Fatalf("unknown mode %q", mode)
	}
	checkpoints := ledger.NewCheckpoints(e.app.Pool)
	p, err := poller.New(cfg, poller.Deps{
		API:         poller.NewEventsAPI(api, log),
		Store:       e.app.Events,
		Checkpoints: checkpoints,
		Locker:      checkpoints,
		Accounts:    ledger.NewAccounts(e.app.Pool),
		Replayer:    replayer,
		Observer:    e.observer,
		Log:         log,
		Now:         e.clock,
	})
	require.NoError(e.t, err)
	return p
}

// event builds a real-shaped event of account created at created.
func (e *env) event(fixture, account string, created time.Time) (string, []byte) {
	acct := stripetest.Ptr(account)
	if account == platform {
		acct = stripetest.Ptr("") // platform events carry no account
	}
	id := stripetest.NewID()
	return id, stripetest.Event{Fixture: fixture, ID: id, Account: acct, Created: created}.Build(e.t)
}

// list makes the event listable by the fake API under its account.
func (e *env) list(account string, payload []byte) {
	if account == platform {
		account = ""
	}
	e.api.Add(account, payload)
}

// deliver has the webhook deliver the event: recorded and processed.
func (e *env) deliver(payload []byte) {
	e.t.Helper()
	ev, err := stripeevent.Parse(payload)
	require.NoError(e.t, err)
	outcome, err := e.handler.Handle(context.Background(), ev, payload, stripeevent.SourceWebhook)
	require.NoError(e.t, err)
	require.Equal(e.t, stripeevent.Applied, outcome)
}

// recordOnly records the event as a delivery that never got processed
// (crash after the record), optionally marked failed.
func (e *env) recordOnly(payload []byte, failed bool) {
	e.t.Helper()
	ev, err := stripeevent.Parse(payload)
	require.NoError(e.t, err)
	ctx := context.Background()
	rec := events.NewRecord(ev, payload, platform, 720*time.Hour, stripeevent.SourceWebhook, time.Now())
	if failed {
		require.NoError(e.t, e.app.Events.RecordFailure(ctx, rec, errors.New("postgres went away")))
		return
	}
	// "received": what earlier versions left after a crash between the
	// record and the processing.
	require.NoError(e.t, e.app.Events.Put(ctx, rec))
}

func (e *env) record(id string) (events.Record, bool) {
	e.t.Helper()
	r, err := e.app.Events.Get(context.Background(), id)
	if errors.Is(err, apperr.ErrNotFound) {
		return events.Record{}, false
	}
	require.NoError(e.t, err)
	return r, true
}

func (e *env) count(query string, args ...any) int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.app.Pool.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

func (e *env) effects(id string) int {
	return e.count(`SELECT count(*) FROM effects WHERE event_id = $1`, id)
}

func (e *env) ledger(id string) int {
	return e.count(`SELECT count(*) FROM processed_events WHERE event_id = $1`, id)
}

func (e *env) checkpoint(account string) (time.Time, bool) {
	e.t.Helper()
	at, ok, err := ledger.NewCheckpoints(e.app.Pool).Load(context.Background(), account)
	require.NoError(e.t, err)
	return at, ok
}

func idOf(payload []byte) string {
	var ev struct{ ID string }
	_ = json.Unmarshal(payload, &ev)
	return ev.ID
}
