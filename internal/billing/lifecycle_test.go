package billing_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/store"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

func feed(t *testing.T, e *billingtest.Env, pi stripetest.PI, typ string) error {
	t.Helper()
	ev, err := stripeevent.Parse(e.Stripe.Event(pi, typ, e.Clock.Now()))
	require.NoError(t, err)
	msg, ok, err := billing.FeedFromEvent(ev)
	require.NoError(t, err)
	require.True(t, ok, "a billing event")
	return e.Service.ApplyFeed(ctx, msg)
}

func TestPauseSkipsPeriodsAndResumesByItself(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 20))
	require.NoError(t, err)
	collect(t, e, "2024-01-20")

	e.Clock.SetDate(d("2024-01-25"))
	sub, err = e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{Action: "pause", Months: 2})
	require.NoError(t, err)
	assert.Equal(t, billing.SubPaused, sub.Status)
	assert.Equal(t, "2024-04-20", sub.NextPaymentDate.String(), "Feb and Mar are skipped")
	pk, sk := subKeys(sub)
	shard := store.Shard("acc-1", e.Store.Shards())
	assert.Equal(t, []string{store.Partition(d("2024-02-20"), shard)}, inIndex(t, e, dynamo.BillingPaymentsIndex, pk, sk),
		"a paused subscription waits in the payments index for its paused period's date, to skip it")
	assert.Equal(t, []string{store.Partition(d("2024-04-13"), shard)}, inIndex(t, e, dynamo.BillingRemindersIndex, pk, sk),
		"the first period after the pause is announced as usual")
	assert.Equal(t, billing.Paused, period(t, e, sub, "2024-02-20").Status)

	for day := d("2024-01-26"); !day.After(d("2024-04-21")); day = day.AddDays(1) {
		remind(t, e, day.String())
		collect(t, e, day.String())
	}
	var charged []string
	for _, pi := range e.Stripe.PIs() {
		charged = append(charged, pi.Metadata["billing_date"])
	}
	assert.Equal(t, []string{"2024-01-20", "2024-04-20"}, charged, "nothing charged while paused")
	assert.Equal(t, billing.PausedSkipped, period(t, e, sub, "2024-02-20").Status)
	assert.Equal(t, billing.PausedSkipped, period(t, e, sub, "2024-03-20").Status)
	assert.Equal(t, billing.Completed, period(t, e, sub, "2024-04-20").Status)
	got, err := e.Service.GetSubscription(ctx, "acc-1", sub.SubscriptionID)
	require.NoError(t, err)
	assert.Equal(t, billing.SubActive, got.Status)
	assert.Equal(t, "2024-05-20", got.NextPaymentDate.String())
	var reminded []string
	for _, a := range e.Notifier.Actions() {
		if a.Type == billing.ActionReminderDue {
			reminded = append(reminded, a.BillingDate)
		}
	}
	// Jan 20 was charged without a reminder run before it: the collection
	// announced it first (one reminder per charged period, docs/design.md §8).
	assert.Equal(t, []string{"2024-01-20", "2024-04-20"}, reminded, "the first post-pause payment is announced")
	assert.Equal(t, []billing.Status{billing.Scheduled, billing.Paused, billing.PausedSkipped}, statuses(history(t, e, sub), "2024-02-20"))
}

func TestManualResumeAndCancel(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 5))
	require.NoError(t, err)
	e.Clock.SetDate(d("2024-01-02"))
	_, err = e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{Action: "pause", Months: 3})
	require.NoError(t, err)

	t.Run("resume before the first paused period reschedules it", func(t *testing.T) {
		e.Clock.SetDate(d("2024-01-03"))
		got, err := e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{Action: "resume"})
		require.NoError(t, err)
		assert.Equal(t, billing.SubActive, got.Status)
		assert.Equal(t, "2024-01-05", got.NextPaymentDate.String())
		assert.Equal(t, billing.Scheduled, period(t, e, sub, "2024-01-05").Status)
		for _, m := range []string{"2024-02-05", "2024-03-05"} {
			assert.Equal(t, billing.Scheduled, period(t, e, sub, m).Status, "paused periods in the future are scheduled again")
		}
	})
	t.Run("resume mid-pause skips what passed", func(t *testing.T) {
		e.Clock.SetDate(d("2024-01-04"))
		_, err := e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{Action: "pause", Months: 3})
		require.NoError(t, err)
		e.Clock.SetDate(d("2024-02-10"))
		got, err := e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{Action: "resume"})
		require.NoError(t, err)
		assert.Equal(t, "2024-03-05", got.NextPaymentDate.String())
		assert.Equal(t, billing.PausedSkipped, period(t, e, sub, "2024-01-05").Status)
		assert.Equal(t, billing.PausedSkipped, period(t, e, sub, "2024-02-05").Status)
		assert.Equal(t, billing.Scheduled, period(t, e, sub, "2024-03-05").Status)
	})
	t.Run("cancel", func(t *testing.T) {
		got, err := e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{Action: "cancel"})
		require.NoError(t, err)
		assert.Equal(t, billing.SubCancelled, got.Status)
		assert.Equal(t, billing.Cancelled, period(t, e, sub, "2024-03-05").Status)
		pk, sk := subKeys(got)
		assert.Empty(t, inIndex(t, e, dynamo.BillingPaymentsIndex, pk, sk))
		for day := d("2024-03-01"); !day.After(d("2024-04-10")); day = day.AddDays(1) {
			collect(t, e, day.String())
		}
		assert.Empty(t, e.Stripe.PIs(), "nothing charged after cancellation")
		again, err := e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{Action: "cancel"})
		require.NoError(t, err, "cancel is idempotent")
		assert.Equal(t, got.Version, again.Version)
		_, err = e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{Action: "pause", Months: 1})
		assert.ErrorIs(t, err, apperr.ErrInvalid)
	})
}

