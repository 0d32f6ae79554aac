package testclock_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/testclock"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// Test clocks (docs/design.md §4), against DynamoDB Local and the httptest
// Stripe. The end-to-end test through the binary is in cmd/stripe-payments.

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// advance advances clock id to to and waits for the advance to end.
func advance(t *testing.T, e *billingtest.Env, id, to string) billing.Clock {
	t.Helper()
	_, done, err := e.Clocks.AdvanceClock(ctx, context.Background(), id, utc(to))
	require.NoError(t, err)
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		t.Fatalf("advance of %s to %s did not end", id, to)
	}
	c, _, err := e.Clocks.GetClock(ctx, id, 100)
	require.NoError(t, err)
	return c
}

// subscribeOnClock creates a test clock at 2027-01-01 and a gold
// subscription of account on it, collected on day of the month.
func subscribeOnClock(t *testing.T, e *billingtest.Env, account string, day int) (billing.Clock, billing.Subscription) {
	t.Helper()
	clock, err := e.Clocks.CreateClock(ctx, utc("2027-01-01T00:00:00Z"), "")
	require.NoError(t, err)
	in := billingtest.Input("gold", day)
	in.TestClock = clock.ID
	sub, err := e.Service.CreateSubscription(ctx, account, in)
	require.NoError(t, err)
	return clock, sub
}

// completedOn is "<date the period was COMPLETED> for <period>", from the
// history (its entries are written at the service's now: the clock's).
func completedOn(t *testing.T, e *billingtest.Env, sub billing.Subscription) []string {
	t.Helper()
	var out []string
	for _, h := range e.HistoryOf(t, sub) {
		if h.Status == billing.Completed {
			out = append(out, dates.Of(h.LastRunDate.UTC()).String()+" for "+h.BillingDate.String())
		}
	}
	sort.Strings(out)
	return out
}

func TestTestClockRunsTheJobsOfEveryDayForItsSubscriptionsOnly(t *testing.T) {
	t.Parallel()
	// Real time is 2024 here; the clock is in 2027.
	e := billingtest.NewEnv(t, billingtest.Options{})
	clock, err := e.Clocks.CreateClock(ctx, utc("2027-01-01T00:00:00Z"), "day 31")
	require.NoError(t, err)
	assert.Equal(t, billing.ClockReady, clock.Status)

	in := billingtest.Input("gold", 31)
	in.TestClock = clock.ID
	sub, err := e.Service.CreateSubscription(ctx, "acc-clock", in)
	require.NoError(t, err)
	assert.Equal(t, "2027-01-31", sub.NextPaymentDate.String(), "the first payment day after the clock's today")
	assert.Equal(t, "2027-01-24", sub.NextReminderDate.String())
	real, err := e.Service.CreateSubscription(ctx, "acc-real", billingtest.Input("gold", 31))
	require.NoError(t, err)
	assert.Equal(t, "2024-01-31", real.NextPaymentDate.String())

	// The real-time jobs never touch the clock's subscription, even on its dates.
	for _, day := range []string{"2027-01-24", "2027-01-31", "2027-02-01"} {
		e.Clock.SetDate(d(day))
		assert.Zero(t, e.Remind(t, day).Entries, day)
		assert.Zero(t, e.Collect(t, day).Entries, day)
	}
	assert.Empty(t, e.Stripe.PIs())

	c := advance(t, e, clock.ID, "2027-04-01T00:00:00Z")
	assert.Equal(t, billing.ClockReady, c.Status)
	assert.Equal(t, utc("2027-04-01T00:00:00Z"), c.FrozenTime)
	assert.Equal(t, []string{"2027-01-31 for 2027-01-31", "2027-02-28 for 2027-02-28", "2027-03-31 for 2027-03-31"},
		completedOn(t, e, sub))
	assert.Equal(t, []string{"2027-01-24 for 2027-01-31", "2027-02-21 for 2027-02-28", "2027-03-24 for 2027-03-31"},
		e.Reminders(sub.SubscriptionID))
	keys := map[string]bool{}
	for _, pi := range e.Stripe.PIs() {
		assert.Equal(t, sub.SubscriptionID, pi.Metadata[billing.MetaSubscription], "only the clock's subscription was charged")
		assert.False(t, keys[pi.IdempotencyKey], "one idempotency key per period")
		keys[pi.IdempotencyKey] = true
	}
	assert.Len(t, keys, 3)
	got, err := e.Service.GetSubscription(ctx, "acc-clock", sub.SubscriptionID)
	require.NoError(t, err)
	assert.Equal(t, "2027-04-30", got.NextPaymentDate.String())
	assert.Equal(t, "2027-03-31", got.LastPaymentDate.String())
	_, runs, err := e.Clocks.GetClock(ctx, clock.ID, 100)
	require.NoError(t, err)
	charged, reminded := 0, 0
	for _, r := range runs {
		charged += r.Charged
		reminded += r.Reminded
	}
	assert.Equal(t, 3, charged)
	assert.Equal(t, 3, reminded)
	assert.True(t, sort.SliceIsSorted(runs, func(i, j int) bool { return runs[i].Time.After(runs[j].Time) }), "newest first")

	// The real subscription is still due on its real dates, untouched.
	real, err = e.Service.GetSubscription(ctx, "acc-real", real.SubscriptionID)
	require.NoError(t, err)
	assert.Equal(t, "2024-01-31", real.NextPaymentDate.String())

	// An advance over days already passed does nothing; a second one goes on.
	_, _, err = e.Clocks.AdvanceClock(ctx, context.Background(), clock.ID, utc("2027-03-01T00:00:00Z"))
	assert.ErrorIs(t, err, apperr.ErrInvalid)
	_, _, err = e.Clocks.AdvanceClock(ctx, context.Background(), clock.ID, utc("2030-04-01T00:00:01Z"))
	assert.ErrorIs(t, err, apperr.ErrInvalid, "more than three years")
	advance(t, e, clock.ID, "2027-05-01T00:00:00Z")
	assert.Len(t, e.Stripe.PIs(), 4)
}

