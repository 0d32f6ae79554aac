package billing_test

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// kept are the period's PaymentIntents whose money the customer kept
// (succeeded, not refunded): one successful charge per period.
func kept(e *billingtest.Env, sub billing.Subscription, date string) []string {
	var out []string
	for _, p := range e.Stripe.PIs() {
		if p.Metadata[billing.MetaSubscription] == sub.SubscriptionID && p.Metadata[billing.MetaDate] == date &&
			p.Status == "succeeded" && !p.Refunded {
			out = append(out, p.ID)
		}
	}
	return out
}

// declinedThenSucceeds: a subscription whose 2024-01-10 charge (A) was
// declined; the fake now lets charges succeed.
func declinedThenSucceeds(t *testing.T, o billingtest.Options) (*billingtest.Env, billing.Subscription, stripetest.PI) {
	t.Helper()
	e := billingtest.NewEnv(t, o)
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	e.Stripe.Decide = billingtest.Behaviors(stripetest.Decline)
	collect(t, e, "2024-01-10")
	require.Equal(t, billing.Error, period(t, e, sub, "2024-01-10").Status)
	return e, sub, e.Stripe.PIs()[0]
}

// The race of docs/design.md §8 "One successful charge per period": the customer
// confirms the declined PaymentIntent A on-session while the day-1 retry
// cancels it. Stripe serialises the two; in both orders the period has one
// successful charge. Confirmation first: the cancel is refused, the service
// reads A (succeeded), records it, and charges nothing. Cancel first: the
// customer's confirmation is refused, and the retry charges.
func TestCustomerConfirmRacesTheServiceCancel(t *testing.T) {
	t.Parallel()
	for _, confirmFirst := range []bool{true, false} {
		name := map[bool]string{true: "customer confirms first", false: "service cancels first"}[confirmFirst]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e, sub, a := declinedThenSucceeds(t, billingtest.Options{})
			var (
				mu            sync.Mutex
				confirmStatus int
				order         []string
			)
			confirm := func() {
				status, _, err := e.Stripe.ConfirmAsCustomer("acct_test", a.ID)
				assert.NoError(t, err)
				mu.Lock()
				confirmStatus = status
				order = append(order, "confirm")
				mu.Unlock()
			}
			e.Stripe.Wrap(func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if !strings.HasSuffix(r.URL.Path, "/cancel") {
						next.ServeHTTP(w, r)
						return
					}
					if confirmFirst {
						confirm() // arrives while the service's cancel is on its way
					}
					mu.Lock()
					order = append(order, "cancel")
					mu.Unlock()
					next.ServeHTTP(w, r)
					if !confirmFirst {
						confirm()
					}
				})
			})
			rep := collect(t, e, "2024-01-11")
			assert.True(t, rep.OK(), "%+v", rep)
			p := period(t, e, sub, "2024-01-10")
			assert.Equal(t, billing.Completed, p.Status)
			require.Len(t, kept(e, sub, "2024-01-10"), 1, "one successful charge for the period")
			got, _ := e.Stripe.Get(a.ID)
			if confirmFirst {
				assert.Equal(t, []string{"confirm", "cancel"}, order)
				assert.Equal(t, http.StatusOK, confirmStatus)
				assert.Equal(t, "succeeded", got.Status)
				assert.Equal(t, a.ID, p.TransactionID, "the customer's payment completes the period")
				assert.Len(t, e.Stripe.PIs(), 1, "no charge was made")
				assert.Equal(t, 1, rep.PaidByCustomer)
				assert.Empty(t, e.Stripe.Cancels())
			} else {
				assert.Equal(t, []string{"cancel", "confirm"}, order)
				assert.Equal(t, http.StatusBadRequest, confirmStatus)
				assert.Equal(t, "canceled", got.Status)
				require.Len(t, e.Stripe.PIs(), 2, "the retry charged")
				assert.Equal(t, e.Stripe.PIs()[1].ID, p.TransactionID)
				assert.Equal(t, []string{a.ID}, e.Stripe.Cancels())
			}
			var cancels int
			for _, r := range e.Stripe.Requests() {
				if strings.HasSuffix(r.Path, "/cancel") {
					cancels++
					assert.Equal(t, billing.CancelKey(a.ID), r.IdempotencyKey)
					assert.Equal(t, "acct_test", r.StripeAccount)
				}
			}
			assert.Equal(t, 1, cancels)
			if confirmFirst {
				// Its webhook, later: nothing more.
				require.NoError(t, feed(t, e, got, "payment_intent.succeeded"))
				require.Len(t, kept(e, sub, "2024-01-10"), 1)
			}
			assert.Empty(t, e.Stripe.Refunds())
		})
	}
}

