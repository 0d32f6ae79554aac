package stripebudget_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/metrics"
	"github.com/stripe-payments/stripe-payments/internal/postgres"
	"github.com/stripe-payments/stripe-payments/internal/safego"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// scriptedStore answers the n-th lease (from 1) as script says: "panic",
// "fail" (an error, the store unreachable) or, past the script, the real
// store's answer.
type scriptedStore struct {
	stripebudget.Store
	mu     sync.Mutex
	calls  int
	script []string
}

func (s *scriptedStore) Lease(ctx context.Context, req stripebudget.LeaseRequest) (stripebudget.Lease, error) {
	s.mu.Lock()
	s.calls++
	step := ""
	if s.calls <= len(s.script) {
		step = s.script[s.calls-1]
	}
	s.mu.Unlock()
	switch step {
	case "panic":
		panic("injected panic in a lease")
	case "fail":
		return stripebudget.Lease{}, errors.New("injected: store unreachable")
	}
	return s.Store.Lease(ctx, req)
}

func (s *scriptedStore) leases() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// TestAPanicInTheBudgetIsRecovered: a panic in the budget's background work
// must not end the process (every Stripe request of the replica draws on the
// budget), is logged with its stack and counted, and the work goes on: the
// leaser serves the waiting request and later ones (it is not left marked
// running with no goroutine behind it, which would stop every request for
// good); the probe tries again and ends the fallback.
func TestAPanicInTheBudgetIsRecovered(t *testing.T) {
	t.Parallel()
	dbURL := testenv.DatabaseURL(t)
	tests := []struct {
		name      string
		script    []string
		goroutine string
	}{
		{"the leaser", []string{"panic"}, "stripe_budget_leaser"},
		{"the probe", []string{"fail", "panic"}, "stripe_budget_probe"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, err := postgres.Connect(context.Background(), dbURL)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			var logs testenv.Logs
			log := slog.New(slog.NewJSONHandler(&logs, nil))
			reg := prometheus.NewRegistry()
			store := &scriptedStore{Store: stripebudget.PGStore{Pool: pool, Name: "panic-" + tc.goroutine}, script: tc.script}
			b, err := stripebudget.New(store, stripebudget.Config{Rate: 50, Probe: 20 * time.Millisecond, Log: log,
				Safe: safego.New(log, metrics.NewPanics(reg), 10*time.Millisecond)})
			require.NoError(t, err)

			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			// Requests keep coming until the scripted leases are spent and
			// the shared budget serves again (the probe's case: the
			// fallback ended).
			for store.leases() <= len(tc.script) || b.Fallback() {
				require.NoError(t, b.Wait(ctx, stripebudget.Charges), "a request after the panic is served")
			}
			require.NoError(t, b.Wait(ctx, stripebudget.Charges))
			assert.False(t, b.Fallback(), "the shared budget serves again")
			assert.Equal(t, 1.0, testenv.PanicCount(t, reg, tc.goroutine))
			assert.Contains(t, logs.String(), "injected panic in a lease")
			assert.Contains(t, logs.String(), `"goroutine":"`+tc.goroutine+`"`)

			// Nobody waits: the leaser stops and says so, and a later
			// request starts it again.
			eventually(t, "the leaser to stop", func() bool { return !b.Running() })
			require.NoError(t, b.Wait(ctx, stripebudget.Hydration))
		})
	}
}

// eventually waits for cond, polling; the deadline only bounds a broken run.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
