// Package eventbridge is the EventBridge intake (docs/design.md §4): with
// EVENTBRIDGE_QUEUE_URL set, `serve` long-polls the SQS queue that an
// EventBridge rule on Stripe's partner event bus targets. Each message is an
// EventBridge event whose detail is a Stripe event, snapshot or thin; it is
// handed to the ingester exactly as a verified webhook delivery would be
// (AWS authenticates the partner source: there is no signature), with
// source `eventbridge`.
//
// At least once, never lost: a message is deleted only after the ingester
// returned, that is after its event was durably recorded (and, for a
// snapshot event, processed). A failure leaves the message to the queue's
// visibility timeout, which redelivers it, and to its redrive policy, which
// moves a message that keeps failing to the dead-letter queue. The failed
// message's visibility timeout grows with its receive count (FailureBackoff),
// so that an outage of the stores spends the redrive's receives over hours,
// as Stripe spreads a webhook's retries, not over minutes. A redelivery
// of an event already processed is a duplicate for the handler: its effects
// apply once. A message that is not Stripe's (another source, or a detail
// that is not a Stripe event) is refused: never deleted, it reaches the
// dead-letter queue the same way.
//
// Shutdown: the long poll is abandoned; messages being ingested finish and
// are deleted; messages received but not started are made visible again at
// once (ChangeMessageVisibility to 0) for another replica.
package eventbridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// Ingester takes one Stripe event (snapshot or thin) that needs no
// signature check, as the webhook takes a verified body: it returns once the
// event is durably recorded (a snapshot event: also processed). An error
// wrapping stripeevent.ErrMalformed says the body is not a Stripe event
// (the message is refused); any other error is a failure to retry.
type Ingester interface {
	Ingest(ctx context.Context, body []byte, source stripeevent.Source) (stripeevent.Outcome, error)
}

// API is the part of the SQS client the consumer uses (*sqs.Client). The
// IAM parity test (internal/dynamo) reads these calls from this package and
// compares them with terraform/eventbridge.tf.
type API interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
}

// Observer is told what happens to messages (metrics).
type Observer interface {
	// Received: n messages came in one receive.
	Received(n int)
	// Refused: a message that is not Stripe's was left to the redrive
	// policy, for reason (ReasonEnvelope, ReasonSource, ReasonDetail).
	Refused(reason string)
	// Failed: a message's ingest failed; it is left to the visibility
	// timeout.
	Failed()
	// Deleted: n messages were deleted, their events recorded.
	Deleted(n int)
}

// Defaults of Config.
const (
	DefaultMaxMessages    = 10 // SQS's maximum per receive
	DefaultWaitTime       = 20 * time.Second
	DefaultReceivers      = 1
	DefaultIngestTimeout  = 30 * time.Second
	DefaultRequestTimeout = 10 * time.Second
	// DefaultFailureBackoff is serve's FailureBackoff: with the redrive's
	// 10 receives (terraform/), a message that fails every time reaches the
	// dead-letter queue after about 8.5 hours (30 s × (2^10 − 1)).
	DefaultFailureBackoff = 30 * time.Second
)

// Config of a Consumer.
type Config struct {
	QueueURL string
	// MaxMessages per receive (1–10).
	MaxMessages int32
	// WaitTime is the long poll's wait (at most 20 s).
	WaitTime time.Duration
	// VisibilityTimeout, when set, overrides the queue's for the messages
	// received; zero keeps the queue's (Terraform sets it).
	VisibilityTimeout time.Duration
	// Receivers is how many receive loops run at once.
	Receivers int
	// IngestTimeout bounds one message's ingest; it runs to the end even
	// during shutdown, so that the message can be deleted.
	IngestTimeout time.Duration
	// RequestTimeout bounds a delete or change-visibility call.
	RequestTimeout time.Duration
	// Backoff after a failed receive: doubles from Backoff up to MaxBackoff.
	Backoff, MaxBackoff time.Duration
	// FailureBackoff: a message whose ingest failed on its n-th receive is
	// hidden for FailureBackoff × 2^(n−1), at most MaxFailureBackoff,
	// instead of the queue's visibility timeout. Zero leaves it to the
	// queue's.
	FailureBackoff, MaxFailureBackoff time.Duration
}

