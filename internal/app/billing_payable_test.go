package app_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// docs/design.md §8 "One successful charge per period, also when the customer pays
// an old PaymentIntent", end to end: the real program on
// DynamoDB Local and Postgres, a subscription on a test clock advanced
// through the API, the fake Stripe at the HTTP level, the customer
// confirming an old PaymentIntent over HTTP as Stripe.js would, and the
// webhooks delivered through the one handler and the billing feed.
type payableEnv struct {
	t       *testing.T
	a       *apptest.App
	base    string
	clock   string
	sub     string
	decline atomic.Bool
}

const payableAccount = "acct_payable"

func startPayable(t *testing.T) *payableEnv {
	t.Helper()
	e := &payableEnv{t: t, a: startApp(t, nil, nil)}
	e.base = e.a.Admin.URL() + "/internal/v1"
	e.a.Fake.Decide = func(stripetest.PI) stripetest.Behavior {
		if e.decline.Load() {
			return stripetest.Decline
		}
		return stripetest.Succeed
	}
	status, clock := send(t, http.MethodPost, e.base+"/test_clocks", map[string]any{"frozen_time": "2024-01-09T12:00:00Z"})
	require.Equal(t, http.StatusCreated, status, clock)
	e.clock = clock["id"].(string)
	status, sub := send(t, http.MethodPost, e.base+"/accounts/acc-pay/subscriptions", map[string]any{
		"sku": "gold", "email": "payer@example.com", "payment_day": 10, "amount": 700, "currency": "usd",
		"term": "MONTHLY", "customer": "cus_payable", "payment_method": "pm_old", "stripe_account": payableAccount,
		"test_clock": e.clock})
	require.Equal(t, http.StatusCreated, status, sub)
	require.Equal(t, "2024-01-10", sub["next_payment_date"])
	e.sub = sub["subscription_id"].(string)
	return e
}

// advance moves the test clock to noon UTC of date and waits for its jobs.
func (e *payableEnv) advance(date string) {
	e.t.Helper()
	status, body := send(e.t, http.MethodPost, e.base+"/test_clocks/"+e.clock+"/advance",
		map[string]any{"frozen_time": date + "T12:00:00Z"})
	require.Contains(e.t, []int{http.StatusOK, http.StatusAccepted}, status, body)
	require.Eventually(e.t, func() bool {
		_, c := get(e.t, e.base+"/test_clocks/"+e.clock, token)
		return c["status"] == "ready"
	}, 2*time.Minute, 50*time.Millisecond)
}

func (e *payableEnv) patch(body map[string]any) {
	e.t.Helper()
	status, got := send(e.t, http.MethodPatch, e.base+"/accounts/acc-pay/subscriptions/"+e.sub, body)
	require.Equal(e.t, http.StatusOK, status, got)
}

// pis are the PaymentIntents of the period of date, in creation order.
func (e *payableEnv) pis(date string) []stripetest.PI {
	var out []stripetest.PI
	for _, p := range e.a.Fake.PIs() {
		if p.Metadata[billing.MetaSubscription] == e.sub && p.Metadata[billing.MetaDate] == date {
			out = append(out, p)
		}
	}
	return out
}

// kept are the PaymentIntents of the period whose money the customer kept:
// succeeded and not refunded. One successful charge per period.
func (e *payableEnv) kept(date string) []string {
	var out []string
	for _, p := range e.pis(date) {
		if p.Status == "succeeded" && !p.Refunded {
			out = append(out, fmt.Sprintf("%s %d", p.ID, p.Amount))
		}
	}
	return out
}

// pay confirms PaymentIntent pi as its customer would; when Stripe accepts,
// its webhook is delivered (twice, as Stripe may) and applied.
func (e *payableEnv) pay(pi string) int {
	e.t.Helper()
	status, body, err := e.a.Fake.ConfirmAsCustomer(payableAccount, pi)
	require.NoError(e.t, err)
	if status == http.StatusOK {
		p, ok := e.a.Fake.Get(pi)
		require.True(e.t, ok)
		e.deliver(e.a.Fake.Event(p, "payment_intent.succeeded", time.Now()))
	} else {
		assert.Contains(e.t, body, "payment_intent_unexpected_state")
	}
	return status
}

