package billing_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// docs/design.md §8 "Collections triggered by the platform", written from
// the rules: unpaid periods are collected at once, oldest first, each at
// its own amount with a new attempt key, process WEBHOOK or
// WEBHOOK_BALANCE; one triggered attempt per period per
// BILLING_TRIGGER_MIN_GAP; a hard-declined period waits for a new payment
// method; nothing unpaid or an unknown account charges nothing.

// declining is an env whose Stripe declines (soft, insufficient funds)
// until approve is called, with one subscription of account whose period
// of 2024-01-10 the day's collection declined.
type declining struct {
	e       *billingtest.Env
	sub     billing.Subscription
	approve func()
}

func newDeclining(t *testing.T, account string, code string) declining {
	t.Helper()
	e := billingtest.NewEnv(t, billingtest.Options{})
	var ok atomic.Bool
	e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior {
		if ok.Load() {
			return stripetest.Succeed
		}
		return stripetest.Decline
	}
	if code != "" {
		e.Stripe.DeclineAs = func(stripetest.PI) string { return code }
	}
	sub, err := e.Service.CreateSubscription(context.Background(), account, billingtest.Input("gold", 10))
	require.NoError(t, err)
	e.Collect(t, "2024-01-10")
	p := e.Period(t, sub, "2024-01-10")
	require.Equal(t, billing.Error, p.Status)
	require.Equal(t, 1, p.Attempts)
	return declining{e: e, sub: sub, approve: func() { ok.Store(true) }}
}

// trigger runs one trigger, trying again while the account is locked (as
// the trigger processor does).
func trigger(t *testing.T, e *billingtest.Env, account string, proc billing.Process) billing.TriggerResult {
	t.Helper()
	for {
		res, err := e.Service.CollectTriggered(context.Background(), account, proc)
		if errors.Is(err, billing.ErrLocked) {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		require.NoError(t, err)
		return res
	}
}

func chargesOf(e *billingtest.Env, sub billing.Subscription, date string) (all, succeeded int) {
	for _, pi := range e.Stripe.PIs() {
		if pi.Metadata[billing.MetaSubscription] == sub.SubscriptionID && pi.Metadata[billing.MetaDate] == date {
			all++
			if pi.Status == "succeeded" {
				succeeded++
			}
		}
	}
	return all, succeeded
}

// A burst of 50 income triggers for one declining account, at once and
// from many goroutines, makes one attempt; the next attempt comes only
// once the gap has passed.
func TestTriggerBurstMakesOneAttemptPerGap(t *testing.T) {
	d := newDeclining(t, "acc-burst", "")
	e := d.e
	e.Clock.Set(time.Date(2024, 1, 10, 15, 0, 0, 0, time.UTC))
	var wg sync.WaitGroup
	results := make([]billing.TriggerResult, 50)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = trigger(t, e, "acc-burst", billing.ProcWebhook)
		}()
	}
	wg.Wait()
	all, _ := chargesOf(e, d.sub, "2024-01-10")
	assert.Equal(t, 2, all, "the day's attempt and one triggered attempt")
	outcomes := map[string]int{}
	for _, r := range results {
		outcomes[r.Outcome]++
	}
	assert.Equal(t, map[string]int{billing.TriggerDeclined: 1, billing.TriggerNotAttempted: 49}, outcomes)
	p := e.Period(t, d.sub, "2024-01-10")
	assert.Equal(t, billing.Error, p.Status)
	assert.Equal(t, billing.ProcWebhook, p.Process)
	assert.Equal(t, 2, p.Attempts)
	assert.Equal(t, dates.MustParse("2024-01-11"), p.NextAttemptDate, "a triggered decline keeps the retry days")

	// Within the gap: nothing more, whatever the number of triggers.
	e.Clock.Set(time.Date(2024, 1, 11, 14, 59, 0, 0, time.UTC))
	res := trigger(t, e, "acc-burst", billing.ProcWebhookBalance)
	assert.Equal(t, billing.TriggerNotAttempted, res.Outcome)
	require.Len(t, res.Periods, 1)
	assert.Equal(t, billing.TriggeredTooSoon, res.Periods[0].Outcome)
	all, _ = chargesOf(e, d.sub, "2024-01-10")
	assert.Equal(t, 2, all)

	// Past the gap: one more.
	e.Clock.Set(time.Date(2024, 1, 11, 15, 0, 1, 0, time.UTC))
	res = trigger(t, e, "acc-burst", billing.ProcWebhook)
	assert.Equal(t, billing.TriggerDeclined, res.Outcome)
	require.Len(t, res.Periods, 1)
	assert.Equal(t, 3, res.Periods[0].AttemptNo)
	assert.Equal(t, "insufficient_funds", res.Periods[0].DeclineCode)
	all, _ = chargesOf(e, d.sub, "2024-01-10")
	assert.Equal(t, 3, all)
	keys := map[string]bool{}
	for _, pi := range e.Stripe.PIs() {
		assert.False(t, keys[pi.IdempotencyKey], "every attempt has a key of its own")
		keys[pi.IdempotencyKey] = true
	}
}