func TestCancelStopsRetries(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior { return stripetest.Decline }
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	collect(t, e, "2024-01-10")
	_, err = e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{Action: "cancel"})
	require.NoError(t, err)
	collect(t, e, "2024-01-11")
	assert.Len(t, e.Stripe.PIs(), 1)
	assert.Equal(t, billing.Cancelled, period(t, e, sub, "2024-01-10").Status)
	assert.Equal(t, billing.Cancelled, period(t, e, sub, "2024-02-10").Status)
}

func TestWaive(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	got, err := e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{Action: "waive", BillingDate: d("2024-01-10")})
	require.NoError(t, err)
	assert.Equal(t, "2024-02-10", got.NextPaymentDate.String())
	assert.Equal(t, billing.Waived, period(t, e, sub, "2024-01-10").Status)
	collect(t, e, "2024-01-10")
	assert.Empty(t, e.Stripe.PIs())
	_, err = e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{Action: "waive", BillingDate: d("2024-01-10")})
	assert.ErrorIs(t, err, apperr.ErrInvalid, "a terminal period cannot be waived again")
}

func TestChangePaymentDayMovesThePeriod(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 15))
	require.NoError(t, err)
	remind(t, e, "2024-01-08")
	e.Clock.SetDate(d("2024-01-10"))
	day, amount := 31, int64(2500)
	got, err := e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{PaymentDay: &day, Amount: &amount})
	require.NoError(t, err)
	assert.Equal(t, "2024-01-31", got.NextPaymentDate.String())
	assert.Equal(t, "2024-01-24", got.NextReminderDate.String(), "the new date is announced again")
	assert.Equal(t, billing.Cancelled, period(t, e, sub, "2024-01-15").Status, "the replaced period ends CANCELLED")
	moved := period(t, e, sub, "2024-01-31")
	assert.Equal(t, billing.Scheduled, moved.Status)
	assert.Equal(t, int64(2500), moved.Amount)
	pk, sk := subKeys(got)
	assert.Equal(t, []string{store.Partition(d("2024-01-31"), store.Shard("acc-1", e.Store.Shards()))},
		inIndex(t, e, dynamo.BillingPaymentsIndex, pk, sk))
	h := history(t, e, sub)
	require.Len(t, statuses(h, "2024-01-15"), 2)
	assert.Equal(t, "rule-changed-to-2024-01-31", h[1].UpdatedEvent)

	t.Run("a day already passed this month moves to the next term", func(t *testing.T) {
		day := 5
		got, err := e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{PaymentDay: &day})
		require.NoError(t, err)
		assert.Equal(t, "2024-02-05", got.NextPaymentDate.String())
	})
	t.Run("admin billing date", func(t *testing.T) {
		got, err := e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{NextPaymentDate: d("2024-02-07")})
		require.NoError(t, err)
		assert.Equal(t, "2024-02-07", got.NextPaymentDate.String())
		collect(t, e, "2024-02-07")
		got, err = e.Service.GetSubscription(ctx, "acc-1", sub.SubscriptionID)
		require.NoError(t, err)
		assert.Equal(t, "2024-03-05", got.NextPaymentDate.String(), "the rule's day again afterwards")
		// The following period's date, and dates in the past.
		for _, bad := range []string{"2024-04-05", "2024-01-01", "2024-02-06"} {
			_, err = e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{NextPaymentDate: d(bad)})
			assert.ErrorIs(t, err, apperr.ErrInvalid, bad)
		}
	})
}

