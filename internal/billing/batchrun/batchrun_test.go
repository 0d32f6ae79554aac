package batchrun_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/batchrun"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

var accounts = []string{"bat-a", "bat-b", "bat-c"}

// failed is a billing env whose three subscriptions' periods of 2024-01-10
// were declined by the day's collection; Stripe approves every charge after.
func failed(t *testing.T, crash func(step string, p billing.Period) error) (*billingtest.Env, map[string]string) {
	t.Helper()
	decline := true
	var mu sync.Mutex
	e := billingtest.NewEnv(t, billingtest.Options{Lease: time.Second, Heartbeat: 250 * time.Millisecond, Crash: crash})
	e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior {
		mu.Lock()
		defer mu.Unlock()
		if decline {
			return stripetest.Decline
		}
		return stripetest.Succeed
	}
	subs := map[string]string{}
	for _, acc := range accounts {
		sub, err := e.Service.CreateSubscription(context.Background(), acc, billingtest.Input("gold", 10))
		require.NoError(t, err)
		subs[acc] = sub.SubscriptionID
	}
	e.Clock.SetDate(dates.MustParse("2024-01-10"))
	// Rerun until the run leaves nothing behind (a loaded machine can leave
	// an account to its lock's lease), as the next run would.
	require.Eventually(t, func() bool {
		rep, err := e.Service.Collect(context.Background(), dates.MustParse("2024-01-10"))
		return err == nil && rep.OK()
	}, 30*time.Second, 100*time.Millisecond)
	for _, acc := range accounts {
		p, err := e.Store.GetPeriod(context.Background(), acc, subs[acc], dates.MustParse("2024-01-10"))
		require.NoError(t, err)
		require.Equal(t, billing.Error, p.Status, acc)
	}
	mu.Lock()
	decline = false
	mu.Unlock()
	return e, subs
}

// beginThenDie is a process that dies after recording the attempt it is
// about to make and before claiming it.
type beginThenDie struct {
	inner  batchrun.Charger
	on     string
	cancel context.CancelFunc
}

func (b *beginThenDie) BatchCharge(ctx context.Context, account, subID string, want dates.Date, prev *billing.BatchAttempt,
	begin func(billing.BatchAttempt) error) (billing.BatchResult, error) {
	if account != b.on {
		return b.inner.BatchCharge(ctx, account, subID, want, prev, begin)
	}
	return b.inner.BatchCharge(ctx, account, subID, want, prev, func(a billing.BatchAttempt) error {
		if err := begin(a); err != nil {
			return err
		}
		b.cancel()
		return context.Canceled
	})
}

// TestBatchResumesAfterACrashAtEveryStep (docs/design.md §8 "Batch collection":
// exactly as pay now, the same claim and idempotency key rules; resumable
// after a restart, since a batch charges money): the process running a batch of three dies
// while charging the second item — after recording the attempt it is about
// to make, after the claim, after Stripe charged, after the outcome was
// committed — and a new runner finishes the batch: each period charged
// exactly once, no PaymentIntent more than one per period, every item paid.
func TestBatchResumesAfterACrashAtEveryStep(t *testing.T) {
	for _, step := range []string{"begun", "claimed", "charged", "committed"} {
		t.Run(step, func(t *testing.T) {
			ctx := context.Background()
			runCtx, cancel := context.WithCancel(ctx)
			var (
				mu    sync.Mutex
				armed bool
			)
			crash := func(s string, p billing.Period) error {
				mu.Lock()
				defer mu.Unlock()
				if armed && s == step && p.AccountID == "bat-b" {
					armed = false
					cancel()
					return billing.ErrCrash
				}
				return nil
			}
			e, subs := failed(t, crash)
			declines := len(e.Stripe.PIs())
			store := batchrun.NewStore(testenv.Postgres(t), e.Service)
			b, err := store.Start(ctx, billing.BatchSelection{AccountIDs: accounts}, "test")
			require.NoError(t, err)
			require.Equal(t, 3, b.Matched)

			var charger batchrun.Charger = e.Service
			if step == "begun" {
				charger = &beginThenDie{inner: e.Service, on: "bat-b", cancel: cancel}
			}
			mu.Lock()
			armed = step != "begun"
			mu.Unlock()
			first := batchrun.NewRunner(store, charger, batchrun.RunnerConfig{Lease: 200 * time.Millisecond})
			_, err = first.RunOnce(runCtx)
			require.ErrorIs(t, err, context.Canceled)
			mid, err := store.Get(ctx, b.ID)
			require.NoError(t, err)
			assert.Equal(t, 1, mid.Done, "the item at the crash has no outcome")

			// A new process: the first one's lease and its account lock run out.
			second := batchrun.NewRunner(store, e.Service, batchrun.RunnerConfig{Lease: time.Second, BusyTries: 100, BusyWait: 50 * time.Millisecond})
			require.Eventually(t, func() bool {
				worked, err := second.RunOnce(ctx)
				require.NoError(t, err)
				return worked
			}, 5*time.Second, 50*time.Millisecond)
			done, err := store.Get(ctx, b.ID)
			require.NoError(t, err)
			assert.Equal(t, batchrun.StatusDone, done.Status)
			assert.Equal(t, 3, done.Paid, "%+v", done.Items)
			for _, acc := range accounts {
				k := stripetest.PeriodKey(acc, subs[acc], "2024-01-10")
				assert.Len(t, e.Stripe.Successful()[k], 1, "%s: one successful charge", acc)
				p, err := e.Store.GetPeriod(ctx, acc, subs[acc], dates.MustParse("2024-01-10"))
				require.NoError(t, err)
				assert.Equal(t, billing.Completed, p.Status, acc)
				assert.Equal(t, billing.ProcBatch, p.Process, acc)
				assert.Empty(t, p.InFlightKey, acc)
			}
			assert.Len(t, e.Stripe.PIs(), declines+3, "one PaymentIntent per item: the resumed one reused its key")
		})
	}
}

// A collection run holding the account's lock through every try: the item
// is reported skipped_locked and nothing is charged; the other items go on.
func TestBatchReportsALockedAccount(t *testing.T) {
	ctx := context.Background()
	e, subs := failed(t, nil)
	declines := len(e.Stripe.PIs())
	store := batchrun.NewStore(testenv.Postgres(t), e.Service)
	b, err := store.Start(ctx, billing.BatchSelection{AccountIDs: accounts}, "test")
	require.NoError(t, err)
	l, err := e.Lock.Acquire(ctx, billing.LockKey("bat-b"), true)
	require.NoError(t, err)
	defer func() { _ = l.Release(ctx) }()
	r := batchrun.NewRunner(store, e.Service, batchrun.RunnerConfig{BusyTries: 3, BusyWait: 20 * time.Millisecond})
	worked, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, worked)
	done, err := store.Get(ctx, b.ID)
	require.NoError(t, err)
	assert.Equal(t, batchrun.StatusDone, done.Status)
	got := map[string]string{}
	for _, it := range done.Items {
		got[it.AccountID] = it.Outcome
	}
	assert.Equal(t, map[string]string{"bat-a": billing.BatchPaid, "bat-b": batchrun.OutcomeSkippedLocked, "bat-c": billing.BatchPaid}, got)
	assert.Equal(t, 2, done.Paid)
	assert.Equal(t, 1, done.Skipped)
	assert.Empty(t, e.Stripe.Successful()[stripetest.PeriodKey("bat-b", subs["bat-b"], "2024-01-10")])
	assert.Len(t, e.Stripe.PIs(), declines+2)
}
