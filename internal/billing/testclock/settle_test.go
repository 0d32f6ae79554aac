package testclock_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/testclock"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// bankSettler stands for Stripe's side of a bank debit: delay (wall time)
// after a PaymentIntent starts processing it settles it as its test payment
// method says and delivers the webhook to the billing feed, as the service's
// webhook and feed would (retried while the account is locked, as the
// feed's queue retries).
type bankSettler struct {
	t     *testing.T
	e     *billingtest.Env
	delay time.Duration
	// onClock, when set, replaces the delay: a debit settles once this
	// clock has reached its settlement day, four weekdays after its
	// billing date (as a Stripe test clock would settle it). A wall-clock
	// delay races the clock: on a loaded machine the clock takes longer
	// than the delay to get there, and the debit settles days early.
	onClock string

	mu      sync.Mutex
	seen    map[string]time.Time // processing PaymentIntent -> when first seen
	settled []string
}

func startSettler(t *testing.T, e *billingtest.Env, delay time.Duration) *bankSettler {
	return startSettlerOn(t, e, delay, "")
}

// startSettlerOnClock settles each debit once clock reached its settlement
// day (bankSettler.onClock).
func startSettlerOnClock(t *testing.T, e *billingtest.Env, clock string) *bankSettler {
	return startSettlerOn(t, e, 0, clock)
}

// fourWeekdaysAfter is the settlement day of a debit made on d, computed
// here on its own (weekdays only), not with the code under test ("~" for a
// bad date, after every date: never settled).
func fourWeekdaysAfter(d string) string {
	t, err := time.Parse("2006-01-02", d)
	if err != nil {
		return "~"
	}
	for n := 0; n < 4; {
		t = t.AddDate(0, 0, 1)
		if t.Weekday() != time.Saturday && t.Weekday() != time.Sunday {
			n++
		}
	}
	return t.Format("2006-01-02")
}