func TestFridayBilling(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	in := billingtest.Input("gold", 0)
	in.BillingWeek = 5
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", in)
	require.NoError(t, err)
	assert.Equal(t, "2024-01-26", sub.NextPaymentDate.String())
	collect(t, e, "2024-01-26")
	got, err := e.Service.GetSubscription(ctx, "acc-1", sub.SubscriptionID)
	require.NoError(t, err)
	assert.Equal(t, "2024-02-23", got.NextPaymentDate.String(), "February 2024 has four Fridays: the last one")
	assert.Equal(t, time.Friday, got.NextPaymentDate.Weekday())
}

func TestYearlyFromLeapDay(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{Start: time.Date(2024, 2, 20, 10, 0, 0, 0, time.UTC)})
	in := billingtest.Input("annual", 29)
	in.Term = dates.Yearly
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", in)
	require.NoError(t, err)
	assert.Equal(t, "2024-02-29", sub.NextPaymentDate.String())
	collect(t, e, "2024-02-29")
	got, err := e.Service.GetSubscription(ctx, "acc-1", sub.SubscriptionID)
	require.NoError(t, err)
	assert.Equal(t, "2025-02-28", got.NextPaymentDate.String())
	assert.Equal(t, "2025-02-21", got.NextReminderDate.String())
	_, err = e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{Action: "pause", Months: 3})
	assert.ErrorIs(t, err, apperr.ErrInvalid, "yearly pauses in whole years")
}

func TestWebhookFeed(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior { return stripetest.Process }
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	rep := collect(t, e, "2024-01-10")
	assert.Equal(t, 1, rep.Processing)
	assert.Equal(t, billing.ACHSent, period(t, e, sub, "2024-01-10").Status)
	pi := e.Stripe.PIs()[0]

	// A refund before the success it refunds is not applicable yet.
	e.Clock.SetDate(d("2024-01-13"))
	assert.ErrorIs(t, feed(t, e, pi, "charge.refunded"), billing.ErrRetryLater)

	// Processing again (redelivered) changes nothing; the settlement
	// completes the period with a receipt dated on the event.
	require.NoError(t, feed(t, e, pi, "payment_intent.processing"))
	settled, err := e.Stripe.Settle(pi.ID, true)
	require.NoError(t, err)
	for range 2 {
		require.NoError(t, feed(t, e, settled, "payment_intent.succeeded"))
	}
	p := period(t, e, sub, "2024-01-10")
	assert.Equal(t, billing.Completed, p.Status)
	// A change Stripe's feed makes keeps the attempt's own process and
	// names what happened (docs/design.md §8 "Process values").
	assert.Equal(t, billing.ProcInitial, p.Process)
	assert.Equal(t, billing.UpdatedEventACHCompleted, p.UpdatedEvent)
	receipts, err := e.Service.ListReceipts(ctx, "acc-1", 100, "")
	require.NoError(t, err)
	require.Len(t, receipts.Items, 1)
	assert.Equal(t, "2024-01-13", receipts.Items[0].ProcessedDate.String())

	refunded, err := e.Stripe.Refund(pi.ID)
	require.NoError(t, err)
	for range 2 {
		require.NoError(t, feed(t, e, refunded, "charge.refunded"))
	}
	p = period(t, e, sub, "2024-01-10")
	assert.Equal(t, billing.Refunded, p.Status)
	assert.Equal(t, billing.ProcInitial, p.Process)
	assert.Equal(t, billing.UpdatedEventRefunded, p.UpdatedEvent)
	assert.Equal(t, []billing.Status{billing.Scheduled, billing.ACHSent, billing.Completed, billing.Refunded},
		statuses(history(t, e, sub), "2024-01-10"), "one entry per change, however often an event is delivered")

	t.Run("a failed bank debit is retried", func(t *testing.T) {
		collect(t, e, "2024-02-10")
		pi := e.Stripe.PIs()[1]
		failed, err := e.Stripe.Settle(pi.ID, false)
		require.NoError(t, err)
		e.Clock.SetDate(d("2024-02-12"))
		require.NoError(t, feed(t, e, failed, "payment_intent.payment_failed"))
		p := period(t, e, sub, "2024-02-10")
		assert.Equal(t, billing.Error, p.Status)
		assert.Equal(t, "2024-02-13", p.NextAttemptDate.String())
	})
}

func TestWebhookSettlesACrashedAttempt(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior { return stripetest.Lost }
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	rep := collect(t, e, "2024-01-10")
	require.Equal(t, 1, rep.Unknown)
	pi := e.Stripe.PIs()[0]
	require.NoError(t, feed(t, e, pi, "payment_intent.succeeded"))
	p := period(t, e, sub, "2024-01-10")
	assert.Equal(t, billing.Completed, p.Status)
	assert.Empty(t, p.InFlightKey)
	got, err := e.Service.GetSubscription(ctx, "acc-1", sub.SubscriptionID)
	require.NoError(t, err)
	assert.Equal(t, "2024-02-10", got.NextPaymentDate.String(), "the webhook moved the subscription on")
	collect(t, e, "2024-01-10")
	assert.Len(t, e.Stripe.PIs(), 1)
	receipts, err := e.Service.ListReceipts(ctx, "acc-1", 100, "")
	require.NoError(t, err)
	assert.Len(t, receipts.Items, 1)
}

