package app_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/config"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// declineEnv is the real program on DynamoDB Local and Postgres with a test
// clock advanced through the API; the fake Stripe declines the period of
// 2024-01-10 of each subscription with the code its account names until
// told otherwise (fixed).
type declineEnv struct {
	t     *testing.T
	a     *apptest.App
	base  string
	clock string
	mu    sync.Mutex
	code  map[string]string // account → decline code of its charges
	fixed map[string]bool   // account → its charges succeed
	subs  map[string]string // account → subscription id
}

func startDeclines(t *testing.T) *declineEnv {
	t.Helper()
	e := &declineEnv{t: t, a: startApp(t, nil, nil), code: map[string]string{}, fixed: map[string]bool{}, subs: map[string]string{}}
	e.base = e.a.Admin.URL() + "/internal/v1"
	e.a.Fake.Decide = func(p stripetest.PI) stripetest.Behavior {
		e.mu.Lock()
		defer e.mu.Unlock()
		acc := p.Metadata[billing.MetaAccount]
		if e.code[acc] == "" || e.fixed[acc] || p.Metadata[billing.MetaDate] != "2024-01-10" {
			return stripetest.Succeed
		}
		return stripetest.Decline
	}
	e.a.Fake.DeclineAs = func(p stripetest.PI) string {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.code[p.Metadata[billing.MetaAccount]]
	}
	status, clock := send(t, http.MethodPost, e.base+"/test_clocks", map[string]any{"frozen_time": "2024-01-09T12:00:00Z"})
	require.Equal(t, http.StatusCreated, status, clock)
	e.clock = clock["id"].(string)
	return e
}

// create subscribes account (paid on the 10th) whose charges Stripe
// declines with code.
func (e *declineEnv) create(account, code string) {
	e.t.Helper()
	e.mu.Lock()
	e.code[account] = code
	e.mu.Unlock()
	status, sub := send(e.t, http.MethodPost, e.base+"/accounts/"+account+"/subscriptions", map[string]any{
		"sku": "gold", "email": "d@example.com", "payment_day": 10, "amount": 700, "currency": "usd",
		"term": "MONTHLY", "customer": "cus_" + strings.ReplaceAll(account, "-", ""), "payment_method": "pm_old", "stripe_account": "acct_" + strings.ReplaceAll(account, "-", ""),
		"test_clock": e.clock})
	require.Equal(e.t, http.StatusCreated, status, sub)
	e.subs[account] = sub["subscription_id"].(string)
}

func (e *declineEnv) fix(account string) {
	e.mu.Lock()
	e.fixed[account] = true
	e.mu.Unlock()
}

func (e *declineEnv) advance(date string) {
	e.t.Helper()
	status, body := send(e.t, http.MethodPost, e.base+"/test_clocks/"+e.clock+"/advance",
		map[string]any{"frozen_time": date + "T12:00:00Z"})
	require.Contains(e.t, []int{http.StatusOK, http.StatusAccepted}, status, body)
	require.Eventually(e.t, func() bool {
		_, c := get(e.t, e.base+"/test_clocks/"+e.clock, token)
		return c["status"] == "ready"
	}, 2*time.Minute, 50*time.Millisecond)
}

// attempts are "day status" of the PaymentIntents of account's period of
// 2024-01-10, in creation order (day: the fake's clock is real time, so
// the billing_attempt number stands in).
func (e *declineEnv) attempts(account string) []string {
	var out []string
	for _, p := range e.a.Fake.PIs() {
		if p.Metadata[billing.MetaAccount] == account && p.Metadata[billing.MetaDate] == "2024-01-10" {
			out = append(out, p.Status)
		}
	}
	return out
}

// history is "STATUS process updated_event error" of the period of
// 2024-01-10.
func (e *declineEnv) history(account string) []string {
	e.t.Helper()
	status, list := get(e.t, e.base+"/accounts/"+account+"/subscriptions/"+e.subs[account]+"/history?limit=1000", token)
	require.Equal(e.t, http.StatusOK, status, list)
	var out []string
	for _, it := range list["data"].([]any) {
		h := it.(map[string]any)
		if h["billing_date"] == "2024-01-10" {
			out = append(out, strings.TrimSpace(fmt.Sprintf("%s %v %v %v", h["billing_status"], h["process"], h["updated_event"], h["error"])))
		}
	}
	return out
}

// failedActions are "decline_code not_retried" of account's
// billing.payment_failed actions.
func (e *declineEnv) failedActions(account string) []string {
	e.t.Helper()
	rows, err := e.a.Pool.Query(context.Background(), `SELECT coalesce(payload->>'decline_code',''), coalesce(payload->>'not_retried','false')
		FROM outbox WHERE type = $1 AND payload->>'account' = $2 ORDER BY created_at`, billing.ActionPaymentFailed, account)
	require.NoError(e.t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var code, nr string
		require.NoError(e.t, rows.Scan(&code, &nr))
		out = append(out, code+" "+nr)
	}
	require.NoError(e.t, rows.Err())
	return out
}

