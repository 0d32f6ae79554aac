package trigger_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/trigger"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// platformEvent is the SQS body an EventBridge rule on the platform's bus
// delivers.
func platformEvent(t *testing.T, id, detailType, account, ref string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"version": "0", "id": id, "detail-type": detailType, "source": "platform.banking",
		"account": "111122223333", "time": "2024-01-10T14:00:00Z", "region": "us-east-1", "resources": []string{},
		"detail": map[string]any{"account_id": account, "occurred_at": "2024-01-10T14:00:00Z", "reference": ref}})
	require.NoError(t, err)
	return string(b)
}

// startConsumer runs a consumer of q until the test ends.
func (f *fixture) startConsumer(t *testing.T, client *sqs.Client, q testenv.Queue) *trigger.Consumer {
	t.Helper()
	c := trigger.NewConsumer(trigger.QueueConfig{QueueURL: q.URL, WaitTime: time.Second, Backoff: 50 * time.Millisecond},
		client, f.intake, slog.New(slog.NewTextHandler(io.Discard, nil)))
	cctx, cancel := cancelable()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(cctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

func depth(t *testing.T, client *sqs.Client, url string) (visible, inFlight int) {
	t.Helper()
	out, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	require.NoError(t, err)
	visible, _ = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	inFlight, _ = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	return visible, inFlight
}

// The queue path and the API path give the same result: two accounts in
// the same state, one triggered by an EventBridge message and one through
// the intake the API calls, end with the same record but for their ids and
// source; the message is deleted once its trigger is recorded.
func TestQueueAndAPIPathsGiveTheSameResult(t *testing.T) {
	f := newFixture(t)
	client := testenv.SQS(t)
	q := testenv.CreateQueue(t, client, 30*time.Second, 3)
	subs := f.declined(t, "acc-queue", "acc-api")
	viaQueue, viaAPI := subs[0], subs[1]
	f.approve.Store(true)
	f.processor(t, nil)
	c := f.startConsumer(t, client, q)
	require.NoError(t, c.Check(ctx), "the test queue has a redrive policy")

	_, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL),
		MessageBody: aws.String(platformEvent(t, "ev-q", trigger.DetailTypeBalance, "acc-queue", "bal-q"))})
	require.NoError(t, err)
	apiRec, _, err := f.intake.Accept(ctx, trigger.Trigger{AccountID: "acc-api", Kind: trigger.KindBalance,
		OccurredAt: time.Date(2024, 1, 10, 14, 0, 0, 0, time.UTC), Reference: "bal-a"}, trigger.SourceAPI, "")
	require.NoError(t, err)

	var queued []trigger.Record
	require.Eventually(t, func() bool {
		var err error
		queued, err = f.store.ForAccount(ctx, "acc-queue", 10)
		require.NoError(t, err)
		return len(queued) == 1 && queued[0].Status == trigger.StatusDone
	}, 30*time.Second, 20*time.Millisecond)
	a, b := queued[0], f.done(t, apiRec.ID)
	assert.Equal(t, trigger.SourceQueue, a.Source)
	assert.Equal(t, "ev-q", a.MessageID)
	assert.Equal(t, trigger.SourceAPI, b.Source)
	assert.Equal(t, billing.TriggerCollected, a.Outcome)
	assert.Equal(t, billing.ProcWebhookBalance, a.Process)
	same := func(r trigger.Record, sub billing.Subscription) trigger.Record {
		r.ID, r.Source, r.MessageID, r.Trigger.AccountID, r.Trigger.Reference = "", "", "", "", ""
		r.CreatedAt, r.ProcessedAt = time.Time{}, time.Time{}
		for i := range r.Periods {
			assert.Equal(t, sub.SubscriptionID, r.Periods[i].SubscriptionID)
			assert.NotEmpty(t, r.Periods[i].PaymentIntent)
			r.Periods[i].SubscriptionID, r.Periods[i].PaymentIntent = "", ""
		}
		return r
	}
	assert.Equal(t, same(a, viaQueue), same(b, viaAPI))
	for _, s := range []billing.Subscription{viaQueue, viaAPI} {
		p := f.e.Period(t, s, "2024-01-10")
		assert.Equal(t, billing.Completed, p.Status)
		assert.Equal(t, billing.ProcWebhookBalance, p.Process)
	}
	require.Eventually(t, func() bool {
		v, in := depth(t, client, q.URL)
		return v == 0 && in == 0
	}, 10*time.Second, 50*time.Millisecond, "the message is deleted once recorded")
	tr, _ := f.obs.snapshot()
	assert.Equal(t, map[string]int{"balance/collected": 2}, tr)
}

// A message that is not a trigger is never deleted: its reason is recorded
// and logged, and the queue's redrive policy moves it to the dead-letter
// queue. Nothing is charged.
func TestMalformedMessageGoesToTheDeadLetterQueue(t *testing.T) {
	f := newFixture(t)
	client := testenv.SQS(t)
	q := testenv.CreateQueue(t, client, 1*time.Second, 2)
	f.declined(t, "acc-bad")
	f.approve.Store(true)
	f.processor(t, nil)
	f.startConsumer(t, client, q)
	bodies := map[string]string{
		trigger.ReasonEnvelope:   "not json at all",
		trigger.ReasonDetailType: platformEvent(t, "ev-type", "payout.paid", "acc-bad", "bad-1"),
		trigger.ReasonDetail:     platformEvent(t, "ev-detail", trigger.DetailTypeIncome, "acc#bad", "bad-2"),
	}
	for _, body := range bodies {
		_, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String(body)})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		v, _ := depth(t, client, q.DLQURL)
		return v == len(bodies)
	}, 60*time.Second, 100*time.Millisecond, "every refused message reaches the dead-letter queue")
	refusals, err := f.store.Refusals(ctx, 10)
	require.NoError(t, err)
	got := map[string]string{}
	for _, r := range refusals {
		got[r.Reason] = r.Body
		assert.NotEmpty(t, r.Error)
		assert.GreaterOrEqual(t, r.ReceiveCount, 1)
	}
	assert.Equal(t, bodies, got, "each refusal kept with its reason and the message")
	_, refused := f.obs.snapshot()
	for reason := range bodies {
		assert.GreaterOrEqual(t, refused[reason], 1, reason)
	}
	list, err := f.store.ForAccount(ctx, "acc-bad", 10)
	require.NoError(t, err)
	assert.Empty(t, list)
	assert.Len(t, f.e.Stripe.PIs(), 1, "nothing charged but the day's decline")
}