// MaxVisibility is below SQS's limit of a message's visibility, 12 hours
// from its receipt.
const MaxVisibility = 11 * time.Hour

// Consumer long-polls one queue and ingests its messages.
type Consumer struct {
	cfg      Config
	api      API
	ingester Ingester
	observer Observer
	log      *slog.Logger
}

// New returns a consumer; observer may be nil.
func New(cfg Config, api API, ingester Ingester, observer Observer, log *slog.Logger) *Consumer {
	if cfg.MaxMessages <= 0 || cfg.MaxMessages > 10 {
		cfg.MaxMessages = DefaultMaxMessages
	}
	if cfg.WaitTime <= 0 || cfg.WaitTime > 20*time.Second {
		cfg.WaitTime = DefaultWaitTime
	}
	if cfg.Receivers <= 0 {
		cfg.Receivers = DefaultReceivers
	}
	if cfg.IngestTimeout <= 0 {
		cfg.IngestTimeout = DefaultIngestTimeout
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = time.Second
	}
	if cfg.MaxBackoff < cfg.Backoff {
		cfg.MaxBackoff = 30 * time.Second
	}
	if cfg.MaxFailureBackoff <= 0 || cfg.MaxFailureBackoff > MaxVisibility {
		cfg.MaxFailureBackoff = MaxVisibility
	}
	if observer == nil {
		observer = nopObserver{}
	}
	return &Consumer{cfg: cfg, api: api, ingester: ingester, observer: observer, log: log.With("queue_url", cfg.QueueURL)}
}

// Run receives and ingests messages until ctx is done, then lets the
// messages in hand finish (each within IngestTimeout) and returns.
func (c *Consumer) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range c.cfg.Receivers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.loop(ctx)
		}()
	}
	wg.Wait()
}

func (c *Consumer) loop(ctx context.Context) {
	backoff := c.cfg.Backoff
	for ctx.Err() == nil {
		msgs, err := c.receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.log.Error("eventbridge: receive failed; retrying", "error", err, "backoff", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, c.cfg.MaxBackoff)
			continue
		}
		backoff = c.cfg.Backoff
		if len(msgs) == 0 {
			continue
		}
		c.observer.Received(len(msgs))
		if ctx.Err() != nil {
			// Shut down while the answer came: not started, so give them
			// back at once rather than after the visibility timeout.
			c.release(msgs)
			return
		}
		c.handle(ctx, msgs)
	}
}

func (c *Consumer) receive(ctx context.Context) ([]types.Message, error) {
	in := &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(c.cfg.QueueURL),
		MaxNumberOfMessages:         c.cfg.MaxMessages,
		WaitTimeSeconds:             int32(c.cfg.WaitTime / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
	}
	if c.cfg.VisibilityTimeout > 0 {
		in.VisibilityTimeout = int32(c.cfg.VisibilityTimeout / time.Second)
	}
	// A long poll answers within WaitTime; an endpoint that stops answering
	// must not stall the loop forever.
	ctx, cancel := context.WithTimeout(ctx, c.cfg.WaitTime+c.cfg.RequestTimeout)
	defer cancel()
	out, err := c.api.ReceiveMessage(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("receive from %s: %w", c.cfg.QueueURL, err)
	}
	return out.Messages, nil
}

// handle ingests a receive's messages concurrently (so that the handler
// commits them as one group) and deletes those whose events are recorded.
func (c *Consumer) handle(ctx context.Context, msgs []types.Message) {
	results := make([]result, len(msgs))
	var wg sync.WaitGroup
	for i := range msgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = c.ingest(ctx, msgs[i])
		}()
	}
	wg.Wait()
	var del, failed []types.Message
	for i, r := range results {
		switch r {
		case recorded:
			del = append(del, msgs[i])
		case failedIt:
			failed = append(failed, msgs[i])
		}
	}
	c.delete(del)
	c.backOff(failed)
}

// result of one message's ingest.
type result int

const (
	recorded  result = iota // delete it
	refusedIt               // leave it to the redrive
	failedIt                // hide it for its backoff, then again
)