func TestReceiptsExpireFromTheList(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	_, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	for _, day := range []string{"2024-01-10", "2024-02-10", "2024-03-10"} {
		collect(t, e, day)
	}
	page, err := e.Service.ListReceipts(ctx, "acc-1", 2, "")
	require.NoError(t, err)
	require.Len(t, page.Items, 2)
	assert.Equal(t, "2024-03-10", page.Items[0].BillingDate.String(), "newest first")
	require.NotEmpty(t, page.NextCursor)
	page2, err := e.Service.ListReceipts(ctx, "acc-1", 2, page.NextCursor)
	require.NoError(t, err)
	require.Len(t, page2.Items, 1)
	assert.Empty(t, page2.NextCursor)

	// Six months after the first charge, it has expired (DynamoDB may not
	// have deleted it yet: the reader hides it).
	e.Clock.Set(time.Date(2024, 7, 12, 10, 0, 0, 0, time.UTC))
	page, err = e.Service.ListReceipts(ctx, "acc-1", 100, "")
	require.NoError(t, err)
	require.Len(t, page.Items, 2)
	assert.Equal(t, "2024-02-10", page.Items[1].BillingDate.String())

	_, err = e.Service.ListReceipts(ctx, "acc-1", 100, "garbage")
	assert.ErrorIs(t, err, apperr.ErrInvalid)
	_, err = e.Service.ListReceipts(ctx, "acc-2", 2, page.NextCursor+"x")
	assert.ErrorIs(t, err, apperr.ErrInvalid)
}

func TestPaymentMethodChangeReachesRetries(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	e.Stripe.Decide = func(p stripetest.PI) stripetest.Behavior {
		if p.PaymentMethod == "pm_new" {
			return stripetest.Succeed
		}
		return stripetest.Decline
	}
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	collect(t, e, "2024-01-10")
	pm := "pm_new"
	_, err = e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{PaymentMethod: &pm})
	require.NoError(t, err)
	collect(t, e, "2024-01-11")
	assert.Equal(t, billing.Completed, period(t, e, sub, "2024-01-10").Status)
	assert.Equal(t, "pm_new", period(t, e, sub, "2024-02-10").PaymentDetails.PaymentMethod)
	bad := "card_x"
	_, err = e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{PaymentMethod: &bad})
	assert.ErrorIs(t, err, apperr.ErrInvalid)
}

// docs/design.md §8: an amount or payment method change "applies to every period
// not yet charged … and never to a charge in flight". A bank debit in
// flight (ACHSENT) when the change is made keeps its amount; once it fails
// the period is not charged and nothing is in flight, so its retries are
// new charges and take the new amount and payment method.
func TestChangeDuringABankDebitReachesItsRetries(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	e.Stripe.Decide = func(p stripetest.PI) stripetest.Behavior {
		if p.PaymentMethod == "pm_new" {
			return stripetest.Succeed
		}
		return stripetest.Process
	}
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	collect(t, e, "2024-01-10")
	require.Equal(t, billing.ACHSent, period(t, e, sub, "2024-01-10").Status)
	debit := e.Stripe.PIs()[0]

	e.Clock.SetDate(d("2024-01-10"))
	amount, pm := int64(2500), "pm_new"
	_, err = e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{Amount: &amount, PaymentMethod: &pm})
	require.NoError(t, err)
	assert.Equal(t, int64(1999), period(t, e, sub, "2024-01-10").Amount, "the debit in flight keeps its amount")

	failed, err := e.Stripe.Settle(debit.ID, false)
	require.NoError(t, err)
	e.Clock.SetDate(d("2024-01-11"))
	require.NoError(t, feed(t, e, failed, "payment_intent.payment_failed"), "the failure of the debit in flight is its own")
	require.Equal(t, billing.Error, period(t, e, sub, "2024-01-10").Status)

	collect(t, e, "2024-01-13") // its next retry day
	pis := e.Stripe.PIs()
	require.Len(t, pis, 2)
	assert.Equal(t, int64(2500), pis[1].Amount, "the retry is charged the new amount")
	assert.Equal(t, "pm_new", pis[1].PaymentMethod, "on the new payment method")
	p := period(t, e, sub, "2024-01-10")
	assert.Equal(t, billing.Completed, p.Status)
	receipts, err := e.Service.ListReceipts(ctx, "acc-1", 100, "")
	require.NoError(t, err)
	require.Len(t, receipts.Items, 1)
	assert.Equal(t, int64(2500), receipts.Items[0].Amount)
}