// deliver posts a webhook twice and waits until the billing feed applied it.
func (e *payableEnv) deliver(payload []byte) {
	e.t.Helper()
	ctx := context.Background()
	feed := func() (messages, delivered int) {
		require.NoError(e.t, e.a.Pool.QueryRow(ctx, `SELECT count(*), count(delivered_at) FROM outbox WHERE topic = $1`,
			billing.FeedTopic).Scan(&messages, &delivered))
		return messages, delivered
	}
	for range 2 {
		status, body := e.a.Deliver(e.t, payload)
		require.Equal(e.t, http.StatusOK, status, string(body))
	}
	require.Eventually(e.t, func() bool { n, done := feed(); return done == n }, 30*time.Second, 20*time.Millisecond,
		"the billing feed applies the message")
}

// history is "STATUS updated_event" of the period's history entries.
func (e *payableEnv) history(date string) []string {
	e.t.Helper()
	status, list := get(e.t, e.base+"/accounts/acc-pay/subscriptions/"+e.sub+"/history?limit=1000", token)
	require.Equal(e.t, http.StatusOK, status, list)
	var out []string
	for _, it := range list["data"].([]any) {
		h := it.(map[string]any)
		if h["billing_date"] == date {
			out = append(out, fmt.Sprintf("%s %v", h["billing_status"], h["updated_event"]))
		}
	}
	return out
}

// receipts is "payment_intent amount" of the period's receipts, read as of
// the test clock's date (the API lists the receipts of the last 13 months
// of real time, and the clock is in 2024).
func (e *payableEnv) receipts(date string) []string {
	e.t.Helper()
	page, err := e.a.Billing.Store().ListReceipts(context.Background(), "acc-pay", time.Date(2024, 2, 1, 0, 0, 0, 0, time.UTC),
		24*time.Hour*400, 1000, "")
	require.NoError(e.t, err)
	var out []string
	for _, r := range page.Items {
		if r.BillingDate.String() == date {
			out = append(out, fmt.Sprintf("%s %d", r.PaymentIntent, r.Amount))
		}
	}
	return out
}

// The first case: declined on its date (A, 700) and on the day-1
// retry (B); the amount becomes 900 and the card pm_card_visa; the customer
// then completes the old PaymentIntents on-session. Before the fix A
// succeeded at 700, its webhook was refused (700 ≠ 900) and the day-3 retry
// charged 900: two successful charges. Now the change cancelled them: the
// customer's confirmation is refused and the retry is the one charge.
func TestCustomerPaysAnOldPaymentIntentAfterAnAmountChange(t *testing.T) {
	e := startPayable(t)
	e.decline.Store(true)
	e.advance("2024-01-10")
	e.advance("2024-01-11")
	pis := e.pis("2024-01-10")
	require.Len(t, pis, 2, "the charge and its day-1 retry")
	a, b := pis[0], pis[1]
	assert.Equal(t, []string{a.ID}, e.a.Fake.Cancels(), "the retry cancelled the declined attempt first")

	e.patch(map[string]any{"amount": 900, "payment_method": "pm_card_visa"})
	assert.Equal(t, []string{a.ID, b.ID}, e.a.Fake.Cancels(), "the change cancelled the period's payable PaymentIntent")
	assert.Equal(t, http.StatusBadRequest, e.pay(a.ID), "A is cancelled: the customer cannot pay it")
	assert.Equal(t, http.StatusBadRequest, e.pay(b.ID), "B is cancelled: the customer cannot pay it")

	e.decline.Store(false)
	e.advance("2024-01-13")
	kept := e.kept("2024-01-10")
	require.Len(t, kept, 1, "one successful charge for the period")
	c := e.pis("2024-01-10")[2]
	assert.Equal(t, []string{c.ID + " 900"}, kept, "the day-3 retry at the new amount")
	assert.Equal(t, "pm_card_visa", c.PaymentMethod)
	assert.Equal(t, []string{c.ID + " 900"}, e.receipts("2024-01-10"))
	assert.Empty(t, e.a.Fake.Refunds())
	assert.Equal(t, "COMPLETED completed", e.history("2024-01-10")[len(e.history("2024-01-10"))-1])
}