// A cancel Stripe does not answer before an attempt: nothing is charged
// (the customer might be paying the old PaymentIntent); the run is not OK
// and the next run cancels, then charges.
func TestNoAttemptWhileTheOldPaymentIntentCannotBeCancelled(t *testing.T) {
	t.Parallel()
	e, sub, a := declinedThenSucceeds(t, billingtest.Options{})
	e.Stripe.Fail(http.MethodPost, "/v1/payment_intents/"+a.ID+"/cancel", http.StatusInternalServerError, "api_error", "", "down", -1)
	e.Clock.SetDate(d("2024-01-11"))
	rep, err := e.Service.Collect(ctx, d("2024-01-11"))
	require.NoError(t, err)
	assert.False(t, rep.OK(), "%+v", rep)
	assert.Len(t, e.Stripe.PIs(), 1, "no charge while A may still be paid")
	assert.Equal(t, billing.Error, period(t, e, sub, "2024-01-10").Status)
	e.Stripe.Recover()
	// The next run (again while the failed run's lock is still held, on a
	// loaded machine: its release can fail and the lease must run out).
	require.Eventually(t, func() bool {
		rep, err := e.Service.Collect(ctx, d("2024-01-11"))
		return err == nil && rep.OK()
	}, 30*time.Second, 100*time.Millisecond)
	assert.Equal(t, []string{a.ID}, e.Stripe.Cancels())
	assert.Len(t, kept(e, sub, "2024-01-10"), 1)
}

