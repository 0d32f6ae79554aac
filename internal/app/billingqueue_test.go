package app_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// A collection run through the billing queue (BILLING_QUEUE_URL: the real
// local SQS server, a FIFO queue with its dead-letter queue) charges
// exactly what the in-process run charges: the same PaymentIntents (one per
// account, period and attempt, the same idempotency keys), the same
// outcomes and the same histories, over a test clock's month with
// successes, a soft decline retried until it succeeds and a hard decline
// that is not retried.
func TestQueuedRunChargesExactlyLikeTheInProcessRun(t *testing.T) {
	client := testenv.SQS(t)
	q := testenv.CreateFIFOQueue(t, client, 30*time.Second, 10)
	var inProcess, queued []string
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		inProcess = queueScenario(t, nil)
	}()
	go func() {
		defer wg.Done()
		queued = queueScenario(t, map[string]string{"BILLING_QUEUE_URL": q.URL, "SQS_ENDPOINT": testenv.SQSEndpoint(t)})
	}()
	wg.Wait()
	require.NotEmpty(t, inProcess)
	assert.Equal(t, inProcess, queued)
}

// queueScenario runs the month on a program with env and returns what it
// did: each PaymentIntent ("account date attempt status idempotency-key")
// and each period's history, sorted.
func queueScenario(t *testing.T, env map[string]string) []string {
	a := startApp(t, nil, env)
	base := a.Admin.URL() + "/internal/v1"
	declines := map[string]int{"acct-soft": 2} // declined on the first two attempts
	a.Fake.Decide = func(p stripetest.PI) stripetest.Behavior {
		acc := p.Metadata[billing.MetaAccount]
		switch {
		case acc == "acct-hard":
			return stripetest.Decline
		case p.Metadata[billing.MetaAttempt] <= fmt.Sprint(declines[acc]) && declines[acc] > 0:
			return stripetest.Decline
		}
		return stripetest.Succeed
	}
	a.Fake.DeclineAs = func(p stripetest.PI) string {
		if p.Metadata[billing.MetaAccount] == "acct-hard" {
			return "lost_card"
		}
		return "insufficient_funds"
	}
	status, clock := send(t, http.MethodPost, base+"/test_clocks", map[string]any{"frozen_time": "2024-01-09T12:00:00Z"})
	require.Equal(t, http.StatusCreated, status, clock)
	clockID := clock["id"].(string)
	subs := map[string]string{}
	accounts := []string{"acct-ok-1", "acct-ok-2", "acct-ok-3", "acct-soft", "acct-hard"}
	for i, acc := range accounts {
		status, sub := send(t, http.MethodPost, base+"/accounts/"+acc+"/subscriptions", map[string]any{
			"sku": "gold", "email": "q@example.com", "payment_day": 10 + i%2, "amount": 700 + i, "currency": "usd",
			"term": "MONTHLY", "customer": "cus_" + strings.ReplaceAll(acc, "-", ""), "payment_method": "pm_card_visa",
			"stripe_account": "acct_" + strings.ReplaceAll(acc, "-", ""), "test_clock": clockID})
		require.Equal(t, http.StatusCreated, status, sub)
		subs[acc] = sub["subscription_id"].(string)
	}
	for _, day := range []string{"2024-01-12", "2024-01-20", "2024-02-12"} {
		status, body := send(t, http.MethodPost, base+"/test_clocks/"+clockID+"/advance", map[string]any{"frozen_time": day + "T12:00:00Z"})
		require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, status, body)
		require.Eventually(t, func() bool {
			_, c := get(t, base+"/test_clocks/"+clockID, token)
			require.NotEqual(t, "internal_failure", c["status"], c)
			return c["status"] == "ready"
		}, 3*time.Minute, 50*time.Millisecond)
	}
	if env["BILLING_QUEUE_URL"] != "" {
		// The queue did it: the accounts went through it, each collected
		// by the worker once per run date they were due on.
		var runs, collected int
		require.NoError(t, a.Pool.QueryRow(context.Background(), `SELECT count(DISTINCT r.id), count(*) FILTER (WHERE m.outcome = 'collected')
			FROM ops_billing_queue_runs r JOIN ops_billing_queue_messages m ON m.run_id = r.id WHERE r.test_clock = $1`, clockID).Scan(&runs, &collected))
		require.Positive(t, runs)
		require.GreaterOrEqual(t, collected, 2*len(accounts), "each account's two periods, and the retries")

		// The run a clock's day recorded shows its progress in the API.
		var run string
		require.NoError(t, a.Pool.QueryRow(context.Background(), `SELECT queue_run::text FROM ops_billing_runs
			WHERE test_clock = $1 AND queue_run IS NOT NULL AND (report->'queue'->>'enqueued')::int > 0 ORDER BY started_at LIMIT 1`, clockID).Scan(&run))
		status, body := get(t, base+"/billing/queue-runs/"+run, token)
		require.Equal(t, http.StatusOK, status, body)
		assert.Equal(t, "drained", body["status"])
		assert.Equal(t, clockID, body["test_clock"])
		assert.Positive(t, body["collected"])
		assert.Equal(t, body["enqueued"], body["collected"].(float64)+body["nothing_due"].(float64)+body["failed"].(float64))
		status, body = get(t, base+"/billing/queue-runs/not-a-uuid", token)
		assert.Equal(t, http.StatusBadRequest, status, body)
		status, body = get(t, base+"/billing/queue-runs/"+"00000000-0000-4000-8000-000000000000", token)
		assert.Equal(t, http.StatusNotFound, status, body)
	}
	var out []string
	for _, p := range a.Fake.PIs() {
		out = append(out, fmt.Sprintf("pi %s %s %s %s %d", p.Metadata[billing.MetaAccount], p.Metadata[billing.MetaDate],
			p.Metadata[billing.MetaAttempt], p.Status, p.Amount))
	}
	for _, acc := range accounts {
		status, list := get(t, base+"/accounts/"+acc+"/subscriptions/"+subs[acc]+"/history?limit=1000", token)
		require.Equal(t, http.StatusOK, status, list)
		for _, it := range list["data"].([]any) {
			h := it.(map[string]any)
			out = append(out, strings.TrimSpace(fmt.Sprintf("history %s %v %v %v %v %v", acc, h["billing_date"], h["billing_status"], h["process"], h["updated_event"], h["error"])))
		}
	}
	sort.Strings(out)
	return out
}