// The same, but Stripe does not answer the change's cancel: the customer
// pays B (700) on-session. Its webhook is compared with the attempt that
// created B (700), not the period's amount today (900): the period is
// COMPLETED at 700 with its receipt, and the day-3 retry charges nothing.
// Before the fix the webhook was refused and the retry charged 900.
func TestOldPaymentIntentPaidAfterAnAmountChangeCompletesThePeriod(t *testing.T) {
	e := startPayable(t)
	e.decline.Store(true)
	e.advance("2024-01-10")
	e.advance("2024-01-11")
	b := e.pis("2024-01-10")[1]

	e.a.Fake.Fail(http.MethodPost, "/v1/payment_intents/"+b.ID+"/cancel", http.StatusInternalServerError, "api_error", "", "internal error", -1)
	e.patch(map[string]any{"amount": 900, "payment_method": "pm_card_visa"})
	e.a.Fake.Recover()
	require.Equal(t, http.StatusOK, e.pay(b.ID), "B could not be cancelled: the customer pays it")

	e.decline.Store(false)
	e.advance("2024-01-13")
	assert.Equal(t, []string{b.ID + " 700"}, e.kept("2024-01-10"), "one successful charge: the customer's")
	assert.Len(t, e.pis("2024-01-10"), 2, "no retry was made")
	assert.Equal(t, []string{b.ID + " 700"}, e.receipts("2024-01-10"))
	h := e.history("2024-01-10")
	assert.Equal(t, "COMPLETED completed", h[len(h)-1])
}

// The second case: declined (A), then the day-1 retry succeeds (B);
// the customer completes A afterwards. Before the fix A succeeded too (a
// second charge, flagged duplicate-charge for a person to refund). Now A
// was cancelled before the retry: the customer's confirmation is refused.
func TestCustomerPaysAnOldPaymentIntentAfterASuccessfulRetry(t *testing.T) {
	e := startPayable(t)
	e.decline.Store(true)
	e.advance("2024-01-10")
	e.decline.Store(false)
	e.advance("2024-01-11")
	pis := e.pis("2024-01-10")
	require.Len(t, pis, 2)
	a, b := pis[0], pis[1]
	assert.Equal(t, []string{a.ID}, e.a.Fake.Cancels())
	assert.Equal(t, http.StatusBadRequest, e.pay(a.ID))
	assert.Equal(t, []string{b.ID + " 700"}, e.kept("2024-01-10"), "one successful charge for the period")
	assert.Empty(t, e.a.Fake.Refunds())
}

// A success that still arrives for a period that ended WAIVED or CANCELLED
// (Stripe did not answer the change's cancel, and the customer paid) is
// refunded automatically: once, however often the webhook is delivered
// (and by a second event about the same PaymentIntent), with a history
// entry duplicate-refunded. Before the fix the waived period was collected
// instead (late-success-after-WAIVED) and a cancelled one kept the money.
func TestSuccessForAWaivedOrCancelledPeriodIsRefundedOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change map[string]any
		ended  string
	}{
		{"waived", map[string]any{"action": "waive", "billing_date": "2024-01-10"}, "WAIVED waived"},
		{"cancelled", map[string]any{"action": "cancel"}, "CANCELLED cancelled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startPayable(t)
			e.decline.Store(true)
			e.advance("2024-01-10")
			a := e.pis("2024-01-10")[0]
			e.a.Fake.Fail(http.MethodPost, "/v1/payment_intents/"+a.ID+"/cancel", http.StatusInternalServerError, "api_error", "", "internal error", -1)
			e.patch(tc.change)
			e.a.Fake.Recover()
			require.Equal(t, http.StatusOK, e.pay(a.ID), "A could not be cancelled: the customer pays it")

			refunds := e.a.Fake.Refunds()
			require.Len(t, refunds, 1, "refunded automatically")
			assert.Equal(t, a.ID, refunds[0].PaymentIntent)
			assert.Equal(t, billing.RefundKey(a.ID), refunds[0].IdempotencyKey)
			assert.Empty(t, e.kept("2024-01-10"), "the customer keeps the money")
			assert.Equal(t, []string{tc.ended, tc.ended[:strings.Index(tc.ended, " ")] + " duplicate-refunded"},
				e.history("2024-01-10")[2:], "SCHEDULED, ERROR, then the end and the refund")

			// Redelivered as another event (a replayed Events API page),
			// and the refund's own webhook: nothing more.
			p, _ := e.a.Fake.Get(a.ID)
			e.deliver(e.a.Fake.Event(p, "payment_intent.succeeded", time.Now()))
			e.deliver(e.a.Fake.Event(p, "charge.refunded", time.Now()))
			assert.Len(t, e.a.Fake.Refunds(), 1, "one refund per PaymentIntent")
			assert.Len(t, e.history("2024-01-10"), 4)
			assert.Empty(t, e.receipts("2024-01-10"))
			resp, err := http.Get(e.a.Admin.URL() + "/metrics")
			require.NoError(t, err)
			metrics, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Contains(t, string(metrics), "\nstripe_payments_billing_duplicate_refunds_total 1\n", "counted once")
		})
	}
}
