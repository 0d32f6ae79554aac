package app_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/trigger"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

func postTrigger(t *testing.T, base, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/internal/v1/billing/triggers", bytes.NewReader([]byte(body)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	return do(t, req)
}

// TestBillingTriggersThroughTheAPIAndTheQueue (docs/design.md §4, §8
// "Collections triggered by the platform"), the real program with
// BILLING_TRIGGERS_QUEUE_URL on the local SQS server: two accounts on a
// test clock whose period of 2024-01-10 was declined; Stripe approves
// from then on. An income trigger through POST /internal/v1/billing/triggers
// and a balance trigger through an EventBridge message on the queue each
// collect their account's period at once, on the clock's today, process
// WEBHOOK and WEBHOOK_BALANCE; GET says what each did. The same reference
// again does nothing; bad input is a 400 naming the field and records
// nothing.
func TestBillingTriggersThroughTheAPIAndTheQueue(t *testing.T) {
	ctx := context.Background()
	client := testenv.SQS(t)
	q := testenv.CreateQueue(t, client, 30*time.Second, 3)
	a := startApp(t, nil, map[string]string{"BILLING_TRIGGERS_QUEUE_URL": q.URL, "SQS_ENDPOINT": testenv.SQSEndpoint(t)})
	var approve atomic.Bool
	a.Fake.Decide = func(stripetest.PI) stripetest.Behavior {
		if approve.Load() {
			return stripetest.Succeed
		}
		return stripetest.Decline
	}
	clock, err := a.Clocks.CreateClock(ctx, time.Date(2024, 1, 9, 12, 0, 0, 0, time.UTC), "triggers")
	require.NoError(t, err)
	subs := map[string]string{}
	for _, acc := range []string{"trg-api", "trg-queue"} {
		sub, err := a.Billing.CreateSubscription(ctx, acc, billing.CreateInput{SKU: "gold", Email: "t@example.com", PaymentDay: 10,
			Amount: 1500, Currency: "usd", Term: dates.Monthly, Customer: "cus_" + strings.ReplaceAll(acc, "-", ""),
			PaymentMethod: "pm_card_visa", StripeAccount: "acct_trg", TestClock: clock.ID})
		require.NoError(t, err)
		subs[acc] = sub.SubscriptionID
	}
	_, done, err := a.Clocks.AdvanceClock(ctx, ctx, clock.ID, time.Date(2024, 1, 10, 15, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	<-done
	for acc, sub := range subs {
		p, err := a.BillingStore.GetPeriod(ctx, acc, sub, dates.MustParse("2024-01-10"))
		require.NoError(t, err)
		require.Equal(t, billing.Error, p.Status, acc)
	}
	approve.Store(true)

	// Bad input: 400 naming the field, nothing recorded.
	for field, body := range map[string]string{
		"account_id":  `{"account_id":"trg#api","kind":"income","occurred_at":"2024-01-10T14:00:00Z","reference":"r-bad"}`,
		"kind":        `{"account_id":"trg-api","kind":"salary","occurred_at":"2024-01-10T14:00:00Z","reference":"r-bad"}`,
		"occurred_at": `{"account_id":"trg-api","kind":"income","occurred_at":"yesterday","reference":"r-bad"}`,
		"reference":   `{"account_id":"trg-api","kind":"income","occurred_at":"2024-01-10T14:00:00Z"}`,
		"amount":      `{"account_id":"trg-api","kind":"income","occurred_at":"2024-01-10T14:00:00Z","reference":"r-bad","amount":5}`,
	} {
		status, resp := postTrigger(t, a.AdminURL, body)
		assert.Equal(t, http.StatusBadRequest, status, field)
		assert.Equal(t, "invalid_parameter", errorCode(resp), field)
		msg, _ := resp["error"].(map[string]any)["message"].(string)
		assert.Contains(t, msg, field)
	}
	list, err := a.Triggers.Store.ForAccount(ctx, "trg-api", 10)
	require.NoError(t, err)
	assert.Empty(t, list, "a refused request records nothing")

	status, resp := postTrigger(t, a.AdminURL, `{"account_id":"trg-api","kind":"income","occurred_at":"2024-01-10T14:00:00Z","reference":"inc-42"}`)
	require.Equal(t, http.StatusAccepted, status, resp)
	id, _ := resp["id"].(string)
	require.True(t, trigger.ValidID(id), id)
	assert.Equal(t, "WEBHOOK", resp["process"])
	var got map[string]any
	require.Eventually(t, func() bool {
		status, got = get(t, a.AdminURL+"/internal/v1/billing/triggers/"+id, token)
		require.Equal(t, http.StatusOK, status, got)
		return got["status"] == trigger.StatusDone
	}, 30*time.Second, 50*time.Millisecond)
	assert.Equal(t, billing.TriggerCollected, got["outcome"])
	assert.Equal(t, "2024-01-10", got["today"], "the clock's today")
	assert.EqualValues(t, 1, got["attempts"])
	periods, _ := got["periods"].([]any)
	require.Len(t, periods, 1)
	assert.Equal(t, "paid", periods[0].(map[string]any)["outcome"])
	assert.Equal(t, "api", got["source"])

	// The same reference again: the same trigger, nothing more.
	status, resp = postTrigger(t, a.AdminURL, `{"account_id":"trg-api","kind":"income","occurred_at":"2024-01-10T14:00:00Z","reference":"inc-42"}`)
	require.Equal(t, http.StatusAccepted, status, resp)
	assert.Equal(t, id, resp["id"])
	assert.Equal(t, true, resp["duplicate"])
	status, resp = postTrigger(t, a.AdminURL, `{"account_id":"trg-queue","kind":"income","occurred_at":"2024-01-10T14:00:00Z","reference":"inc-42"}`)
	assert.Equal(t, http.StatusConflict, status, resp)

	// The queue: an EventBridge event of the platform's bus.
	body := `{"version":"0","id":"ev-trg-1","detail-type":"account.balance_available","source":"platform.accounts","account":"111122223333",` +
		`"time":"2024-01-10T14:00:00Z","region":"us-east-1","resources":[],` +
		`"detail":{"account_id":"trg-queue","occurred_at":"2024-01-10T14:00:00Z","reference":"bal-7"}}`
	_, err = client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String(body)})
	require.NoError(t, err)
	var queued []trigger.Record
	require.Eventually(t, func() bool {
		queued, err = a.Triggers.Store.ForAccount(ctx, "trg-queue", 10)
		require.NoError(t, err)
		return len(queued) == 1 && queued[0].Status == trigger.StatusDone
	}, 60*time.Second, 50*time.Millisecond)
	assert.Equal(t, billing.TriggerCollected, queued[0].Outcome)
	assert.Equal(t, trigger.SourceQueue, queued[0].Source)

	for acc, proc := range map[string]billing.Process{"trg-api": billing.ProcWebhook, "trg-queue": billing.ProcWebhookBalance} {
		p, err := a.BillingStore.GetPeriod(ctx, acc, subs[acc], dates.MustParse("2024-01-10"))
		require.NoError(t, err)
		assert.Equal(t, billing.Completed, p.Status, acc)
		assert.Equal(t, proc, p.Process, acc)
		n := 0
		for _, pi := range a.Fake.PIs() {
			if pi.Metadata[billing.MetaAccount] == acc && pi.Status == "succeeded" {
				n++
			}
		}
		assert.Equal(t, 1, n, "%s: one successful charge", acc)
	}

	status, resp = get(t, a.AdminURL+"/internal/v1/billing/triggers/trg_000000000000000000000000", token)
	assert.Equal(t, http.StatusNotFound, status, resp)
	status, resp = get(t, a.AdminURL+"/internal/v1/billing/triggers/nope", token)
	assert.Equal(t, http.StatusBadRequest, status, resp)
}
