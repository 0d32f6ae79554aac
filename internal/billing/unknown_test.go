package billing_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// countingObserver records the money-safety metrics.
type countingObserver struct {
	mu         sync.Mutex
	refused    map[string]int
	unknown    int
	resolved   map[string]int
	unresolved []int
	duplicates int
}

func (o *countingObserver) DuplicateRefunded() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.duplicates++
}

func newObserver() *countingObserver {
	return &countingObserver{refused: map[string]int{}, resolved: map[string]int{}}
}

func (o *countingObserver) FeedRefused(reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.refused[reason]++
}

func (o *countingObserver) OutcomeUnknown() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.unknown++
}

func (o *countingObserver) OutcomeResolved(result string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.resolved[result]++
}

func (o *countingObserver) UnresolvedPeriods(n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.unresolved = append(o.unresolved, n)
}

func (o *countingObserver) lastUnresolved() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.unresolved) == 0 {
		return -1
	}
	return o.unresolved[len(o.unresolved)-1]
}

func receiptsOf(t *testing.T, e *billingtest.Env, account string) []billing.Receipt {
	t.Helper()
	page, err := e.Service.ListReceipts(ctx, account, 100, "")
	require.NoError(t, err)
	return page.Items
}

// A charge whose outcome is unknown must not be stuck for good.
// Stripe answers 500 on the first run; the following daily runs
// resolve it by asking Stripe for the PaymentIntent, never park it, and
// every run that leaves it unresolved is not OK and says so in a metric.
func TestScenario3UnknownOutcomeIsResolvedNotStuck(t *testing.T) {
	t.Parallel()

	t.Run("found succeeded: COMPLETED with a receipt, no second charge", func(t *testing.T) {
		t.Parallel()
		obs := newObserver()
		e := billingtest.NewEnv(t, billingtest.Options{Observer: obs})
		e.Stripe.Decide = billingtest.Behaviors(stripetest.Acted500) // Stripe charged, answered 500, saved the 500
		sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
		require.NoError(t, err)

		rep := collect(t, e, "2024-01-10")
		assert.Equal(t, 1, rep.Unknown)
		assert.Equal(t, 1, rep.Unresolved)
		assert.False(t, rep.OK(), "a run that leaves an unknown outcome is not OK (the CLI exits 1)")
		assert.Equal(t, 1, obs.lastUnresolved())
		assert.NotEmpty(t, period(t, e, sub, "2024-01-10").InFlightKey)
		// The report names the subscription (the incident's sample), once.
		assert.Equal(t, []string{"acc-1/" + sub.SubscriptionID}, rep.UnresolvedSamples)

		// Stripe is down for the rest of the day: a rerun cannot resolve it.
		e.Stripe.SetDown(true)
		rep = collect(t, e, "2024-01-10")
		assert.False(t, rep.OK())
		assert.Equal(t, 1, rep.Unresolved)
		assert.Equal(t, []string{"acc-1/" + sub.SubscriptionID}, rep.UnresolvedSamples)
		e.Stripe.SetDown(false)

		// Next day, past the 23 h window: asked, found, recorded.
		rep = collect(t, e, "2024-01-11")
		assert.True(t, rep.OK(), "%+v", rep)
		assert.Empty(t, rep.UnresolvedSamples)
		assert.Equal(t, 1, rep.Resolved)
		assert.Equal(t, 0, obs.lastUnresolved())
		p := period(t, e, sub, "2024-01-10")
		assert.Equal(t, billing.Completed, p.Status)
		assert.Empty(t, p.InFlightKey)
		assert.Equal(t, e.Stripe.PIs()[0].ID, p.TransactionID)
		require.Len(t, e.Stripe.PIs(), 1, "no second charge")
		recs := receiptsOf(t, e, "acc-1")
		require.Len(t, recs, 1)
		assert.Equal(t, "2024-01-11", recs[0].ProcessedDate.String())
		got, err := e.Service.GetSubscription(ctx, "acc-1", sub.SubscriptionID)
		require.NoError(t, err)
		assert.Equal(t, "2024-02-10", got.NextPaymentDate.String(), "the subscription moved on")
		assert.Equal(t, 1, obs.resolved["succeeded"])

		// And the schedule goes on.
		rep = collect(t, e, "2024-02-10")
		assert.True(t, rep.OK())
		assert.Equal(t, billing.Completed, period(t, e, sub, "2024-02-10").Status)
	})

	t.Run("not found: the lost attempt is recorded, then a new attempt charges", func(t *testing.T) {
		t.Parallel()
		e := billingtest.NewEnv(t, billingtest.Options{})
		e.Stripe.Decide = billingtest.Behaviors(stripetest.Fail500) // nothing happened at Stripe
		sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
		require.NoError(t, err)
		rep := collect(t, e, "2024-01-10")
		assert.False(t, rep.OK())
		require.Empty(t, e.Stripe.PIs())

		rep = collect(t, e, "2024-01-11")
		assert.True(t, rep.OK(), "%+v", rep)
		assert.Equal(t, 1, rep.Succeeded)
		pis := e.Stripe.PIs()
		require.Len(t, pis, 1)
		assert.Equal(t, "2", pis[0].Metadata[billing.MetaAttempt], "a new attempt, with its own key")
		assert.NotEqual(t, billing.IdempotencyKey(period(t, e, sub, "2024-01-10"), 1), pis[0].IdempotencyKey)
		p := period(t, e, sub, "2024-01-10")
		assert.Equal(t, billing.Completed, p.Status)
		assert.Equal(t, 2, p.Attempts)
		var events []string
		for _, h := range history(t, e, sub) {
			if h.BillingDate.String() == "2024-01-10" {
				events = append(events, h.UpdatedEvent)
			}
		}
		assert.Contains(t, events, "attempt-lost", "what happened is recorded before the new attempt")
		assert.Len(t, receiptsOf(t, e, "acc-1"), 1)
	})

	t.Run("search lags: the customer's list finds a declined attempt; ERROR, then the retry due since then", func(t *testing.T) {
		t.Parallel()
		e := billingtest.NewEnv(t, billingtest.Options{})
		e.Stripe.SearchLag = 72 * 3600e9
		e.Stripe.Decide = billingtest.Behaviors(stripetest.Acted500)
		e.Stripe.ActedAs = func(stripetest.PI) stripetest.Behavior { return stripetest.Decline }
		sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
		require.NoError(t, err)
		collect(t, e, "2024-01-10")
		rep := collect(t, e, "2024-01-11")
		assert.True(t, rep.OK(), "%+v", rep)
		assert.Equal(t, 1, rep.Declined, "the lost attempt, found declined")
		assert.Equal(t, 1, rep.Succeeded, "then the day-1 retry, due on the day it was resolved (oracle F12)")
		pis := e.Stripe.PIs()
		require.Len(t, pis, 2)
		assert.Equal(t, "canceled", pis[0].Status, "declined, then cancelled before the retry (docs/design.md §8 one successful charge per period)")
		assert.Equal(t, []string{pis[0].ID}, e.Stripe.Cancels())
		assert.Equal(t, "2", pis[1].Metadata[billing.MetaAttempt])
		p := period(t, e, sub, "2024-01-10")
		assert.Equal(t, billing.Completed, p.Status)
		assert.Equal(t, pis[1].ID, p.TransactionID)
		statuses := statuses(history(t, e, sub), "2024-01-10")
		assert.Equal(t, []billing.Status{billing.Scheduled, billing.Error, billing.Completed}, statuses)
		rep = collect(t, e, "2024-01-13")
		assert.Equal(t, 0, rep.Succeeded+rep.Declined, "nothing left to retry")
	})

	t.Run("a decline whose answer was lost, resent within the window the next day: then that day's retry", func(t *testing.T) {
		t.Parallel()
		e := billingtest.NewEnv(t, billingtest.Options{})
		e.Stripe.Decide = billingtest.Behaviors(stripetest.Lost) // declined, the answer lost
		e.Stripe.LostAs = func(stripetest.PI) stripetest.Behavior { return stripetest.Decline }
		sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
		require.NoError(t, err)
		e.Clock.Set(d("2024-01-10").Time().Add(20 * time.Hour)) // the job ran late on the due date
		rep, err := e.Service.Collect(ctx, d("2024-01-10"))
		require.NoError(t, err)
		require.Equal(t, 1, rep.Unknown)
		// Early the next day, 14 h later: within Stripe's idempotency window,
		// so the attempt is resent with its key and Stripe replays the decline.
		e.Clock.Set(d("2024-01-11").Time().Add(10 * time.Hour))
		rep, err = e.Service.Collect(ctx, d("2024-01-11"))
		require.NoError(t, err)
		assert.True(t, rep.OK(), "%+v", rep)
		assert.Equal(t, 1, rep.Declined, "attempt 1, its decline replayed")
		assert.Equal(t, 1, rep.Succeeded, "then the day-1 retry (docs/design.md §8 retries; oracle F14)")
		pis := e.Stripe.PIs()
		require.Len(t, pis, 2)
		assert.Equal(t, "2", pis[1].Metadata[billing.MetaAttempt])
		assert.Equal(t, billing.Completed, period(t, e, sub, "2024-01-10").Status)
	})

	t.Run("a decline resolved late, then a crash before the day's retry: the rerun makes it", func(t *testing.T) {
		t.Parallel()
		var crashed sync.Once
		var e *billingtest.Env
		e = billingtest.NewEnv(t, billingtest.Options{Lease: 500 * time.Millisecond, Heartbeat: 100 * time.Millisecond,
			Crash: func(step string, p billing.Period) error {
				crash := false
				if step == "committed" && p.Status == billing.Error && e.Clock.Today().String() == "2024-01-11" {
					crashed.Do(func() { crash = true })
				}
				if crash {
					return billing.ErrCrash
				}
				return nil
			}})
		e.Stripe.Decide = billingtest.Behaviors(stripetest.Acted500)
		e.Stripe.ActedAs = func(stripetest.PI) stripetest.Behavior { return stripetest.Decline }
		sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
		require.NoError(t, err)
		collect(t, e, "2024-01-10")
		e.Clock.SetDate(d("2024-01-11"))
		_, err = e.Service.Collect(ctx, d("2024-01-11"))
		require.ErrorIs(t, err, billing.ErrCrash, "the decline was recorded, then the job died")
		assert.Len(t, e.Stripe.PIs(), 1)
		var rep *billing.Report
		require.Eventually(t, func() bool { // the abandoned lock's lease runs out
			rep = collect(t, e, "2024-01-11")
			return rep.Locked == 0
		}, 30*time.Second, 200*time.Millisecond)
		assert.True(t, rep.OK(), "%+v", rep)
		assert.Equal(t, 1, rep.Succeeded, "the rerun finds the day-1 retry due (F14)")
		assert.Equal(t, billing.Completed, period(t, e, sub, "2024-01-10").Status)
	})

	t.Run("a pay now whose decline is learned on the stale date: STALE that day", func(t *testing.T) {
		t.Parallel()
		e := billingtest.NewEnv(t, billingtest.Options{})
		var mu sync.Mutex
		n := 0
		e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior {
			mu.Lock()
			defer mu.Unlock()
			n++
			if n == 6 { // the pay now after the five declined attempts
				return stripetest.Acted500
			}
			return stripetest.Decline
		}
		e.Stripe.ActedAs = func(stripetest.PI) stripetest.Behavior { return stripetest.Decline }
		sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
		require.NoError(t, err)
		for _, day := range []string{"2024-01-10", "2024-01-11", "2024-01-13", "2024-01-15", "2024-01-17"} {
			collect(t, e, day)
		}
		require.Len(t, e.Stripe.PIs(), 5)
		e.Clock.SetDate(d("2024-02-06"))
		_, _, err = e.Service.Pay(ctx, "acc-1", sub.SubscriptionID)
		require.Error(t, err, "the pay now's answer was lost")
		rep := collect(t, e, "2024-02-09") // the stale date (30 days after Jan 10)
		assert.True(t, rep.OK(), "%+v", rep)
		assert.Equal(t, 1, rep.Resolved)
		assert.Equal(t, billing.Stale, period(t, e, sub, "2024-01-10").Status, "given up on its stale date (oracle F15)")
	})

	t.Run("a pay now whose answer is lost ahead of the retry days: the next run resolves it", func(t *testing.T) {
		t.Parallel()
		e := billingtest.NewEnv(t, billingtest.Options{})
		var mu sync.Mutex
		n := 0
		e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior {
			mu.Lock()
			defer mu.Unlock()
			n++
			if n == 6 {
				return stripetest.Acted500
			}
			return stripetest.Decline
		}
		e.Stripe.ActedAs = func(stripetest.PI) stripetest.Behavior { return stripetest.Decline }
		sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
		require.NoError(t, err)
		for _, day := range []string{"2024-01-10", "2024-01-11", "2024-01-13", "2024-01-15", "2024-01-17"} {
			collect(t, e, day)
		}
		e.Clock.SetDate(d("2024-01-20"))
		_, _, err = e.Service.Pay(ctx, "acc-1", sub.SubscriptionID)
		require.Error(t, err, "the pay now's answer was lost")
		rep := collect(t, e, "2024-01-21")
		assert.True(t, rep.OK(), "%+v", rep)
		assert.Equal(t, 1, rep.Resolved, "found by the next run, not on the stale date (oracle F17)")
		p := period(t, e, sub, "2024-01-10")
		assert.Empty(t, p.InFlightKey)
		assert.Equal(t, billing.Error, p.Status)
		_, err = update(e, "acc-1", sub.SubscriptionID, billing.Change{Amount: ptr(int64(2500))})
		assert.NoError(t, err, "changes are accepted again")
	})

	t.Run("a retry whose answer is lost is resolved before the next retry", func(t *testing.T) {
		t.Parallel()
		e := billingtest.NewEnv(t, billingtest.Options{})
		var mu sync.Mutex
		n := 0
		e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior {
			mu.Lock()
			defer mu.Unlock()
			n++
			switch n {
			case 1:
				return stripetest.Decline
			case 2:
				return stripetest.Acted500
			}
			return stripetest.Succeed
		}
		e.Stripe.ActedAs = func(stripetest.PI) stripetest.Behavior { return stripetest.Decline }
		sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 8))
		require.NoError(t, err)
		collect(t, e, "2024-01-08") // declined
		rep := collect(t, e, "2024-01-09")
		assert.False(t, rep.OK(), "retry day 1: made at Stripe, answer lost")
		rep = collect(t, e, "2024-01-10")
		assert.True(t, rep.OK(), "%+v", rep)
		p := period(t, e, sub, "2024-01-08")
		assert.Equal(t, billing.Error, p.Status)
		assert.Equal(t, 2, p.Attempts)
		assert.Equal(t, e.Stripe.PIs()[1].ID, p.TransactionID)
		assert.Equal(t, "2024-01-11", p.NextAttemptDate.String())
		require.Len(t, e.Stripe.PIs(), 2)
		rep = collect(t, e, "2024-01-11")
		assert.Equal(t, 1, rep.Succeeded)
		assert.Equal(t, billing.Completed, period(t, e, sub, "2024-01-08").Status)
	})

	t.Run("Stripe down for days: unresolved and not OK on every run, never parked, then resolved", func(t *testing.T) {
		t.Parallel()
		obs := newObserver()
		e := billingtest.NewEnv(t, billingtest.Options{Observer: obs})
		e.Stripe.Decide = billingtest.Behaviors(stripetest.Acted500)
		sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
		require.NoError(t, err)
		collect(t, e, "2024-01-10")
		e.Stripe.SetDown(true)
		for _, day := range []string{"2024-01-11", "2024-01-12", "2024-01-13", "2024-01-14", "2024-01-15", "2024-01-16"} {
			rep := collect(t, e, day)
			assert.False(t, rep.OK(), day)
			assert.Equal(t, 1, rep.Unresolved, day)
			assert.Equal(t, 1, obs.lastUnresolved(), day)
		}
		e.Stripe.SetDown(false)
		// Six days later, beyond the 3-day lookback: the sweep still reads it.
		rep := collect(t, e, "2024-01-17")
		assert.True(t, rep.OK(), "%+v", rep)
		assert.Equal(t, billing.Completed, period(t, e, sub, "2024-01-10").Status)
		require.Len(t, e.Stripe.PIs(), 1)
	})

	t.Run("jobs not run for longer than the lookback: old periods STALE or charged, never forgotten", func(t *testing.T) {
		t.Parallel()
		e := billingtest.NewEnv(t, billingtest.Options{})
		sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
		require.NoError(t, err)
		rep := collect(t, e, "2024-01-05") // a clean run: nothing due yet
		require.True(t, rep.OK())
		// The jobs stop for eight weeks (lookback: 3 days, stale: 30 days).
		rep = collect(t, e, "2024-03-01")
		assert.True(t, rep.OK(), "%+v", rep)
		assert.Equal(t, "2024-01-04", rep.SweptFrom, "read back to the last clean run, not only the lookback")
		assert.Equal(t, billing.Stale, period(t, e, sub, "2024-01-10").Status, "past BILLING_STALE_DAYS: marked")
		assert.Equal(t, billing.Completed, period(t, e, sub, "2024-02-10").Status, "within it: charged")
		got, err := e.Service.GetSubscription(ctx, "acc-1", sub.SubscriptionID)
		require.NoError(t, err)
		assert.Equal(t, "2024-03-10", got.NextPaymentDate.String())
		assert.Len(t, e.Stripe.PIs(), 1)

		// The next daily run reads only the lookback again.
		rep = collect(t, e, "2024-03-02")
		assert.Equal(t, "2024-02-28", rep.SweptFrom)
	})
}

