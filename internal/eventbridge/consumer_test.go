package eventbridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/eventbridge"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// These tests run the consumer against the real local SQS server (fauxqs,
// SQS_ENDPOINT) with an ingester that records what it is given: they are
// about what the consumer does with messages. The end-to-end tests with the
// real handler, DynamoDB Local and Postgres are in internal/app.

// thinDetail is a thin event as Stripe documents it (docs/design.md §4).
func thinDetail(id string) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"object":"v2.core.event","type":"v1.payment_intent.succeeded",`+
		`"created":"2026-11-25T15:03:10.123Z","livemode":false,"context":"acct_1Nv0FGQ9RKHgCVdK",`+
		`"related_object":{"id":"pi_3MtwBwLkdIwHu7ix28a3tqPa","type":"payment_intent","url":"/v1/payment_intents/pi_3MtwBwLkdIwHu7ix28a3tqPa"},`+
		`"reason":null}`, id))
}

// call is one Ingest call.
type call struct {
	body   []byte
	source stripeevent.Source
}

// recorder is an Ingester: it records every call and answers with answer
// (nil: success), after waiting for gate when set.
type recorder struct {
	mu     sync.Mutex
	calls  []call
	answer func(n int, body []byte) error
	gate   chan struct{}
	called chan struct{}
}

func newRecorder() *recorder { return &recorder{called: make(chan struct{}, 100)} }

func (r *recorder) Ingest(ctx context.Context, body []byte, source stripeevent.Source) (stripeevent.Outcome, error) {
	r.mu.Lock()
	r.calls = append(r.calls, call{body: append([]byte(nil), body...), source: source})
	n, answer, gate := len(r.calls), r.answer, r.gate
	r.mu.Unlock()
	r.called <- struct{}{}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return stripeevent.Failed, ctx.Err()
		}
	}
	if answer != nil {
		if err := answer(n, body); err != nil {
			return stripeevent.Failed, err
		}
	}
	return stripeevent.Applied, nil
}

func (r *recorder) Calls() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

// counts is an Observer.
type counts struct {
	mu                        sync.Mutex
	received, failed, deleted int
	refused                   map[string]int
}

func (c *counts) Received(n int) { c.mu.Lock(); c.received += n; c.mu.Unlock() }
func (c *counts) Failed()        { c.mu.Lock(); c.failed++; c.mu.Unlock() }
func (c *counts) Deleted(n int)  { c.mu.Lock(); c.deleted += n; c.mu.Unlock() }
func (c *counts) Refused(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refused == nil {
		c.refused = map[string]int{}
	}
	c.refused[reason]++
}

func (c *counts) snapshot() counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	refused := map[string]int{}
	for k, v := range c.refused {
		refused[k] = v
	}
	return counts{received: c.received, failed: c.failed, deleted: c.deleted, refused: refused}
}

type fixture struct {
	client *sqs.Client
	queue  testenv.Queue
	obs    *counts
}

func newFixture(t *testing.T, visibility time.Duration, maxReceives int) *fixture {
	t.Helper()
	client := testenv.SQS(t)
	return &fixture{client: client, queue: testenv.CreateQueue(t, client, visibility, maxReceives), obs: &counts{}}
}

func (f *fixture) send(t *testing.T, body string) {
	t.Helper()
	_, err := f.client.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(f.queue.URL), MessageBody: aws.String(body)})
	require.NoError(t, err)
}

// start runs a consumer on the queue until the test ends (or stop).
func (f *fixture) start(t *testing.T, api eventbridge.API, ing eventbridge.Ingester) (stop func()) {
	t.Helper()
	return f.startWith(t, eventbridge.Config{}, api, ing)
}

// startWith is start with cfg (its queue, wait and backoff set here).
func (f *fixture) startWith(t *testing.T, cfg eventbridge.Config, api eventbridge.API, ing eventbridge.Ingester) (stop func()) {
	t.Helper()
	if api == nil {
		api = f.client
	}
	cfg.QueueURL, cfg.WaitTime, cfg.Backoff = f.queue.URL, time.Second, 50*time.Millisecond
	c := eventbridge.New(cfg, api, ing, f.obs, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// depth is the queue's visible and in-flight message counts.
func depth(t *testing.T, client *sqs.Client, url string) (visible, inFlight int) {
	t.Helper()
	out, err := client.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	require.NoError(t, err)
	visible, _ = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	inFlight, _ = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	return visible, inFlight
}

func waitCalls(t *testing.T, r *recorder, n int) {
	t.Helper()
	for range n {
		select {
		case <-r.called:
		case <-time.After(15 * time.Second):
			t.Fatalf("ingester called %d times, want %d", len(r.Calls()), n)
		}
	}
}

// TestSnapshotAndThinEventsAreIngestedThenDeleted: the detail of each
// EventBridge event, snapshot or thin, reaches the ingester unchanged with
// source eventbridge, several messages per receive; a message stays on the
// queue (in flight) while its ingest runs and is deleted once it returned.
func TestSnapshotAndThinEventsAreIngestedThenDeleted(t *testing.T) {
	f := newFixture(t, 30*time.Second, 3)
	snapshot := stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(t)
	thin := thinDetail("evt_test_65RM8sQIAIhQj1yhe16RJyfa2xSQLHJJh1sxm7H0KVT6")
	f.send(t, testenv.EventBridgeEvent(t, testenv.StripeSource, snapshot))
	f.send(t, testenv.EventBridgeEvent(t, testenv.StripeSource, thin))

	ing := newRecorder()
	ing.gate = make(chan struct{})
	f.start(t, nil, ing)
	waitCalls(t, ing, 2)
	visible, inFlight := depth(t, f.client, f.queue.URL)
	assert.Equal(t, [2]int{0, 2}, [2]int{visible, inFlight}, "while the events are being recorded, their messages stay on the queue")
	assert.Zero(t, f.obs.snapshot().deleted)

	close(ing.gate)
	require.Eventually(t, func() bool { return f.obs.snapshot().deleted == 2 }, 10*time.Second, 20*time.Millisecond,
		"both messages deleted once ingested")
	visible, inFlight = depth(t, f.client, f.queue.URL)
	assert.Equal(t, [2]int{0, 0}, [2]int{visible, inFlight})
	var bodies []string
	for _, c := range ing.Calls() {
		assert.Equal(t, stripeevent.SourceEventBridge, c.source)
		bodies = append(bodies, string(c.body))
	}
	assert.ElementsMatch(t, []string{compact(t, snapshot), compact(t, thin)}, bodies, "the detail, as the event's JSON")
	got := f.obs.snapshot()
	assert.Equal(t, 2, got.received)
	assert.Equal(t, 2, got.deleted)
	assert.Empty(t, got.refused)
	assert.Zero(t, got.failed)
}

func compact(t *testing.T, b []byte) string {
	t.Helper()
	var v json.RawMessage
	require.NoError(t, json.Unmarshal(b, &v))
	out, err := json.Marshal(v)
	require.NoError(t, err)
	return string(out)
}

// TestForeignMessagesAreRefused: a message from any other source, a body
// that is not an EventBridge event, and a detail that is not a Stripe event
// are never deleted: they stay on the queue until its redrive policy moves
// them to the dead-letter queue, unchanged. The ingester never sees the
// first two.
func TestForeignMessagesAreRefused(t *testing.T) {
	snapshot := stripetest.Event{Fixture: "customer.created"}.Build(t)
	tests := []struct {
		name     string
		body     string
		reason   string
		ingested bool
	}{
		{"another partner's source", testenv.EventBridgeEvent(t, "aws.partner/example.com/stripe.com/1", snapshot), eventbridge.ReasonSource, false},
		{"an AWS source", testenv.EventBridgeEvent(t, "aws.events", snapshot), eventbridge.ReasonSource, false},
		{"a look-alike source", testenv.EventBridgeEvent(t, "aws.partner/stripe.com.example/1", snapshot), eventbridge.ReasonSource, false},
		{"Stripe's prefix with no source id", testenv.EventBridgeEvent(t, "aws.partner/stripe.com/", snapshot), eventbridge.ReasonSource, false},
		{"a custom application source", testenv.EventBridgeEvent(t, "stripe.com", snapshot), eventbridge.ReasonSource, false},
		{"a bare Stripe event, no envelope", string(snapshot), eventbridge.ReasonEnvelope, false},
		{"not JSON", "hello", eventbridge.ReasonEnvelope, false},
		{"detail is a string", testenv.EventBridgeEvent(t, testenv.StripeSource, []byte(`"evt_1"`)), eventbridge.ReasonDetail, false},
		{"detail is not a Stripe event", testenv.EventBridgeEvent(t, testenv.StripeSource, []byte(`{"id":"ch_1","object":"charge"}`)), eventbridge.ReasonDetail, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, 1*time.Second, 2)
			f.send(t, tc.body)
			ing := newRecorder()
			ing.answer = func(_ int, body []byte) error { // the snapshot path's answer
				_, err := stripeevent.Parse(body)
				return err
			}
			f.start(t, nil, ing)
			require.Eventually(t, func() bool { return f.obs.snapshot().refused[tc.reason] == 2 }, 15*time.Second, 20*time.Millisecond,
				"refused on each of its two receives")
			out, err := f.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(f.queue.DLQURL), WaitTimeSeconds: 5})
			require.NoError(t, err)
			require.Len(t, out.Messages, 1, "the redrive policy moved it to the dead-letter queue")
			assert.Equal(t, tc.body, aws.ToString(out.Messages[0].Body))
			got := f.obs.snapshot()
			assert.Zero(t, got.deleted, "a refused message is never deleted")
			assert.Equal(t, 2, got.refused[tc.reason])
			if tc.ingested {
				assert.NotEmpty(t, ing.Calls())
			} else {
				assert.Empty(t, ing.Calls(), "the ingester never sees a message that is not Stripe's")
			}
		})
	}
}

// TestVisibilityTimeoutRedelivers: an ingest that fails leaves the message
// alone; once its visibility timeout expires SQS delivers it again, and
// this time it is ingested and deleted.
func TestVisibilityTimeoutRedelivers(t *testing.T) {
	f := newFixture(t, 2*time.Second, 5)
	detail := stripetest.Event{Fixture: "customer.created"}.Build(t)
	f.send(t, testenv.EventBridgeEvent(t, testenv.StripeSource, detail))
	ing := newRecorder()
	var at []time.Time
	var mu sync.Mutex
	ing.answer = func(n int, _ []byte) error {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		if n == 1 {
			return errors.New("injected: DynamoDB unavailable")
		}
		return nil
	}
	f.start(t, nil, ing)
	waitCalls(t, ing, 2)
	require.Eventually(t, func() bool { return f.obs.snapshot().deleted == 1 }, 10*time.Second, 20*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	assert.GreaterOrEqual(t, at[1].Sub(at[0]), 1500*time.Millisecond, "redelivered after the visibility timeout, not at once")
	calls := ing.Calls()
	assert.Equal(t, calls[0].body, calls[1].body)
	got := f.obs.snapshot()
	assert.Equal(t, 1, got.failed)
	assert.Equal(t, 2, got.received)
	v, n := depth(t, f.client, f.queue.URL)
	assert.Equal(t, [2]int{0, 0}, [2]int{v, n})
}

// TestFailedMessagesBackOff: with FailureBackoff, a message whose ingest
// failed on its n-th receive stays hidden FailureBackoff × 2^(n−1) (here
// 2 s, then 4 s), not the queue's visibility timeout (1 s), so an outage
// spends the redrive policy's receives slowly.
func TestFailedMessagesBackOff(t *testing.T) {
	f := newFixture(t, 1*time.Second, 10)
	f.send(t, testenv.EventBridgeEvent(t, testenv.StripeSource, stripetest.Event{Fixture: "customer.created"}.Build(t)))
	ing := newRecorder()
	var at []time.Time
	var mu sync.Mutex
	ing.answer = func(n int, _ []byte) error {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		if n < 3 {
			return errors.New("injected: Postgres unavailable")
		}
		return nil
	}
	f.startWith(t, eventbridge.Config{FailureBackoff: 2 * time.Second}, nil, ing)
	waitCalls(t, ing, 3)
	require.Eventually(t, func() bool { return f.obs.snapshot().deleted == 1 }, 10*time.Second, 20*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	assert.GreaterOrEqual(t, at[1].Sub(at[0]), 1900*time.Millisecond, "hidden 2 s after the first failure")
	assert.GreaterOrEqual(t, at[2].Sub(at[1]), 3900*time.Millisecond, "hidden 4 s after the second")
	assert.Less(t, at[2].Sub(at[1]), 7*time.Second)
	assert.Equal(t, 2, f.obs.snapshot().failed)
}

// TestPanickingIngestFailsOnlyItsMessage: a panic while ingesting one
// message fails that message (it comes again), not the consumer; the other
// message of the receive is deleted.
func TestPanickingIngestFailsOnlyItsMessage(t *testing.T) {
	f := newFixture(t, 1*time.Second, 5)
	poison := stripetest.Event{Fixture: "customer.created"}.Build(t)
	f.send(t, testenv.EventBridgeEvent(t, testenv.StripeSource, poison))
	f.send(t, testenv.EventBridgeEvent(t, testenv.StripeSource, stripetest.Event{Fixture: "customer.created"}.Build(t)))
	ing := newRecorder()
	var once sync.Once
	ing.answer = func(_ int, body []byte) error {
		if string(body) == compact(t, poison) {
			once.Do(func() { panic("injected fault") })
		}
		return nil
	}
	f.start(t, nil, ing)
	require.Eventually(t, func() bool { return f.obs.snapshot().deleted == 2 }, 15*time.Second, 20*time.Millisecond,
		"the other message at once, the poisoned one once it came again")
	assert.Equal(t, 1, f.obs.snapshot().failed)
	assert.Len(t, ing.Calls(), 3)
}

// dropDeletes is the SQS client of a process that dies between recording
// an event and deleting its message: its deletes never reach SQS.
type dropDeletes struct {
	eventbridge.API
	dropped chan struct{}
}

func (d dropDeletes) DeleteMessageBatch(context.Context, *sqs.DeleteMessageBatchInput, ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	d.dropped <- struct{}{}
	return nil, errors.New("killed before the delete")
}

// TestCrashBeforeDeleteRedelivers: a consumer that records the event and
// dies before deleting its message loses nothing: after the visibility
// timeout another consumer gets the same message (receive count 2) and
// deletes it. (That the handler applies it once is TestEventBridgeRedelivery
// in internal/app.)
func TestCrashBeforeDeleteRedelivers(t *testing.T) {
	f := newFixture(t, 1*time.Second, 5)
	detail := stripetest.Event{Fixture: "customer.created"}.Build(t)
	f.send(t, testenv.EventBridgeEvent(t, testenv.StripeSource, detail))

	first := newRecorder()
	crashing := dropDeletes{API: f.client, dropped: make(chan struct{}, 10)}
	stop := f.start(t, crashing, first)
	select {
	case <-crashing.dropped:
	case <-time.After(15 * time.Second):
		t.Fatal("the first consumer never tried to delete")
	}
	stop()
	require.Len(t, first.Calls(), 1)

	second := newRecorder()
	f.start(t, nil, second)
	waitCalls(t, second, 1)
	require.Eventually(t, func() bool {
		v, n := depth(t, f.client, f.queue.URL)
		return v == 0 && n == 0
	}, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, first.Calls()[0].body, second.Calls()[0].body, "the same event, redelivered")
}

// TestShutdownLetsIngestsFinish: a shutdown while an event is being
// recorded waits for it and deletes its message; a shutdown during the long
// poll returns at once.
func TestShutdownLetsIngestsFinish(t *testing.T) {
	f := newFixture(t, 30*time.Second, 5)
	f.send(t, testenv.EventBridgeEvent(t, testenv.StripeSource, stripetest.Event{Fixture: "customer.created"}.Build(t)))
	ing := newRecorder()
	ing.gate = make(chan struct{})
	stop := f.start(t, nil, ing)
	waitCalls(t, ing, 1)
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Run returned with an ingest in flight")
	case <-time.After(300 * time.Millisecond):
	}
	close(ing.gate)
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the ingest finished")
	}
	v, n := depth(t, f.client, f.queue.URL)
	assert.Equal(t, [2]int{0, 0}, [2]int{v, n}, "the finished ingest's message was deleted")
	assert.Equal(t, 1, f.obs.snapshot().deleted)

	// Idle: the long poll (20 s) is abandoned at once.
	idle := newFixture(t, 30*time.Second, 5)
	c := eventbridge.New(eventbridge.Config{QueueURL: idle.queue.URL}, idle.client, newRecorder(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	cancel()
	select {
	case <-done:
		assert.Less(t, time.Since(start), 2*time.Second)
	case <-time.After(5 * time.Second):
		t.Fatal("Run kept long-polling after shutdown")
	}
}

// shutdownDuringReceive is the SQS client of a process told to stop while a
// receive is answered: the messages arrive after the shutdown began.
type shutdownDuringReceive struct {
	eventbridge.API
	shutdown context.CancelFunc
}

func (s shutdownDuringReceive) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := s.API.ReceiveMessage(context.WithoutCancel(ctx), in, optFns...)
	if err == nil && len(out.Messages) > 0 {
		s.shutdown()
	}
	return out, err
}

// TestShutdownReturnsMessagesNotStarted: messages received after the
// shutdown began are not ingested but made visible again at once, for
// another replica, instead of after the visibility timeout (60 s here).
func TestShutdownReturnsMessagesNotStarted(t *testing.T) {
	f := newFixture(t, 60*time.Second, 5)
	body := testenv.EventBridgeEvent(t, testenv.StripeSource, stripetest.Event{Fixture: "customer.created"}.Build(t))
	f.send(t, body)
	ctx, cancel := context.WithCancel(context.Background())
	ing := newRecorder()
	c := eventbridge.New(eventbridge.Config{QueueURL: f.queue.URL, WaitTime: time.Second},
		shutdownDuringReceive{API: f.client, shutdown: cancel}, ing, f.obs, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
	assert.Empty(t, ing.Calls(), "not started after the shutdown")
	out, err := f.client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(f.queue.URL), WaitTimeSeconds: 2})
	require.NoError(t, err)
	require.Len(t, out.Messages, 1, "back on the queue at once")
	assert.Equal(t, body, aws.ToString(out.Messages[0].Body))
}
