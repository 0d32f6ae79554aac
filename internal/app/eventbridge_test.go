package app_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/app"
	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/eventbridge"
	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/handler"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// The EventBridge intake end to end (docs/design.md §4): `serve` with
// EVENTBRIDGE_QUEUE_URL on the real local SQS server, the real handler,
// DynamoDB Local and Postgres.

func sendMessage(t *testing.T, client *sqs.Client, queueURL, body string) {
	t.Helper()
	_, err := client.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String(body)})
	require.NoError(t, err)
}

func queueEmpty(t *testing.T, client *sqs.Client, queueURL string) bool {
	t.Helper()
	out, err := client.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(queueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	require.NoError(t, err)
	return out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)] == "0" &&
		out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)] == "0"
}

// TestEventBridgeIntake: a snapshot event from Stripe's partner event
// source is recorded with source eventbridge and processed, and its message
// deleted; the internal API finds it. An event whose livemode differs from
// the key's is ignored as the webhook ignores it (deleted, not recorded). A
// message from another source is never recorded nor deleted: the redrive
// policy moves it to the dead-letter queue. The metrics count all of it.
func TestEventBridgeIntake(t *testing.T) {
	client := testenv.SQS(t)
	q := testenv.CreateQueue(t, client, 1*time.Second, 2)
	a := startApp(t, nil, map[string]string{"EVENTBRIDGE_QUEUE_URL": q.URL, "SQS_ENDPOINT": testenv.SQSEndpoint(t)})
	ctx := context.Background()

	id := stripetest.NewID()
	snapshot := stripetest.Event{Fixture: "customer.created", ID: id}.Build(t)
	live := stripetest.NewID()
	foreign := stripetest.NewID()
	sendMessage(t, client, q.URL, testenv.EventBridgeEvent(t, testenv.StripeSource, snapshot))
	sendMessage(t, client, q.URL, testenv.EventBridgeEvent(t, testenv.StripeSource,
		stripetest.Event{Fixture: "customer.created", ID: live, Livemode: stripetest.Ptr(true)}.Build(t)))
	foreignBody := testenv.EventBridgeEvent(t, "aws.partner/example.com/1", stripetest.Event{Fixture: "customer.created", ID: foreign}.Build(t))
	sendMessage(t, client, q.URL, foreignBody)

	require.Eventually(t, func() bool {
		rec, err := a.Events.Get(ctx, id)
		return err == nil && rec.Status == events.StatusProcessed
	}, 20*time.Second, 50*time.Millisecond, "the event is recorded and processed")
	rec, err := a.Events.Get(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, stripeevent.SourceEventBridge, rec.Source)

	status, body := get(t, a.Admin.URL()+"/internal/v1/events/"+id, token)
	require.Equal(t, http.StatusOK, status, "%v", body)
	assert.Equal(t, "eventbridge", body["source"])
	assert.Equal(t, "processed", body["status"])

	// The foreign message: refused on each of its 2 receives, then in the DLQ.
	out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.DLQURL), WaitTimeSeconds: 10})
	require.NoError(t, err)
	require.Len(t, out.Messages, 1, "the foreign message reached the dead-letter queue")
	assert.Equal(t, foreignBody, aws.ToString(out.Messages[0].Body))
	require.Eventually(t, func() bool { return queueEmpty(t, client, q.URL) }, 10*time.Second, 50*time.Millisecond)
	for _, absent := range []string{live, foreign} {
		_, err := a.Events.Get(ctx, absent)
		assert.ErrorIs(t, err, apperr.ErrNotFound, "%s is not recorded", absent)
	}
	text := metricsText(t, a.Admin.URL())
	for _, line := range []string{
		"stripe_payments_eventbridge_messages_received_total 4",
		"stripe_payments_eventbridge_messages_deleted_total 2",
		`stripe_payments_eventbridge_messages_refused_total{reason="source"} 2`,
		"stripe_payments_eventbridge_messages_failed_total 0",
	} {
		assert.Contains(t, text, line)
	}
}

// dropDeletes is the SQS client of a process killed between recording an
// event and deleting its message: its deletes never reach SQS.
type dropDeletes struct {
	eventbridge.API
	dropped chan struct{}
}

func (d dropDeletes) DeleteMessageBatch(context.Context, *sqs.DeleteMessageBatchInput, ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	d.dropped <- struct{}{}
	return nil, errors.New("killed before the delete")
}

// outcomes records the handler's outcome of each ingest.
type outcomes struct {
	eventbridge.Ingester
	mu  sync.Mutex
	got []stripeevent.Outcome
}

func (o *outcomes) Ingest(ctx context.Context, body []byte, source stripeevent.Source) (stripeevent.Outcome, error) {
	out, err := o.Ingester.Ingest(ctx, body, source)
	o.mu.Lock()
	o.got = append(o.got, out)
	o.mu.Unlock()
	return out, err
}

// TestEventBridgeRedeliveryAfterCrashAppliesOnce: a replica records and
// processes an event, then dies before deleting its message. After the
// visibility timeout SQS delivers it again, to another replica's consumer:
// the handler finds it processed (duplicate), its effects ran once, and the
// message is deleted.
func TestEventBridgeRedeliveryAfterCrashAppliesOnce(t *testing.T) {
	var applied atomic.Int32
	a := startApp(t, nil, nil, app.WithRoutes(func(r handler.Routes) handler.Routes {
		return r.With("customer.created", func(context.Context, handler.Tx, *stripe.Event) error {
			applied.Add(1)
			return nil
		})
	}))
	client := testenv.SQS(t)
	q := testenv.CreateQueue(t, client, 1*time.Second, 5)
	id := stripetest.NewID()
	sendMessage(t, client, q.URL, testenv.EventBridgeEvent(t, testenv.StripeSource, stripetest.Event{Fixture: "customer.created", ID: id}.Build(t)))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ing := &outcomes{Ingester: a.EventBridgeIngester()}
	run := func(api eventbridge.API) (stop func()) {
		c := eventbridge.New(eventbridge.Config{QueueURL: q.URL, WaitTime: time.Second}, api, ing, nil, log)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { c.Run(ctx); close(done) }()
		var once sync.Once
		stop = func() { once.Do(func() { cancel(); <-done }) }
		t.Cleanup(stop)
		return stop
	}

	crashing := dropDeletes{API: client, dropped: make(chan struct{}, 10)}
	stop := run(crashing)
	select {
	case <-crashing.dropped:
	case <-time.After(20 * time.Second):
		t.Fatal("the first replica never got to its delete")
	}
	stop()
	rec, err := a.Events.Get(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, events.StatusProcessed, rec.Status, "recorded and processed before the delete")

	run(client)
	require.Eventually(t, func() bool { return queueEmpty(t, client, q.URL) }, 20*time.Second, 50*time.Millisecond,
		"the redelivered message is deleted")
	ing.mu.Lock()
	defer ing.mu.Unlock()
	assert.Equal(t, []stripeevent.Outcome{stripeevent.Applied, stripeevent.Duplicate}, ing.got)
	assert.EqualValues(t, 1, applied.Load(), "the effects ran once")
}