// A trigger racing the scheduled retry of the same period charges it
// once: one of the two collects it, the other finds nothing unpaid.
func TestTriggerRacingTheScheduledRunChargesOnce(t *testing.T) {
	for i := range 5 {
		d := newDeclining(t, "acc-race", "")
		e := d.e
		d.approve()
		e.Clock.SetDate(dates.MustParse("2024-01-11")) // the period's first retry day
		var wg sync.WaitGroup
		var res billing.TriggerResult
		wg.Add(2)
		go func() {
			defer wg.Done()
			res = trigger(t, e, "acc-race", billing.ProcWebhook)
		}()
		go func() {
			defer wg.Done()
			for {
				rep, err := e.Service.Collect(context.Background(), dates.MustParse("2024-01-11"))
				require.NoError(t, err)
				if rep.OK() {
					return
				}
			}
		}()
		wg.Wait()
		_, succeeded := chargesOf(e, d.sub, "2024-01-10")
		assert.Equal(t, 1, succeeded, "run %d: one successful charge", i)
		p := e.Period(t, d.sub, "2024-01-10")
		assert.Equal(t, billing.Completed, p.Status)
		assert.Contains(t, []billing.Process{billing.ProcRetry, billing.ProcWebhook}, p.Process)
		assert.Contains(t, []string{billing.TriggerCollected, billing.TriggerNothingUnpaid}, res.Outcome)
	}
}

// An income trigger after a soft decline collects the period at its own
// amount, process WEBHOOK; the success ends its retries like any success.
func TestTriggerAfterSoftDeclineCollects(t *testing.T) {
	d := newDeclining(t, "acc-soft", "")
	e := d.e
	d.approve()
	e.Clock.Set(time.Date(2024, 1, 10, 18, 0, 0, 0, time.UTC))
	res := trigger(t, e, "acc-soft", billing.ProcWebhook)
	assert.Equal(t, billing.TriggerCollected, res.Outcome)
	assert.Equal(t, billing.ProcWebhook, res.Process)
	assert.Equal(t, dates.MustParse("2024-01-10"), res.Today)
	require.Len(t, res.Periods, 1)
	got := res.Periods[0]
	assert.Equal(t, billing.TriggeredPaid, got.Outcome)
	assert.Equal(t, 2, got.AttemptNo)
	assert.Equal(t, int64(1999), got.Amount)
	assert.Equal(t, 1, res.Attempts)

	p := e.Period(t, d.sub, "2024-01-10")
	assert.Equal(t, billing.Completed, p.Status)
	assert.Equal(t, billing.ProcWebhook, p.Process)
	assert.True(t, p.NextAttemptDate.IsZero(), "no retry left")
	pi, ok := e.Stripe.Get(p.TransactionID)
	require.True(t, ok)
	assert.Equal(t, int64(1999), pi.Amount, "the period's own amount")
	assert.Equal(t, billing.IdempotencyKey(p, 2), pi.IdempotencyKey, "a new attempt key")

	// The retry day charges nothing more; a later trigger finds nothing.
	e.Collect(t, "2024-01-11")
	_, succeeded := chargesOf(e, d.sub, "2024-01-10")
	assert.Equal(t, 1, succeeded)
	res = trigger(t, e, "acc-soft", billing.ProcWebhook)
	assert.Equal(t, billing.TriggerNothingUnpaid, res.Outcome)
	assert.Empty(t, res.Periods)
	h := e.HistoryOf(t, d.sub)
	var last billing.HistoryEntry
	for _, x := range h {
		if x.BillingDate.Equal(dates.MustParse("2024-01-10")) {
			last = x
		}
	}
	assert.Equal(t, billing.ProcWebhook, last.Process)
	assert.Equal(t, billing.Completed, last.Status)
}

// After a hard decline a trigger does not try the period until its
// payment method changes; then a balance trigger collects it.
func TestTriggerAfterHardDeclineWaitsForANewPaymentMethod(t *testing.T) {
	d := newDeclining(t, "acc-hard", "stolen_card")
	e := d.e
	p := e.Period(t, d.sub, "2024-01-10")
	require.True(t, p.NotRetried)
	assert.Equal(t, "pm_ok", p.HardDeclinedMethod)
	d.approve() // Stripe would approve: only the rule keeps the trigger off

	for _, proc := range []billing.Process{billing.ProcWebhook, billing.ProcWebhookBalance} {
		res := trigger(t, e, "acc-hard", proc)
		assert.Equal(t, billing.TriggerNotAttempted, res.Outcome)
		require.Len(t, res.Periods, 1)
		assert.Equal(t, billing.TriggeredWaitsForMethod, res.Periods[0].Outcome)
	}
	all, _ := chargesOf(e, d.sub, "2024-01-10")
	assert.Equal(t, 1, all, "not tried again")

	pm := "pm_new"
	_, err := e.Update("acc-hard", d.sub.SubscriptionID, billing.Change{PaymentMethod: &pm})
	require.NoError(t, err)
	res := trigger(t, e, "acc-hard", billing.ProcWebhookBalance)
	assert.Equal(t, billing.TriggerCollected, res.Outcome)
	p = e.Period(t, d.sub, "2024-01-10")
	assert.Equal(t, billing.Completed, p.Status)
	assert.Equal(t, billing.ProcWebhookBalance, p.Process)
	pi, ok := e.Stripe.Get(p.TransactionID)
	require.True(t, ok)
	assert.Equal(t, "pm_new", pi.PaymentMethod)
}

