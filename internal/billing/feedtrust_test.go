package billing_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// The feed-trust hole: any connected account can create a
// PaymentIntent carrying another period's billing_* metadata. Such an event
// moves no period, writes no receipt, leaves the subscription as it was, and
// is logged (WARN, ids only) and counted.
func TestFeedRefusesPaymentIntentsTheServiceDidNotCreate(t *testing.T) {
	t.Parallel()
	logs := &testenv.Logs{}
	obs := newObserver()
	e := billingtest.NewEnv(t, billingtest.Options{Observer: obs,
		Log: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	// One period charged (ACH, processing: ACHSENT with its PaymentIntent
	// recorded), the next SCHEDULED with nothing on record.
	e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior { return stripetest.Process }
	collect(t, e, "2024-01-10")
	recorded := e.Stripe.PIs()[0]
	require.Equal(t, billing.ACHSent, period(t, e, sub, "2024-01-10").Status)
	e.Clock.SetDate(d("2024-01-12"))

	meta := func(date string) map[string]string {
		return map[string]string{billing.MetaAccount: "acc-1", billing.MetaSubscription: sub.SubscriptionID,
			billing.MetaDate: date, billing.MetaSKU: "gold"}
	}
	forged := func(id, account string, amount int64, currency, date string) stripetest.PI {
		return stripetest.PI{ID: id, Account: account, Customer: "cus_test", Amount: amount, Currency: currency,
			Status: "succeeded", Metadata: meta(date), Created: e.Clock.Now()}
	}
	tests := []struct {
		name   string
		pi     stripetest.PI
		reason string
	}{
		{"wrong account, on the charged period", forged("pi_evil_acct", "acct_evil", 1999, "usd", "2024-01-10"), "account"},
		{"wrong account, on the scheduled period", forged("pi_evil_acct2", "acct_evil", 1999, "usd", "2024-02-10"), "account"},
		{"platform instead of the connected account", forged("pi_evil_platform", "", 1999, "usd", "2024-02-10"), "account"},
		{"one cent", forged("pi_evil_cent", "acct_test", 1, "usd", "2024-02-10"), "amount"},
		{"wrong currency", forged("pi_evil_eur", "acct_test", 1999, "eur", "2024-02-10"), "currency"},
		{"unknown PaymentIntent id, period scheduled", forged("pi_evil_unknown", "acct_test", 1999, "usd", "2024-02-10"), "payment_intent"},
		{"unknown PaymentIntent id, period charged", forged("pi_evil_unknown2", "acct_test", 1999, "usd", "2024-01-10"), "payment_intent"},
		{"no such period", forged("pi_evil_noperiod", "acct_test", 1999, "usd", "2024-01-11"), "period"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			beforeSub, err := e.Service.GetSubscription(ctx, "acc-1", sub.SubscriptionID)
			require.NoError(t, err)
			before, err := e.Store.ListPeriods(ctx, "acc-1", sub.SubscriptionID)
			require.NoError(t, err)
			hist := len(history(t, e, sub))
			refusedBefore := obs.refused[tc.reason]

			for _, typ := range []string{"payment_intent.succeeded", "payment_intent.payment_failed", "payment_intent.processing"} {
				ev, err := stripeevent.Parse(e.Stripe.Event(tc.pi, typ, e.Clock.Now()))
				require.NoError(t, err)
				msg, ok, err := billing.FeedFromEvent(ev)
				require.NoError(t, err)
				require.True(t, ok)
				require.NoError(t, e.Service.ApplyFeed(ctx, msg), typ)
			}

			after, err := e.Store.ListPeriods(ctx, "acc-1", sub.SubscriptionID)
			require.NoError(t, err)
			assert.Equal(t, before, after, "no period moved")
			afterSub, err := e.Service.GetSubscription(ctx, "acc-1", sub.SubscriptionID)
			require.NoError(t, err)
			assert.Equal(t, beforeSub, afterSub, "subscription unchanged")
			assert.Empty(t, receiptsOf(t, e, "acc-1"), "no receipt")
			assert.Len(t, history(t, e, sub), hist, "no history entry")
			assert.Equal(t, refusedBefore+3, obs.refused[tc.reason], "counted, by reason")
			assert.Contains(t, logs.String(), tc.pi.ID, "logged with the ids")
		})
	}
	assert.Contains(t, logs.String(), `"level":"WARN"`)
	assert.NotContains(t, logs.String(), "secret")

	t.Run("the recorded PaymentIntent still settles its period", func(t *testing.T) {
		settled, err := e.Stripe.Settle(recorded.ID, true)
		require.NoError(t, err)
		require.NoError(t, feed(t, e, settled, "payment_intent.succeeded"))
		assert.Equal(t, billing.Completed, period(t, e, sub, "2024-01-10").Status)
		assert.Len(t, receiptsOf(t, e, "acc-1"), 1)
		assert.False(t, strings.Contains(logs.String(), recorded.ID+`","reason`), "the real one was not refused")
	})
}

// A period charged on the platform's own account (no stripe_account) is
// settled by the platform's events (no account on the event), and refuses
// the same PaymentIntent shape coming from a connected account.
func TestFeedTrustOnThePlatformAccount(t *testing.T) {
	t.Parallel()
	obs := newObserver()
	e := billingtest.NewEnv(t, billingtest.Options{Observer: obs})
	in := billingtest.Input("gold", 10)
	in.StripeAccount = ""
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", in)
	require.NoError(t, err)
	e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior { return stripetest.Process }
	collect(t, e, "2024-01-10")
	pi := e.Stripe.PIs()[0]
	require.False(t, pi.AccountHeader)
	settled, err := e.Stripe.Settle(pi.ID, true)
	require.NoError(t, err)

	evil := settled
	evil.Account = "acct_evil"
	require.NoError(t, feed(t, e, evil, "payment_intent.succeeded"))
	assert.Equal(t, billing.ACHSent, period(t, e, sub, "2024-01-10").Status)
	assert.Equal(t, 1, obs.refused["account"])

	require.NoError(t, feed(t, e, settled, "payment_intent.succeeded"))
	assert.Equal(t, billing.Completed, period(t, e, sub, "2024-01-10").Status)
}

// Feed messages enqueued before they carried the account, amount and
// currency are checked against the PaymentIntent read from Stripe on the
// period's account.
func TestFeedTrustChecksOlderMessagesAgainstStripe(t *testing.T) {
	t.Parallel()
	obs := newObserver()
	e := billingtest.NewEnv(t, billingtest.Options{Observer: obs})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	e.Stripe.Decide = func(p stripetest.PI) stripetest.Behavior { return stripetest.Process }
	collect(t, e, "2024-01-10")
	recorded := e.Stripe.PIs()[0]
	_, err = e.Stripe.Settle(recorded.ID, true)
	require.NoError(t, err)

	legacy := func(pi string) billing.FeedMessage {
		return billing.FeedMessage{EventID: "evt_old_" + pi, Type: "payment_intent.succeeded", Created: e.Clock.Now().Unix(),
			PaymentIntent: pi, Account: "acc-1", Subscription: sub.SubscriptionID, BillingDate: "2024-01-10"}
	}
	// Another account's PaymentIntent does not exist on the period's account.
	require.NoError(t, e.Service.ApplyFeed(ctx, legacy("pi_elsewhere")))
	assert.Equal(t, billing.ACHSent, period(t, e, sub, "2024-01-10").Status)
	assert.Equal(t, 1, obs.refused["account"])

	require.NoError(t, e.Service.ApplyFeed(ctx, legacy(recorded.ID)))
	assert.Equal(t, billing.Completed, period(t, e, sub, "2024-01-10").Status)
}