// A success for a period that already has one is refunded automatically:
// one refund per PaymentIntent (idempotency key derived from it, recorded
// on its reference), whether the webhook is redelivered or two replicas
// apply it at once; the history says duplicate-refunded and the counter
// moves. The open PaymentIntent is one a release before this rule left
// payable (no cancel before its retry): emulated by making the second
// attempt's PaymentIntent the period's latest without cancelling A.
func TestSecondSuccessIsRefundedOnceAcrossRedeliveriesAndReplicas(t *testing.T) {
	t.Parallel()
	obs := newObserver()
	e, sub, a := declinedThenSucceeds(t, billingtest.Options{Observer: obs})
	// The release before: attempt 2 declined (B) with A left open.
	e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior { return stripetest.Decline }
	p := period(t, e, sub, "2024-01-10")
	res, err := e.Charger.Charge(ctx, billing.ChargeRequest{StripeAccount: "acct_test", Customer: "cus_test", PaymentMethod: "pm_ok",
		Amount: p.Amount, Currency: p.Currency, IdempotencyKey: billing.IdempotencyKey(p, 2), Metadata: map[string]string{
			billing.MetaAccount: "acc-1", billing.MetaSubscription: sub.SubscriptionID, billing.MetaDate: "2024-01-10",
			billing.MetaSKU: "gold", billing.MetaAttempt: "2"}})
	require.NoError(t, err)
	require.Equal(t, billing.Declined, res.Outcome)
	p.Attempts, p.TransactionID = 2, res.PaymentIntent
	tx := billing.NewTx("release-before", e.Clock.Now())
	tx.PutPeriod(&p, false)
	tx.PutPaymentRef(billing.PaymentRef{PaymentIntent: res.PaymentIntent, AccountID: "acc-1", SubscriptionID: sub.SubscriptionID,
		BillingDate: p.BillingDate})
	require.NoError(t, e.Store.Commit(ctx, tx))

	e.Stripe.Decide = nil
	collect(t, e, "2024-01-13")
	require.Equal(t, billing.Completed, period(t, e, sub, "2024-01-10").Status)
	assert.Equal(t, []string{res.PaymentIntent}, e.Stripe.Cancels(), "B cancelled; A was the release before's")

	status, _, err := e.Stripe.ConfirmAsCustomer("acct_test", a.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, "A was left payable: the customer pays it")
	paid, _ := e.Stripe.Get(a.ID)

	// Two replicas apply the webhook at once, then it is redelivered.
	replica, err := billing.New(billingtest.TestConfig(), billing.Deps{Store: e.Store, Locks: e.Lock, Charger: e.Charger,
		Notifier: e.Notifier, Now: e.Clock.Now, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Observer: obs})
	require.NoError(t, err)
	ev, err := stripeevent.Parse(e.Stripe.Event(paid, "payment_intent.succeeded", e.Clock.Now()))
	require.NoError(t, err)
	msg, ok, err := billing.FeedFromEvent(ev)
	require.NoError(t, err)
	require.True(t, ok)
	var wg sync.WaitGroup
	for _, svc := range []*billing.Service{e.Service, replica} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for { // the outbox retries a message whose account is locked
				err := svc.ApplyFeed(ctx, msg)
				if !errors.Is(err, billing.ErrLocked) {
					assert.NoError(t, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, feed(t, e, paid, "payment_intent.succeeded"))
	paid, _ = e.Stripe.Get(a.ID)
	require.NoError(t, feed(t, e, paid, "charge.refunded"))

	refunds := e.Stripe.Refunds()
	require.Len(t, refunds, 1, "one refund per PaymentIntent")
	assert.Equal(t, a.ID, refunds[0].PaymentIntent)
	assert.Equal(t, billing.RefundKey(a.ID), refunds[0].IdempotencyKey)
	assert.Len(t, kept(e, sub, "2024-01-10"), 1, "one successful charge kept")
	var dup []billing.HistoryEntry
	for _, h := range history(t, e, sub) {
		if h.UpdatedEvent == billing.UpdatedEventDuplicateRefunded {
			dup = append(dup, h)
		}
	}
	require.Len(t, dup, 1, "one history entry for the refund")
	assert.Equal(t, billing.Completed, dup[0].Status)
	assert.Contains(t, dup[0].Error, a.ID)
	assert.Contains(t, dup[0].Error, refunds[0].ID)
	obs.mu.Lock()
	assert.Equal(t, 1, obs.duplicates)
	obs.mu.Unlock()
	ref, err := e.Store.GetPaymentRef(ctx, a.ID)
	require.NoError(t, err)
	assert.Equal(t, refunds[0].ID, ref.RefundID)
}

// The feed's trust checks come before the account lock,
// which merchant-writable metadata names. A forged event about an account
// whose lock is held is refused at once; before, it waited for (and here
// failed on) the lock, and could hold up that account's billing.
func TestFeedChecksTrustBeforeTakingTheLock(t *testing.T) {
	t.Parallel()
	obs := newObserver()
	e := billingtest.NewEnv(t, billingtest.Options{Observer: obs})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	held, err := e.Lock.Acquire(ctx, billing.LockKey("acc-1"), true)
	require.NoError(t, err)
	defer func() { _ = held.Release(ctx) }()
	forged := stripetest.PI{ID: "pi_evil", Account: "acct_evil", Customer: "cus_test", Amount: 1999, Currency: "usd",
		Status: "succeeded", Created: e.Clock.Now(), Metadata: map[string]string{billing.MetaAccount: "acc-1",
			billing.MetaSubscription: sub.SubscriptionID, billing.MetaDate: "2024-01-10", billing.MetaSKU: "gold"}}
	require.NoError(t, feed(t, e, forged, "payment_intent.succeeded"), "refused without the lock")
	obs.mu.Lock()
	assert.Equal(t, 1, obs.refused["account"])
	obs.mu.Unlock()
	// A trusted one needs the lock: it waits for the holder (the outbox
	// retries it).
	e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior { return stripetest.Process }
	require.NoError(t, held.Release(ctx))
	collect(t, e, "2024-01-10")
	held, err = e.Lock.Acquire(ctx, billing.LockKey("acc-1"), true)
	require.NoError(t, err)
	pi := e.Stripe.PIs()[0]
	pi.Status = "succeeded"
	assert.ErrorIs(t, feed(t, e, pi, "payment_intent.succeeded"), billing.ErrLocked)
}

// A bank debit paid by the customer on an old PaymentIntent makes the
// period ACHSENT; a redelivered "processing" event of a debit that failed
// since moves nothing (Stripe says what the PaymentIntent is now).
func TestProcessingOfAnOldPaymentIntent(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior { return stripetest.Process }
	collect(t, e, "2024-01-10")
	pi := e.Stripe.PIs()[0]
	failed, err := e.Stripe.Settle(pi.ID, false)
	require.NoError(t, err)
	require.NoError(t, feed(t, e, failed, "payment_intent.payment_failed"))
	require.Equal(t, billing.Error, period(t, e, sub, "2024-01-10").Status)

	stale := failed
	stale.Status = "processing"
	require.NoError(t, feed(t, e, stale, "payment_intent.processing"), "redelivered")
	assert.Equal(t, billing.Error, period(t, e, sub, "2024-01-10").Status, "the debit failed: still ERROR, its retries go on")

	// The customer pays it again, with a bank debit (Stripe: processing).
	e.Stripe.Answer(http.MethodGet, "/v1/payment_intents/"+pi.ID, http.StatusOK, []byte(`{"id":"`+pi.ID+
		`","object":"payment_intent","amount":1999,"currency":"usd","status":"processing","metadata":{}}`), 1)
	require.NoError(t, feed(t, e, stale, "payment_intent.processing"))
	p := period(t, e, sub, "2024-01-10")
	assert.Equal(t, billing.ACHSent, p.Status)
	assert.Equal(t, pi.ID, p.TransactionID)
}

// A cancel answered 429 (which Stripe does not execute) is sent again with
// its idempotency key, as a charge is; the retry then charges.
func TestCancelRateLimitedIsRetried(t *testing.T) {
	t.Parallel()
	e, sub, a := declinedThenSucceeds(t, billingtest.Options{})
	e.Stripe.Fail(http.MethodPost, "/v1/payment_intents/"+a.ID+"/cancel", http.StatusTooManyRequests, "invalid_request_error", "rate_limit", "Request rate limit exceeded.", 2)
	rep := collect(t, e, "2024-01-11")
	assert.True(t, rep.OK(), "%+v", rep)
	assert.Equal(t, []string{a.ID}, e.Stripe.Cancels())
	assert.Len(t, kept(e, sub, "2024-01-10"), 1)
	var keys []string
	for _, r := range e.Stripe.Requests() {
		if strings.HasSuffix(r.Path, "/cancel") {
			keys = append(keys, r.IdempotencyKey)
		}
	}
	require.Greater(t, len(keys), 2, "sent again after each 429")
	for _, k := range keys {
		assert.Equal(t, billing.CancelKey(a.ID), k)
	}
}

// A success for a STALE period completes it: a late payment, with its
// receipt at the paid attempt's amount (docs/design.md §8), even after the amount
// changed; no refund.
func TestLatePaymentOfAStalePeriod(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior { return stripetest.Decline }
	for _, day := range []string{"2024-01-10", "2024-01-11", "2024-01-13", "2024-01-15", "2024-01-17", "2024-02-09"} {
		collect(t, e, day)
	}
	require.Equal(t, billing.Stale, period(t, e, sub, "2024-01-10").Status)
	staleProcess := period(t, e, sub, "2024-01-10").Process
	amount := int64(2500)
	_, err = e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{Amount: &amount})
	require.NoError(t, err)
	pis := e.Stripe.PIs()
	last := pis[len(pis)-1]
	require.Equal(t, "2024-01-10", last.Metadata[billing.MetaDate])
	status, _, err := e.Stripe.ConfirmAsCustomer("acct_test", last.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, "a STALE period's last PaymentIntent stays payable")
	paid, _ := e.Stripe.Get(last.ID)
	require.NoError(t, feed(t, e, paid, "payment_intent.succeeded"))

	p := period(t, e, sub, "2024-01-10")
	assert.Equal(t, billing.Completed, p.Status)
	assert.Equal(t, billing.UpdatedEventLatePayment, p.UpdatedEvent)
	assert.Equal(t, staleProcess, p.Process, "a change by Stripe's feed keeps the period's own process (docs/design.md §8)")
	assert.Equal(t, int64(1999), p.Amount, "the paid attempt's amount")
	page, err := e.Store.ListReceipts(ctx, "acc-1", e.Clock.Now(), 24*time.Hour*400, 100, "")
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
	assert.Equal(t, last.ID, page.Items[0].PaymentIntent)
	assert.Equal(t, int64(1999), page.Items[0].Amount)
	assert.Empty(t, e.Stripe.Refunds())
	assert.Equal(t, []billing.Status{billing.Scheduled, billing.Error, billing.Stale, billing.Completed},
		collapse(statuses(history(t, e, sub), "2024-01-10")))
}

func collapse(s []billing.Status) []billing.Status {
	var out []billing.Status
	for _, v := range s {
		if len(out) == 0 || out[len(out)-1] != v {
			out = append(out, v)
		}
	}
	return out
}
