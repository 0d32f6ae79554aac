package testclock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/testclock"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
)

// The bounds of limits.go (test clocks share real billing's tables and
// Stripe rate limit), against DynamoDB Local and the httptest Stripe.

// TestTestClocksAreBounded: at most MaxClocks clocks exist (TEST_CLOCKS_MAX;
// deleting one makes room), and a clock's time stays below the year-2100
// ceiling at an advance as at its creation, however small the step.
func TestTestClocksAreBounded(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{Clocks: testclock.Config{MaxClocks: 3}})
	var ids []string
	for range 3 {
		c, err := e.Clocks.CreateClock(ctx, utc("2027-01-01T00:00:00Z"), "bounded")
		require.NoError(t, err)
		ids = append(ids, c.ID)
	}
	_, err := e.Clocks.CreateClock(ctx, utc("2027-01-01T00:00:00Z"), "one too many")
	require.ErrorIs(t, err, testclock.ErrTooManyClocks)
	require.NoError(t, e.Clocks.DeleteClock(ctx, ids[0]))
	_, err = e.Clocks.CreateClock(ctx, utc("2027-01-01T00:00:00Z"), "room again")
	require.NoError(t, err)

	// The ceiling: created just below it, a one-day step past it is refused
	// and changes nothing; a step up to it is allowed.
	_, err = e.Clocks.CreateClock(ctx, utc("2101-01-01T00:00:00Z"), "past the ceiling")
	require.ErrorIs(t, err, apperr.ErrInvalid)
	require.NoError(t, e.Clocks.DeleteClock(ctx, ids[1]))
	high, err := e.Clocks.CreateClock(ctx, utc("2100-12-31T00:00:00Z"), "high")
	require.NoError(t, err)
	_, _, err = e.Clocks.AdvanceClock(ctx, context.Background(), high.ID, utc("2101-01-01T00:00:00Z"))
	require.ErrorIs(t, err, apperr.ErrInvalid)
	got, _, err := e.Clocks.GetClock(ctx, high.ID, 10)
	require.NoError(t, err)
	assert.Equal(t, billing.ClockReady, got.Status)
	assert.Equal(t, utc("2100-12-31T00:00:00Z"), got.FrozenTime)
	c := advance(t, e, high.ID, "2100-12-31T23:59:59Z")
	assert.Equal(t, billing.ClockReady, c.Status)
}

// TestAtMostTwoClocksAdvanceAtOnce: while two advances run on an instance a
// third is refused at once (nothing changed on its clock); once one ends,
// the third goes.
func TestAtMostTwoClocksAdvanceAtOnce(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var blocked sync.WaitGroup
	blocked.Add(2)
	var held atomic.Int32
	e := billingtest.NewEnv(t, billingtest.Options{Crash: func(step string, p billing.Period) error {
		if step == "claimed" && held.Add(1) <= 2 {
			blocked.Done()
			<-release // hold the advance in its first charge
		}
		return nil
	}})
	var clocks []billing.Clock
	for i := range 3 {
		c, err := e.Clocks.CreateClock(ctx, utc("2027-01-01T00:00:00Z"), "busy")
		require.NoError(t, err)
		in := billingtest.Input("gold", 2)
		in.TestClock = c.ID
		_, err = e.Service.CreateSubscription(ctx, "acc-busy-"+string(rune('a'+i)), in)
		require.NoError(t, err)
		clocks = append(clocks, c)
	}
	var dones []<-chan struct{}
	for _, c := range clocks[:2] {
		_, done, err := e.Clocks.AdvanceClock(ctx, context.Background(), c.ID, utc("2027-01-05T00:00:00Z"))
		require.NoError(t, err)
		dones = append(dones, done)
	}
	blocked.Wait() // both advances are in their charge
	_, _, err := e.Clocks.AdvanceClock(ctx, context.Background(), clocks[2].ID, utc("2027-01-05T00:00:00Z"))
	require.ErrorIs(t, err, testclock.ErrTooManyAdvances)
	third, _, err := e.Clocks.GetClock(ctx, clocks[2].ID, 10)
	require.NoError(t, err)
	assert.Equal(t, billing.ClockReady, third.Status, "the refused advance changed nothing")
	assert.Equal(t, utc("2027-01-01T00:00:00Z"), third.FrozenTime)
	close(release)
	for _, done := range dones {
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("advance did not end")
		}
	}
	c := advance(t, e, clocks[2].ID, "2027-01-05T00:00:00Z")
	assert.Equal(t, billing.ClockReady, c.Status)
}

// panicStore panics in the first PutClockRun it is asked for.
type panicStore struct {
	testclock.Store
	once atomic.Bool
}

func (s *panicStore) PutClockRun(ctx context.Context, clock string, r billing.ClockRun) error {
	if s.once.CompareAndSwap(false, true) {
		panic("injected panic in an advance")
	}
	return s.Store.PutClockRun(ctx, clock, r)
}

// TestAPanicFailsThatClockAdvanceOnly: a panic inside an advance is
// recovered (the test process survives), that advance ends failed with a
// message saying so, and the next advance goes on from where it stopped.
func TestAPanicFailsThatClockAdvanceOnly(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	svc, err := testclock.New(testclock.Config{}, testclock.Deps{Billing: e.Service, Store: &panicStore{Store: e.Store}, Now: e.Clock.Now})
	require.NoError(t, err)
	clock, err := svc.CreateClock(ctx, utc("2027-01-01T00:00:00Z"), "panics once")
	require.NoError(t, err)
	in := billingtest.Input("gold", 2)
	in.TestClock = clock.ID
	sub, err := e.Service.CreateSubscription(ctx, "acc-panic", in)
	require.NoError(t, err)

	_, done, err := svc.AdvanceClock(ctx, context.Background(), clock.ID, utc("2027-01-05T00:00:00Z"))
	require.NoError(t, err)
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the panicking advance did not end")
	}
	c, _, err := svc.GetClock(ctx, clock.ID, 10)
	require.NoError(t, err)
	assert.Equal(t, billing.ClockFailed, c.Status)
	assert.Contains(t, c.Error, "internal error")

	_, done, err = svc.AdvanceClock(ctx, context.Background(), clock.ID, utc("2027-01-05T00:00:00Z"))
	require.NoError(t, err)
	<-done
	c, _, err = svc.GetClock(ctx, clock.ID, 10)
	require.NoError(t, err)
	assert.Equal(t, billing.ClockReady, c.Status)
	got, err := e.Service.GetSubscription(ctx, "acc-panic", sub.SubscriptionID)
	require.NoError(t, err)
	assert.Equal(t, "2027-01-02", got.LastPaymentDate.String(), "the period of the 2nd was charged once the advance went on")
}