func TestTestClockAdvanceIsOneAtATime(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	clock, _ := subscribeOnClock(t, e, "acc-1", 15)
	_, done, err := e.Clocks.AdvanceClock(ctx, context.Background(), clock.ID, utc("2029-12-31T00:00:00Z"))
	require.NoError(t, err)
	// Three years of days take far longer than this: the clock is claimed.
	_, _, err = e.Clocks.AdvanceClock(ctx, context.Background(), clock.ID, utc("2030-01-01T00:00:00Z"))
	assert.ErrorIs(t, err, testclock.ErrBusy)
	assert.ErrorIs(t, e.Clocks.DeleteClock(ctx, clock.ID), testclock.ErrBusy)
	c, _, err := e.Clocks.GetClock(ctx, clock.ID, 1)
	require.NoError(t, err)
	assert.Equal(t, billing.ClockAdvancing, c.Status)
	<-done
	c, _, err = e.Clocks.GetClock(ctx, clock.ID, 1)
	require.NoError(t, err)
	assert.Equal(t, billing.ClockReady, c.Status)
	assert.Len(t, e.Stripe.PIs(), 36, "Jan 15 2027 to Dec 15 2029")
}

func TestTwoTestClocksAdvancedAtOnceDoNotSeeEachOther(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	var subs [2]billing.Subscription
	var clocks [2]billing.Clock
	for i, day := range []int{10, 20} {
		var err error
		clocks[i], err = e.Clocks.CreateClock(ctx, utc("2027-01-01T00:00:00Z"), "")
		require.NoError(t, err)
		in := billingtest.Input("gold", day)
		in.TestClock = clocks[i].ID
		// The same account on both clocks: they share its lock, not its work.
		subs[i], err = e.Service.CreateSubscription(ctx, "acc-shared", in)
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	for i, to := range []string{"2027-03-05T00:00:00Z", "2027-06-01T00:00:00Z"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			assert.Equal(t, billing.ClockReady, advance(t, e, clocks[i].ID, to).Status)
		}()
	}
	wg.Wait()
	assert.Equal(t, []string{"2027-01-10 for 2027-01-10", "2027-02-10 for 2027-02-10"}, completedOn(t, e, subs[0]),
		"clock 0 stopped on Mar 5: its Mar 10 period waits")
	assert.Equal(t, []string{"2027-01-20 for 2027-01-20", "2027-02-20 for 2027-02-20", "2027-03-20 for 2027-03-20",
		"2027-04-20 for 2027-04-20", "2027-05-20 for 2027-05-20"}, completedOn(t, e, subs[1]))
	for i, want := range []int{2, 5} {
		_, runs, err := e.Clocks.GetClock(ctx, clocks[i].ID, 100)
		require.NoError(t, err)
		n := 0
		for _, r := range runs {
			n += r.Charged
		}
		assert.Equal(t, want, n, "clock %d counts its own charges only", i)
	}
}

