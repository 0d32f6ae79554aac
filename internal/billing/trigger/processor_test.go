package trigger_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/trigger"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

var ctx = context.Background()

// counts is an Observer.
type counts struct {
	mu        sync.Mutex
	triggered map[string]int // kind/outcome
	refused   map[string]int
}

func (c *counts) Triggered(kind, outcome string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.triggered == nil {
		c.triggered = map[string]int{}
	}
	c.triggered[kind+"/"+outcome]++
}

func (c *counts) Refused(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refused == nil {
		c.refused = map[string]int{}
	}
	c.refused[reason]++
}

func (c *counts) Pending(int) {}

func (c *counts) snapshot() (map[string]int, map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, r := map[string]int{}, map[string]int{}
	for k, v := range c.triggered {
		t[k] = v
	}
	for k, v := range c.refused {
		r[k] = v
	}
	return t, r
}

// fixture is a billing core on DynamoDB Local with a fake Stripe that
// declines until approve, the triggers' store on Postgres, and an intake.
type fixture struct {
	e       *billingtest.Env
	store   *trigger.Store
	intake  *trigger.Intake
	obs     *counts
	approve atomic.Bool
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{e: billingtest.NewEnv(t, billingtest.Options{}), obs: &counts{}}
	f.e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior {
		if f.approve.Load() {
			return stripetest.Succeed
		}
		return stripetest.Decline
	}
	f.store = trigger.NewStore(testenv.Postgres(t))
	f.intake = &trigger.Intake{Store: f.store, Observer: f.obs}
	return f
}

// declined gives each account a subscription whose period of 2024-01-10
// the day's collection declined.
func (f *fixture) declined(t *testing.T, accounts ...string) []billing.Subscription {
	t.Helper()
	var subs []billing.Subscription
	for _, account := range accounts {
		sub, err := f.e.Service.CreateSubscription(ctx, account, billingtest.Input("gold", 10))
		require.NoError(t, err)
		subs = append(subs, sub)
	}
	f.e.Collect(t, "2024-01-10")
	for _, sub := range subs {
		require.Equal(t, billing.Error, f.e.Period(t, sub, "2024-01-10").Status)
	}
	return subs
}