// Nothing unpaid, an unknown account: recorded as such, nothing charged.
func TestTriggerWithNothingToCollect(t *testing.T) {
	e := billingtest.NewEnv(t, billingtest.Options{})
	_, err := e.Service.CreateSubscription(context.Background(), "acc-paid", billingtest.Input("gold", 10))
	require.NoError(t, err)
	tests := []struct {
		account string
		want    string
	}{
		{"acc-paid", billing.TriggerNothingUnpaid},
		{"acc-nobody", billing.TriggerUnknownAccount},
	}
	for _, tc := range tests {
		t.Run(tc.account, func(t *testing.T) {
			res := trigger(t, e, tc.account, billing.ProcWebhook)
			assert.Equal(t, tc.want, res.Outcome)
			assert.Empty(t, res.Periods)
			assert.Zero(t, res.Attempts)
		})
	}
	assert.Empty(t, e.Stripe.PIs())
	_, err = e.Service.CollectTriggered(context.Background(), "acc-paid", billing.ProcBatch)
	assert.Error(t, err, "only WEBHOOK and WEBHOOK_BALANCE are a trigger's")
	_, err = e.Service.CollectTriggered(context.Background(), "acc#1", billing.ProcWebhook)
	assert.Error(t, err)
}

// Several unpaid periods are collected oldest first, each at its own
// amount.
func TestTriggerCollectsOldestFirst(t *testing.T) {
	e := billingtest.NewEnv(t, billingtest.Options{})
	var ok atomic.Bool
	e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior {
		if ok.Load() {
			return stripetest.Succeed
		}
		return stripetest.Decline
	}
	ctx := context.Background()
	late, err := e.Service.CreateSubscription(ctx, "acc-two", billingtest.Input("silver", 12))
	require.NoError(t, err)
	in := billingtest.Input("gold", 10)
	in.Amount = 4200
	early, err := e.Service.CreateSubscription(ctx, "acc-two", in)
	require.NoError(t, err)
	e.Collect(t, "2024-01-10")
	e.Collect(t, "2024-01-12")
	ok.Store(true)
	res := trigger(t, e, "acc-two", billing.ProcWebhook)
	assert.Equal(t, billing.TriggerCollected, res.Outcome)
	require.Len(t, res.Periods, 2)
	assert.Equal(t, early.SubscriptionID, res.Periods[0].SubscriptionID)
	assert.Equal(t, int64(4200), res.Periods[0].Amount)
	assert.Equal(t, late.SubscriptionID, res.Periods[1].SubscriptionID)
	assert.Equal(t, int64(1999), res.Periods[1].Amount)
	var order []string
	for _, pi := range e.Stripe.PIs() {
		if pi.Status == "succeeded" {
			order = append(order, pi.Metadata[billing.MetaSubscription])
		}
	}
	assert.Equal(t, []string{early.SubscriptionID, late.SubscriptionID}, order)
}

// A trigger on a test clock's account takes the clock's today and time.
func TestTriggerOnATestClockTakesTheClocksToday(t *testing.T) {
	e := billingtest.NewEnv(t, billingtest.Options{})
	var ok atomic.Bool
	e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior {
		if ok.Load() {
			return stripetest.Succeed
		}
		return stripetest.Decline
	}
	ctx := context.Background()
	clock, err := e.Clocks.CreateClock(ctx, time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC), "trigger")
	require.NoError(t, err)
	in := billingtest.Input("gold", 10)
	in.TestClock = clock.ID
	sub, err := e.Service.CreateSubscription(ctx, "acc-clock", in)
	require.NoError(t, err)
	_, done, err := e.Clocks.AdvanceClock(ctx, context.Background(), clock.ID, time.Date(2030, 6, 10, 12, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("advance did not end")
	}
	p := e.Period(t, sub, "2030-06-10")
	require.Equal(t, billing.Error, p.Status)

	ok.Store(true)
	res := trigger(t, e, "acc-clock", billing.ProcWebhook)
	assert.Equal(t, billing.TriggerCollected, res.Outcome)
	assert.Equal(t, dates.MustParse("2030-06-10"), res.Today, "the clock's today, not the real one (%s)", e.Clock.Today())
	p = e.Period(t, sub, "2030-06-10")
	assert.Equal(t, billing.Completed, p.Status)
	assert.True(t, p.TriggeredAt.Equal(time.Date(2030, 6, 10, 12, 0, 0, 0, time.UTC)), "the gap runs on the clock's time: %s", p.TriggeredAt)
}