func TestDeleteTestClockCancelsItsSubscriptions(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	clock, sub := subscribeOnClock(t, e, "acc-1", 5)
	advance(t, e, clock.ID, "2027-01-10T00:00:00Z")
	require.NoError(t, e.Clocks.DeleteClock(ctx, clock.ID))

	_, _, err := e.Clocks.GetClock(ctx, clock.ID, 1)
	assert.ErrorIs(t, err, apperr.ErrNotFound)
	got, err := e.Service.GetSubscription(ctx, "acc-1", sub.SubscriptionID)
	require.NoError(t, err)
	assert.Equal(t, billing.SubCancelled, got.Status)
	h := e.HistoryOf(t, sub)
	last := h[len(h)-1]
	assert.Equal(t, billing.Cancelled, last.Status)
	assert.Equal(t, "test-clock-deleted:"+clock.ID, last.Cause, "the history says why")
	assert.ErrorIs(t, e.Clocks.DeleteClock(ctx, clock.ID), apperr.ErrNotFound)

	in := billingtest.Input("gold", 5)
	in.TestClock, in.SubscriptionID = clock.ID, ""
	_, err = e.Service.CreateSubscription(ctx, "acc-1", in)
	assert.ErrorIs(t, err, apperr.ErrInvalid, "no subscription on a deleted clock")
}

func TestTestClocksRefusedInLivemode(t *testing.T) {
	t.Parallel()
	cfg := billingtest.TestConfig()
	cfg.Livemode = true
	e := billingtest.NewEnv(t, billingtest.Options{Config: cfg})
	_, err := e.Clocks.CreateClock(ctx, utc("2027-01-01T00:00:00Z"), "")
	assert.ErrorIs(t, err, billing.ErrLivemode)
	in := billingtest.Input("gold", 5)
	in.TestClock = "clock_123"
	_, err = e.Service.CreateSubscription(ctx, "acc-1", in)
	assert.ErrorIs(t, err, billing.ErrLivemode)
	_, _, err = e.Clocks.AdvanceClock(ctx, context.Background(), "clock_123", utc("2027-02-01T00:00:00Z"))
	assert.ErrorIs(t, err, billing.ErrLivemode)
	assert.ErrorIs(t, e.Clocks.DeleteClock(ctx, "clock_123"), billing.ErrLivemode)
	page, err := e.Service.ListSubscriptions(ctx, "acc-1", 10, "")
	require.NoError(t, err)
	assert.Empty(t, page.Items, "nothing created")
}