// processor starts a processor until the test ends.
func (f *fixture) processor(t *testing.T, c trigger.Collector) *trigger.Processor {
	t.Helper()
	if c == nil {
		c = f.e.Service
	}
	p := trigger.NewProcessor(f.store, c, trigger.ProcessorConfig{Poll: 50 * time.Millisecond, LockedWait: 100 * time.Millisecond,
		Backoff: 100 * time.Millisecond, Observer: f.obs, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	f.intake.Nudge = p.Nudge
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(cctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return p
}

// done waits for trigger id to be collected.
func (f *fixture) done(t *testing.T, id string) trigger.Record {
	t.Helper()
	var rec trigger.Record
	require.Eventually(t, func() bool {
		var err error
		rec, err = f.store.Get(ctx, id)
		require.NoError(t, err)
		return rec.Status == trigger.StatusDone
	}, 30*time.Second, 20*time.Millisecond, "trigger %s collected", id)
	return rec
}

func income(account, ref string) trigger.Trigger {
	return trigger.Trigger{AccountID: account, Kind: trigger.KindIncome, OccurredAt: time.Date(2024, 1, 10, 14, 0, 0, 0, time.UTC), Reference: ref}
}

// Recorded first, collected after: a trigger recorded while no processor
// runs (a crash between the record and the collection) is collected by the
// next one; what it did is findable.
func TestRecordedTriggerIsCollectedLater(t *testing.T) {
	f := newFixture(t)
	sub := f.declined(t, "acc-later")[0]
	f.approve.Store(true)
	rec, dup, err := f.intake.Accept(ctx, income("acc-later", "inc-later-1"), trigger.SourceAPI, "")
	require.NoError(t, err)
	require.False(t, dup)
	assert.True(t, trigger.ValidID(rec.ID), rec.ID)
	assert.Equal(t, trigger.StatusPending, rec.Status)
	assert.Equal(t, billing.ProcWebhook, rec.Process)
	assert.Len(t, f.e.Stripe.PIs(), 1, "recorded only: nothing charged yet")

	f.processor(t, nil)
	got := f.done(t, rec.ID)
	assert.Equal(t, billing.TriggerCollected, got.Outcome)
	assert.Equal(t, 1, got.Attempts)
	assert.Equal(t, "2024-01-10", got.Today)
	require.Len(t, got.Periods, 1)
	assert.Equal(t, trigger.Period{SubscriptionID: sub.SubscriptionID, BillingDate: "2024-01-10", Amount: 1999, Currency: "usd",
		Outcome: billing.TriggeredPaid, AttemptNo: 2, PaymentIntent: f.e.Period(t, sub, "2024-01-10").TransactionID}, got.Periods[0])
	tr, _ := f.obs.snapshot()
	assert.Equal(t, map[string]int{"income/collected": 1}, tr)
}

// The same reference twice does nothing twice: one record, one
// collection; the second is counted as a duplicate. The same reference for
// another account is a conflict and records nothing.
func TestDuplicateReferenceDoesNothingTwice(t *testing.T) {
	f := newFixture(t)
	sub := f.declined(t, "acc-dup")[0]
	f.approve.Store(true)
	f.processor(t, nil)
	first, dup, err := f.intake.Accept(ctx, income("acc-dup", "inc-dup-1"), trigger.SourceQueue, "ev-1")
	require.NoError(t, err)
	require.False(t, dup)
	f.done(t, first.ID)
	for range 3 {
		again, dup, err := f.intake.Accept(ctx, income("acc-dup", "inc-dup-1"), trigger.SourceAPI, "")
		require.NoError(t, err)
		assert.True(t, dup)
		assert.Equal(t, first.ID, again.ID)
	}
	time.Sleep(300 * time.Millisecond) // a second collection would have started by now
	got, err := f.store.Get(ctx, first.ID)
	require.NoError(t, err)
	assert.Equal(t, 3, got.Duplicates)
	assert.Equal(t, billing.TriggerCollected, got.Outcome)
	assert.Len(t, f.e.Stripe.PIs(), 2, "the day's decline and one triggered charge")
	assert.Len(t, f.e.Stripe.Successful()[stripetest.PeriodKey("acc-dup", sub.SubscriptionID, "2024-01-10")], 1)

	_, _, err = f.intake.Accept(ctx, income("acc-other", "inc-dup-1"), trigger.SourceAPI, "")
	assert.ErrorIs(t, err, trigger.ErrReferenceConflict)
	bal := income("acc-dup", "inc-dup-1")
	bal.Kind = trigger.KindBalance
	_, _, err = f.intake.Accept(ctx, bal, trigger.SourceAPI, "")
	assert.ErrorIs(t, err, trigger.ErrReferenceConflict)
	list, err := f.store.ForAccount(ctx, "acc-other", 10)
	require.NoError(t, err)
	assert.Empty(t, list)
	tr, _ := f.obs.snapshot()
	assert.Equal(t, map[string]int{"income/collected": 1, "income/duplicate": 3}, tr)
}

// busy is a collector whose account is locked for the first n calls.
type busy struct {
	inner trigger.Collector
	left  atomic.Int32
}

func (b *busy) CollectTriggered(ctx context.Context, account string, proc billing.Process) (billing.TriggerResult, error) {
	if b.left.Add(-1) >= 0 {
		return billing.TriggerResult{}, billing.ErrLocked
	}
	return b.inner.CollectTriggered(ctx, account, proc)
}

// A trigger whose account is locked (a collection run) waits and is
// collected once the lock is free; an unknown account is recorded as
// ignored.
func TestLockedAccountIsTriedAgainAndUnknownAccountIsIgnored(t *testing.T) {
	f := newFixture(t)
	f.declined(t, "acc-busy")
	f.approve.Store(true)
	b := &busy{inner: f.e.Service}
	b.left.Store(3)
	f.processor(t, b)
	rec, _, err := f.intake.Accept(ctx, income("acc-busy", "inc-busy"), trigger.SourceAPI, "")
	require.NoError(t, err)
	got := f.done(t, rec.ID)
	assert.Equal(t, billing.TriggerCollected, got.Outcome)
	assert.Equal(t, 4, got.Tries)

	rec, _, err = f.intake.Accept(ctx, income("acc-nobody", "inc-nobody"), trigger.SourceAPI, "")
	require.NoError(t, err)
	got = f.done(t, rec.ID)
	assert.Equal(t, billing.TriggerUnknownAccount, got.Outcome)
	assert.Empty(t, got.Periods)
	assert.Zero(t, got.Attempts)
}

func cancelable() (context.Context, context.CancelFunc) { return context.WithCancel(ctx) }