// docs/design.md §8 "Declines that retrying cannot fix are not retried", end to
// end, for each code of the default list and for soft declines: a hard
// decline is ERROR with its code and no retry day, its payment_failed
// action carries the code, and it is STALE after BILLING_STALE_DAYS (30);
// a soft one keeps the retry days (1, 3, 5, 7). Fails without the rule: the
// hard-declined periods are charged again on Jan 11, 13, 15 and 17.
func TestHardDeclinesAreNotRetried(t *testing.T) {
	e := startDeclines(t)
	hard := config.DefaultBillingHardDeclineCodes()
	soft := []string{"insufficient_funds", "generic_decline", "do_not_honor", "processing_error"}
	for i, code := range append(append([]string{}, hard...), soft...) {
		e.create(fmt.Sprintf("acc-d%02d", i), code)
	}
	e.advance("2024-01-20")
	for i, code := range append(append([]string{}, hard...), soft...) {
		acc := fmt.Sprintf("acc-d%02d", i)
		isHard := i < len(hard)
		t.Run(code, func(t *testing.T) {
			h := e.history(acc)
			require.NotEmpty(t, h)
			if isHard {
				assert.Equal(t, []string{"requires_payment_method"}, e.attempts(acc), "one attempt, no retries")
				assert.Regexp(t, "^ERROR INITIAL declined-not-retried not retried: "+code+` \(`, h[len(h)-1])
				assert.Equal(t, []string{code + " true"}, e.failedActions(acc))
			} else {
				assert.Len(t, e.attempts(acc), 5, "the charge and the retries of days 1, 3, 5, 7")
				assert.Regexp(t, "^ERROR RETRY attempt-failed ", h[len(h)-1])
				assert.Len(t, e.failedActions(acc), 5)
				assert.Equal(t, code+" false", e.failedActions(acc)[0])
			}
		})
	}
	// Thirty days after the charge date: STALE, hard or soft; the next
	// period is charged as usual.
	e.advance("2024-02-10")
	for i := range len(hard) + len(soft) {
		acc := fmt.Sprintf("acc-d%02d", i)
		h := e.history(acc)
		assert.Regexp(t, "^STALE RETRY stale", h[len(h)-1], acc)
	}
}

// A hard-declined period is still collected by a pay now, and by a
// payment method change at the next collection run (process RETRY).
func TestHardDeclineCollectedByPayNowOrANewPaymentMethod(t *testing.T) {
	e := startDeclines(t)
	e.create("acc-paynow", "lost_card")
	e.create("acc-newcard", "expired_card")
	e.create("acc-stillbad", "stolen_card")
	e.advance("2024-01-12")
	for _, acc := range []string{"acc-paynow", "acc-newcard", "acc-stillbad"} {
		require.Equal(t, []string{"requires_payment_method"}, e.attempts(acc), acc)
	}

	e.fix("acc-paynow")
	status, body := send(t, http.MethodPost, e.base+"/accounts/acc-paynow/subscriptions/"+e.subs["acc-paynow"]+"/pay", map[string]any{})
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, []string{"canceled", "succeeded"}, e.attempts("acc-paynow"), "the declined one cancelled first")
	h := e.history("acc-paynow")
	assert.Regexp(t, "^COMPLETED MANUAL_REPAYMENT completed", h[len(h)-1])

	// The new card: due at the next run (the advance to the next day), not
	// on the old retry days.
	e.fix("acc-newcard")
	for _, acc := range []string{"acc-newcard", "acc-stillbad"} {
		status, body = send(t, http.MethodPatch, e.base+"/accounts/"+acc+"/subscriptions/"+e.subs[acc],
			map[string]any{"payment_method": "pm_new"})
		require.Equal(t, http.StatusOK, status, body)
	}
	e.advance("2024-01-14")
	assert.Equal(t, []string{"canceled", "succeeded"}, e.attempts("acc-newcard"))
	h = e.history("acc-newcard")
	assert.Regexp(t, "^COMPLETED RETRY completed", h[len(h)-1])
	for _, p := range e.a.Fake.PIs() {
		if p.Metadata[billing.MetaAccount] == "acc-newcard" && p.Status == "succeeded" {
			assert.Equal(t, "pm_new", p.PaymentMethod)
		}
	}
	// Declined hard again with the new card: not retried either.
	e.advance("2024-01-20")
	assert.Equal(t, []string{"canceled", "requires_payment_method"}, e.attempts("acc-stillbad"))
	h = e.history("acc-stillbad")
	assert.Regexp(t, "^ERROR RETRY declined-not-retried not retried: stolen_card", h[len(h)-1])
}