func TestTestClockPauseAndResumeUseTheClocksToday(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{}) // real time: 2024
	clock, sub := subscribeOnClock(t, e, "acc-1", 10)
	advance(t, e, clock.ID, "2027-01-15T00:00:00Z")

	// Paused on the clock's Jan 15: the next period (Feb 10) is skipped.
	_, err := e.Update("acc-1", sub.SubscriptionID, billing.Change{Action: "pause", Months: 1})
	require.NoError(t, err)
	advance(t, e, clock.ID, "2027-02-20T00:00:00Z")
	got, err := e.Service.GetSubscription(ctx, "acc-1", sub.SubscriptionID)
	require.NoError(t, err)
	assert.Equal(t, billing.SubActive, got.Status, "the pause ended after its one period")
	assert.Equal(t, "2027-03-10", got.NextPaymentDate.String())

	// Paused again for two months, resumed early on the clock's Mar 1: Mar 10
	// is charged after all, announced 7 days before.
	_, err = e.Update("acc-1", sub.SubscriptionID, billing.Change{Action: "pause", Months: 2})
	require.NoError(t, err)
	advance(t, e, clock.ID, "2027-03-01T00:00:00Z")
	_, err = e.Update("acc-1", sub.SubscriptionID, billing.Change{Action: "resume"})
	require.NoError(t, err)
	advance(t, e, clock.ID, "2027-04-01T00:00:00Z")

	assert.Equal(t, []string{"2027-01-10 for 2027-01-10", "2027-03-10 for 2027-03-10"}, completedOn(t, e, sub))
	assert.Equal(t, []string{"2027-02-10"}, periodsWith(t, e, sub, billing.PausedSkipped))
	assert.Equal(t, []string{"2027-01-03 for 2027-01-10", "2027-03-03 for 2027-03-10"}, e.Reminders(sub.SubscriptionID))
}

// periodsWith lists the scheduled dates of sub's periods in status.
func periodsWith(t *testing.T, e *billingtest.Env, sub billing.Subscription, status billing.Status) []string {
	t.Helper()
	periods, err := e.Store.ListPeriods(ctx, sub.AccountID, sub.SubscriptionID)
	require.NoError(t, err)
	var out []string
	for _, p := range periods {
		if p.Status == status {
			out = append(out, p.BillingDate.String())
		}
	}
	return out
}

// docs/design.md §4: a test clock's subscriptions take "today" from the clock, and
// everything else, Stripe calls included, is exactly as for any
// subscription; §8: an unknown outcome is resolved by asking Stripe for the
// PaymentIntent made with its idempotency key or metadata. Stripe keeps keys
// and dates PaymentIntents on its own (real) time, not on the clock's: an
// attempt whose answer was lost on the clock's Jan 10, 2027 (real time:
// 2024) is found again when the next advance reruns that day, with one
// charge, and the clock goes on.
func TestTestClockUnknownOutcomeIsResolvedOnStripesTime(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})            // real time: 2024
	e.Stripe.Decide = billingtest.Behaviors(stripetest.Acted500) // Stripe charged, answered 500, saved the 500
	clock, sub := subscribeOnClock(t, e, "acc-1", 10)

	c := advance(t, e, clock.ID, "2027-01-12T00:00:00Z")
	require.Equal(t, billing.ClockFailed, c.Status, "the day of the lost answer cannot finish")
	require.Len(t, e.Stripe.PIs(), 1)
	e.Clock.Advance(time.Minute) // the operator advances again a minute later
	c = advance(t, e, clock.ID, "2027-01-12T00:00:00Z")
	assert.Equal(t, billing.ClockReady, c.Status, "%s", c.Error)
	p := e.Period(t, sub, "2027-01-10")
	assert.Equal(t, billing.Completed, p.Status)
	assert.Equal(t, e.Stripe.PIs()[0].ID, p.TransactionID, "the PaymentIntent Stripe made")
	assert.Len(t, e.Stripe.PIs(), 1, "no second charge")
}

// A test clock whose advance stopped says why, not only its
// counters: a charge Stripe answered with a 500 leaves its outcome unknown
// and the clock's error names that charge and Stripe's answer.
func TestTestClockErrorSaysWhy(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior { return stripetest.Fail500 }
	clock, sub := subscribeOnClock(t, e, "acc-clock-why", 15)
	c := advance(t, e, clock.ID, "2027-01-20T00:00:00Z")
	assert.NotEqual(t, billing.ClockReady, c.Status)
	assert.Contains(t, c.Error, "charge of "+sub.SubscriptionID+" 2027-01-15: outcome unknown: create payment intent", "the cause")
	assert.Contains(t, c.Error, "unknown=1", "and the counters")
}

var (
	ctx = context.Background()
	d   = dates.MustParse
)