// ingest hands one message's event to the ingester. The ingest is
// detached from ctx's cancellation (a shutdown lets it finish) and bounded
// by IngestTimeout.
func (c *Consumer) ingest(ctx context.Context, m types.Message) (res result) {
	defer func() {
		// As the webhook's server does: a panic fails this message only.
		if v := recover(); v != nil {
			c.observer.Failed()
			c.log.Error("eventbridge: ingest panicked; the message comes again after its visibility timeout",
				"message_id", aws.ToString(m.MessageId), "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			res = failedIt
		}
	}()
	log := c.log.With("message_id", aws.ToString(m.MessageId), "receive_count", m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	env, err := ParseEnvelope([]byte(aws.ToString(m.Body)))
	if err != nil {
		c.refused(log, err)
		return refusedIt
	}
	log = log.With("eventbridge_id", env.ID, "detail_type", env.DetailType)
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.IngestTimeout)
	defer cancel()
	outcome, err := c.ingester.Ingest(ictx, env.Detail, stripeevent.SourceEventBridge)
	switch {
	case errors.Is(err, stripeevent.ErrMalformed):
		c.refused(log, refuse(ReasonDetail, "%w", err))
		return refusedIt
	case err != nil:
		c.observer.Failed()
		log.Warn("eventbridge: ingest failed; the message comes again after its visibility timeout",
			"error", err, "outcome", string(outcome), "visibility", c.visibility(m))
		return failedIt
	}
	log.Debug("eventbridge: event ingested", "outcome", string(outcome))
	return recorded
}

// visibility is how long a message that failed stays hidden: 0 leaves it
// to the queue's visibility timeout.
func (c *Consumer) visibility(m types.Message) time.Duration {
	if c.cfg.FailureBackoff <= 0 {
		return 0
	}
	n, err := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	if err != nil || n < 1 {
		n = 1
	}
	d := c.cfg.FailureBackoff
	for i := 1; i < n && d < c.cfg.MaxFailureBackoff; i++ {
		d *= 2
	}
	return min(d, c.cfg.MaxFailureBackoff)
}

func (c *Consumer) refused(log *slog.Logger, err error) {
	c.observer.Refused(Reason(err))
	log.Error("eventbridge: message refused; it stays on the queue for the dead-letter redrive", "error", err)
}

// delete removes messages whose events are recorded. A delete that fails
// leaves the message to come again: the handler finds it a duplicate.
func (c *Consumer) delete(msgs []types.Message) {
	if len(msgs) == 0 {
		return
	}
	entries := make([]types.DeleteMessageBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
	defer cancel()
	out, err := c.api.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(c.cfg.QueueURL), Entries: entries})
	if err != nil {
		c.log.Warn("eventbridge: delete failed; the recorded events will come again as duplicates", "error", err, "messages", len(msgs))
		return
	}
	for _, f := range out.Failed {
		c.log.Warn("eventbridge: delete failed; the recorded event will come again as a duplicate",
			"code", aws.ToString(f.Code), "message", aws.ToString(f.Message))
	}
	c.observer.Deleted(len(out.Successful))
}

// release makes messages visible again at once.
func (c *Consumer) release(msgs []types.Message) {
	c.setVisibility(msgs, func(types.Message) time.Duration { return 0 }, "give back at shutdown")
}

// backOff hides failed messages for their backoff (FailureBackoff).
func (c *Consumer) backOff(msgs []types.Message) {
	if len(msgs) == 0 || c.cfg.FailureBackoff <= 0 {
		return
	}
	c.setVisibility(msgs, c.visibility, "back off after a failure")
}

// setVisibility changes the visibility timeout of msgs; a failure only
// leaves them to the one they have.
func (c *Consumer) setVisibility(msgs []types.Message, d func(types.Message) time.Duration, why string) {
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle,
			VisibilityTimeout: int32(d(m) / time.Second)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
	defer cancel()
	out, err := c.api.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(c.cfg.QueueURL), Entries: entries})
	if err != nil {
		c.log.Warn("eventbridge: could not change visibility; the messages keep the one they have", "why", why, "error", err, "messages", len(msgs))
		return
	}
	if len(out.Failed) > 0 {
		c.log.Warn("eventbridge: could not change the visibility of some messages; they keep the one they have", "why", why, "messages", len(out.Failed))
	}
}

type nopObserver struct{}

func (nopObserver) Received(int)   {}
func (nopObserver) Refused(string) {}
func (nopObserver) Failed()        {}
func (nopObserver) Deleted(int)    {}
