package billing_test

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/stripecharge"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/lock"
	"github.com/stripe-payments/stripe-payments/internal/postgres"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/stripeclient"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// budgetReplica is one replica of the billing core on e's stack whose
// Stripe requests draw on the shared budget (a pool of its own on dbURL),
// as internal/app wires it.
type budgetReplica struct {
	svc     *billing.Service
	charger *stripecharge.Charger
	budget  *stripebudget.Shared
	client  *http.Client // the hydration-class client of the same budget
}

func newBudgetReplica(tb testing.TB, e *billingtest.Env, dbURL, row string, cfg billing.Config, bc stripebudget.Config, log *slog.Logger) budgetReplica {
	tb.Helper()
	pool, err := postgres.Connect(context.Background(), dbURL)
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	if bc.Log == nil {
		bc.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	budget, err := stripebudget.New(stripebudget.PGStore{Pool: pool, Name: row}, bc)
	require.NoError(tb, err)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	base := &http.Client{Timeout: 30 * time.Second, Transport: tr}
	api := stripeclient.New(stripeclient.Options{APIKey: "sk_test_fake_billing", BaseURL: e.Stripe.URL, Log: log,
		MaxNetworkRetries: 1, HTTPClient: budget.Client(base, stripebudget.Charges)})
	charger := stripecharge.New(api, stripecharge.Options{Rate: math.Inf(1)})
	locks := lock.New(e.DB, e.Locks, lock.Options{Lease: 60 * time.Second, Heartbeat: time.Second, Log: log})
	svc, err := billing.New(cfg, billing.Deps{Store: e.Store, Locks: locks, Charger: charger,
		Notifier: e.Notifier, Now: e.Clock.Now, Log: log})
	require.NoError(tb, err)
	return budgetReplica{svc: svc, charger: charger, budget: budget, client: budget.Client(base, stripebudget.Hydration)}
}

// replays counts the budget's Idempotent-Replayed answers.
type replays struct {
	mu sync.Mutex
	n  int
}

func (r *replays) Granted(stripebudget.Class, time.Duration) {}
func (r *replays) RateLimited(stripebudget.Class)            {}
func (r *replays) StoreError()                               {}
func (r *replays) Fallback(bool)                             {}
func (r *replays) Late(stripebudget.Class)                   {}
func (r *replays) Replayed(stripebudget.Class)               { r.mu.Lock(); r.n++; r.mu.Unlock() }

// TestIdempotentReplayIsTheSameAttempt: Stripe charged but its answer was
// lost; the rerun sends the attempt's key again and Stripe answers with the
// same PaymentIntent and Idempotent-Replayed: true. The service takes it as
// the attempt it knows: one PaymentIntent, one completed period, one
// payment_completed action; the replay is logged and counted.
func TestIdempotentReplayIsTheSameAttempt(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	lost := true
	e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior {
		if lost {
			lost = false
			return stripetest.Lost
		}
		return stripetest.Succeed
	}
	logs := &testenv.Logs{}
	obs := &replays{}
	r := newBudgetReplica(t, e, testenv.DatabaseURL(t), "stripe", billingtest.TestConfig(),
		stripebudget.Config{Rate: 100, Observer: obs, Log: slog.New(slog.NewTextHandler(logs, nil))}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	date := d("2024-01-10")
	e.Clock.SetDate(date)
	rep, err := r.svc.Collect(ctx, date)
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Unknown, "the answer was lost")
	rep, err = r.svc.Collect(ctx, date)
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Succeeded)

	require.Len(t, e.Stripe.PIs(), 1, "one PaymentIntent")
	assert.Equal(t, billing.Completed, period(t, e, sub, "2024-01-10").Status)
	completed := 0
	for _, a := range e.Notifier.Actions() {
		if a.Type == billing.ActionPaymentCompleted {
			completed++
		}
	}
	assert.Equal(t, 1, completed, "one receipt")
	obs.mu.Lock()
	assert.Equal(t, 1, obs.n, "the replay was not counted")
	obs.mu.Unlock()
	assert.Contains(t, logs.String(), "stripe replayed an idempotent request")
	sent := 0
	for _, req := range e.Stripe.Requests() {
		if req.Method == http.MethodPost && req.Path == "/v1/payment_intents" {
			sent++
		}
	}
	assert.GreaterOrEqual(t, sent, 2, "the key was sent again")
}
