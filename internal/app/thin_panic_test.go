package app_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/metrics"
	"github.com/stripe-payments/stripe-payments/internal/safego"
	"github.com/stripe-payments/stripe-payments/internal/stripebudget"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/thin"
)

// panickingStore is the events store with a fault: settling the record of
// a poisoned event panics (any bug in one job's hydration).
type panickingStore struct {
	thin.Store
	poisoned sync.Map
}

func (s *panickingStore) ThinDone(ctx context.Context, id string, h events.ThinHydrated, at time.Time) error {
	if _, ok := s.poisoned.Load(id); ok {
		panic("injected fault settling " + id)
	}
	return s.Store.ThinDone(ctx, id, h, at)
}

// lockedBuffer is a log sink the hydrator's goroutines may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAPanickingHydrationIsRecoveredAndRetried: one job's hydration panics.
// The panic is logged with its stack and counted
// (stripe_payments_panics_total{goroutine="thin_hydration"}); the process and
// the hydrator's loop go on (a notification received after it is
// hydrated), and the job is not lost: it is retried with its last_error,
// and hydrated once the fault is gone.
func TestAPanickingHydrationIsRecoveredAndRetried(t *testing.T) {
	fake := stripetest.New(t, stripetest.Options{})
	a := apptest.New(t, apptest.Options{Stripe: fake}) // no serve: the hydrator below is the only one
	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	reg := prometheus.NewRegistry()
	panics := metrics.NewPanics(reg)
	store := &panickingStore{Store: a.Events}
	h := thin.NewHydrator(thin.HydratorConfig{Idle: 50 * time.Millisecond, RetryBase: 200 * time.Millisecond, Log: log,
		Safe: safego.New(log, panics, time.Second)},
		a.Thin.Queue, a.ThinRecords, store, thin.StripeAPI{BaseURL: fake.URL, Key: "sk_test_fake_thin"},
		stripebudget.NewLocal(100), // the fleet's budget needs serve's loops
		a.Handler, a.Thin.Registry)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	deliver := func(acct string) string {
		t.Helper()
		id := stripetest.NewThinID()
		body := stripetest.Thin{Fixture: "v2.core.account.created", ID: id, RelatedID: acct}.Build(t)
		fake.AddV2(body, "")
		res, err := a.Ingest.Ingest(ctx, body, stripeevent.SourceWebhook)
		require.NoError(t, err)
		require.Equal(t, stripeevent.Received, res.Outcome)
		return id
	}
	// record is the event's record (zero, with the error logged, when it
	// cannot be read: it is called inside Eventually).
	record := func(id string) events.Record {
		rec, err := a.Events.Get(ctx, id)
		if err != nil {
			t.Logf("read %s: %v", id, err)
		}
		return rec
	}

	poisoned := stripetest.NewThinID()
	store.poisoned.Store(poisoned, true)
	body := stripetest.Thin{Fixture: "v2.core.account.created", ID: poisoned, RelatedID: "acct_1PanicQ9RKHgCVdKaa"}.Build(t)
	fake.AddV2(body, "")
	res, err := a.Ingest.Ingest(ctx, body, stripeevent.SourceWebhook)
	require.NoError(t, err)
	require.Equal(t, stripeevent.Received, res.Outcome)
	require.Eventually(t, func() bool {
		return panicCount(t, reg, thin.PanicName) >= 1
	}, 20*time.Second, 20*time.Millisecond, "the panic is counted")
	assert.Contains(t, logs.String(), "injected fault settling "+poisoned)
	assert.Contains(t, logs.String(), "goroutine="+thin.PanicName)
	assert.Contains(t, logs.String(), "runtime/debug.Stack", "logged with its stack")

	// The loop goes on.
	next := deliver("acct_1AfterQ9RKHgCVdKaa")
	require.Eventually(t, func() bool { return record(next).Status == events.StatusProcessed }, 20*time.Second,
		20*time.Millisecond, "a notification after the panic is hydrated")

	// The panicking job is retried, with the panic as its last error.
	require.Eventually(t, func() bool {
		return panicCount(t, reg, thin.PanicName) >= 2
	}, 20*time.Second, 20*time.Millisecond, "retried")
	rec := record(poisoned)
	assert.Equal(t, events.StatusReceived, rec.Status)
	assert.Contains(t, rec.LastError, "panicked")
	store.poisoned.Delete(poisoned)
	require.Eventually(t, func() bool { return record(poisoned).Status == events.StatusProcessed }, 30*time.Second,
		50*time.Millisecond, "hydrated once the fault is gone")
}

// panicCount reads stripe_payments_panics_total{goroutine=name} from reg.
func panicCount(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "stripe_payments_panics_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "goroutine" && l.GetValue() == name {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no stripe_payments_panics_total{goroutine=%q}", name)
	return 0
}