func startSettlerOn(t *testing.T, e *billingtest.Env, delay time.Duration, clock string) *bankSettler {
	t.Helper()
	s := &bankSettler{t: t, e: e, delay: delay, onClock: clock, seen: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			s.tick(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return s
}

func (s *bankSettler) tick(ctx context.Context) {
	for _, pi := range s.e.Stripe.PIs() {
		if pi.Status != "processing" {
			continue
		}
		s.mu.Lock()
		first, ok := s.seen[pi.ID]
		if !ok {
			s.seen[pi.ID] = time.Now()
		}
		s.mu.Unlock()
		if s.onClock != "" {
			c, _, err := s.e.Clocks.GetClock(ctx, s.onClock, 1)
			if err != nil || c.ReachedTime.UTC().Format("2006-01-02") < fourWeekdaysAfter(pi.Metadata[billing.MetaDate]) {
				continue
			}
		} else if !ok || time.Since(first) < s.delay {
			continue
		}
		outcome := stripetest.TestPaymentMethod(pi.PaymentMethod)
		p, err := s.e.Stripe.Settle(pi.ID, outcome.SettlesOK)
		if err != nil {
			s.t.Errorf("settle %s: %v", pi.ID, err)
			return
		}
		typ := "payment_intent.succeeded"
		if !outcome.SettlesOK {
			typ = "payment_intent.payment_failed"
		}
		// Stripe dates its event on its own (real) time.
		ev, err := stripeevent.Parse(s.e.Stripe.Event(p, typ, s.e.Clock.Now()))
		if err != nil {
			s.t.Errorf("event of %s: %v", pi.ID, err)
			return
		}
		msg, ok, err := billing.FeedFromEvent(ev)
		if err != nil || !ok {
			s.t.Errorf("feed message of %s: %v %v", pi.ID, ok, err)
			return
		}
		for ctx.Err() == nil {
			if err := s.e.Service.ApplyFeed(ctx, msg); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond) // locked by the clock's jobs: the queue retries
		}
		s.mu.Lock()
		s.settled = append(s.settled, pi.ID)
		s.mu.Unlock()
	}
}

// onClockDates is "<clock date of the entry> for <period>" of sub's history
// entries in status (entries are written at the clock's time).
func onClockDates(t *testing.T, e *billingtest.Env, sub billing.Subscription, status billing.Status) []string {
	t.Helper()
	var out []string
	for _, h := range e.HistoryOf(t, sub) {
		if h.Status == status {
			out = append(out, dates.Of(h.LastRunDate.UTC()).String()+" for "+h.BillingDate.String())
		}
	}
	sort.Strings(out)
	return out
}

// receiptDates is "<processed date> for <period>" of sub's receipts.
func receiptDates(t *testing.T, e *billingtest.Env, sub billing.Subscription) []string {
	t.Helper()
	page, err := e.Service.ListReceipts(ctx, sub.AccountID, 100, "")
	require.NoError(t, err)
	var out []string
	for _, r := range page.Items {
		if r.SubscriptionID == sub.SubscriptionID {
			out = append(out, r.ProcessedDate.String()+" for "+r.BillingDate.String())
		}
	}
	sort.Strings(out)
	return out
}

func bankDebitOnClock(t *testing.T, e *billingtest.Env, account string, day int) (billing.Clock, billing.Subscription) {
	t.Helper()
	e.Stripe.Decide = func(p stripetest.PI) stripetest.Behavior {
		return stripetest.TestPaymentMethod(p.PaymentMethod).Behavior
	}
	clock, err := e.Clocks.CreateClock(ctx, utc("2027-01-01T00:00:00Z"), "bank debit")
	require.NoError(t, err)
	in := billingtest.Input("bronze", day)
	in.TestClock, in.PaymentMethod = clock.ID, "pm_usBankAccount"
	sub, err := e.Service.CreateSubscription(ctx, account, in)
	require.NoError(t, err)
	return clock, sub
}

func runTotals(t *testing.T, e *billingtest.Env, clock string) (settled, unsettled int) {
	t.Helper()
	_, runs, err := e.Clocks.GetClock(ctx, clock, 100)
	require.NoError(t, err)
	for _, r := range runs {
		settled += r.DebitsSettled
		unsettled += r.DebitsUnsettled
	}
	return settled, unsettled
}

// docs/design.md §4: a clock's subscriptions take "today" from the clock for
// every decision, and webhooks apply as for any subscription. A bank debit
// submitted on the clock's Jan 15 settles (Stripe: up to 4 business days)
// while the clock is on its settlement day, Thursday Jan 21, not weeks of
// clock time later when Stripe's webhook happens to arrive in wall time.
// Stripe here settles only once the clock reached that day, so without
// waiting the clock would race ahead of it.
func TestBankDebitOnAClockSettlesInTheClocksTime(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{Clocks: testclock.Config{SettleWait: 30 * time.Second}})
	clock, sub := bankDebitOnClock(t, e, "acc-ach-clock", 15)
	startSettlerOnClock(t, e, clock.ID)

	c := advance(t, e, clock.ID, "2027-04-01T00:00:00Z")
	require.Equal(t, billing.ClockReady, c.Status, c.Error)

	assert.Equal(t, []string{"2027-01-15 for 2027-01-15", "2027-02-15 for 2027-02-15", "2027-03-15 for 2027-03-15"},
		onClockDates(t, e, sub, billing.ACHSent), "submitted on the due date")
	// Jan 15 2027 is a Friday: four business days later is Thursday Jan 21;
	// Feb 15 and Mar 15 are Mondays: Fridays Feb 19 and Mar 19.
	want := []string{"2027-01-21 for 2027-01-15", "2027-02-19 for 2027-02-15", "2027-03-19 for 2027-03-15"}
	assert.Equal(t, want, onClockDates(t, e, sub, billing.Completed), "settled on the clock's settlement day")
	assert.Equal(t, want, receiptDates(t, e, sub), "each receipt dated in its own month")
	settled, unsettled := runTotals(t, e, clock.ID)
	assert.Equal(t, 3, settled, "the runs say which days waited for a settlement")
	assert.Zero(t, unsettled)
}

// When Stripe's outcome does not come within the wait, the advance goes on
// and its run says so; nothing is made up: the debit stays ACHSENT until
// Stripe's webhook comes, which then applies on the clock's date of that
// moment, as for any late webhook.
func TestBankDebitOnAClockNotSettledInTimeIsReported(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{Clocks: testclock.Config{SettleWait: 300 * time.Millisecond}})
	clock, sub := bankDebitOnClock(t, e, "acc-ach-late", 15)

	began := time.Now()
	c := advance(t, e, clock.ID, "2027-02-01T00:00:00Z")
	require.Equal(t, billing.ClockReady, c.Status, c.Error)
	assert.GreaterOrEqual(t, time.Since(began), 300*time.Millisecond, "it waited on the settlement day")
	assert.Equal(t, billing.ACHSent, e.Period(t, sub, "2027-01-15").Status, "no outcome is made up")
	settled, unsettled := runTotals(t, e, clock.ID)
	assert.Zero(t, settled)
	assert.Equal(t, 1, unsettled, "the run of Jan 21 says its debit did not settle in time")
	_, runs, err := e.Clocks.GetClock(ctx, clock.ID, 100)
	require.NoError(t, err)
	var onDay []string
	for _, r := range runs {
		if r.DebitsUnsettled > 0 {
			onDay = append(onDay, dates.Of(r.Time).String())
		}
	}
	assert.Equal(t, []string{"2027-01-21"}, onDay)

	// Stripe's webhook comes later: it applies on the clock's date then.
	s := startSettler(t, e, 0)
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.settled) == 1
	}, 30*time.Second, 20*time.Millisecond)
	assert.Equal(t, []string{"2027-02-01 for 2027-01-15"}, onClockDates(t, e, sub, billing.Completed))
}