func ptr[T any](v T) *T { return &v }

// The unresolved-periods gauge is what the newest-date run left: a clean
// rerun for an older date (it never reads the later date's charges in
// flight) does not clear it.
func TestOlderDateRunKeepsTheUnresolvedGauge(t *testing.T) {
	t.Parallel()
	obs := newObserver()
	e := billingtest.NewEnv(t, billingtest.Options{Observer: obs})
	e.Stripe.Decide = billingtest.Behaviors(stripetest.Acted500)
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)

	rep := collect(t, e, "2024-01-10")
	require.Equal(t, 1, rep.Unresolved)
	require.Equal(t, 1, obs.lastUnresolved())

	rep = collect(t, e, "2024-01-09")
	assert.True(t, rep.OK(), "%+v", rep)
	assert.Equal(t, 1, obs.lastUnresolved(), "the 2024-01-10 charge is still in flight")
	assert.NotEmpty(t, period(t, e, sub, "2024-01-10").InFlightKey)

	// A run for the same date that settles it clears it.
	rep = collect(t, e, "2024-01-11")
	assert.True(t, rep.OK(), "%+v", rep)
	assert.Equal(t, 0, obs.lastUnresolved())
}

// docs/design.md §8: an attempt whose outcome is unknown is settled by the next
// collection, which asks Stripe first. A pay now on an ERROR period that
// has no next look recorded (no index entry) must leave the attempt where
// the next collection finds it.
func TestPayNowUnknownOnErrorPeriodWithoutNextLookIsSettled(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	var mu sync.Mutex
	n := 0
	e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior {
		mu.Lock()
		defer mu.Unlock()
		n++
		switch n {
		case 1:
			return stripetest.Decline
		case 2:
			return stripetest.Acted500 // the pay now: charged, answer lost
		}
		return stripetest.Succeed
	}
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	collect(t, e, "2024-01-10") // declined: ERROR
	p := period(t, e, sub, "2024-01-10")
	require.Equal(t, billing.Error, p.Status)
	// A stored ERROR period without a next look (older data).
	p.NextAttemptDate = dates.Date{}
	tx := billing.NewTx("test:no-next-look", time.Now())
	tx.PutPeriod(&p, true)
	require.NoError(t, e.Service.Store().Commit(ctx, tx))

	e.Clock.SetDate(d("2024-01-10"))
	_, _, err = e.Service.Pay(ctx, "acc-1", sub.SubscriptionID)
	require.Error(t, err, "the pay now's answer was lost")
	require.NotEmpty(t, period(t, e, sub, "2024-01-10").InFlightKey)

	rep := collect(t, e, "2024-01-11")
	assert.Equal(t, 1, rep.Resolved, "the next collection asked Stripe: %+v", rep)
	got := period(t, e, sub, "2024-01-10")
	assert.Equal(t, billing.Completed, got.Status)
	assert.Empty(t, got.InFlightKey)
	require.Len(t, e.Stripe.PIs(), 2, "no third charge")
}
