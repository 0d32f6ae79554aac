package trigger

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
)

// QueueAPI is the part of the SQS client the consumer uses (*sqs.Client);
// internal/dynamo's IAM parity test reads these calls from this package and
// compares them with terraform/triggers.tf.
type QueueAPI interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// QueueConfig of a Consumer.
type QueueConfig struct {
	QueueURL string
	// WaitTime is the long poll's wait (0 or over 20 s: 20 s).
	WaitTime time.Duration
	// RequestTimeout bounds a record, delete or change-visibility (0: 10 s).
	RequestTimeout time.Duration
	// Backoff after a failed receive doubles from Backoff (0: 1 s) up to
	// 30 s; FailureBackoff hides a message whose trigger could not be
	// recorded (0: 30 s) before it comes again.
	Backoff, FailureBackoff time.Duration
}

// Consumer long-polls BILLING_TRIGGERS_QUEUE_URL and records each
// message's trigger through the Intake.
type Consumer struct {
	cfg    QueueConfig
	api    QueueAPI
	intake *Intake
	log    *slog.Logger
}

// NewConsumer returns a consumer of cfg.QueueURL.
func NewConsumer(cfg QueueConfig, api QueueAPI, intake *Intake, log *slog.Logger) *Consumer {
	if cfg.WaitTime <= 0 || cfg.WaitTime > 20*time.Second {
		cfg.WaitTime = 20 * time.Second
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = time.Second
	}
	if cfg.FailureBackoff <= 0 {
		cfg.FailureBackoff = 30 * time.Second
	}
	return &Consumer{cfg: cfg, api: api, intake: intake, log: log.With("queue_url", cfg.QueueURL)}
}

// Check reads the queue's attributes: a queue without a redrive policy
// would keep a refused message for good instead of moving it to a
// dead-letter queue. It says so in an error.
func (c *Consumer) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	out, err := c.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(c.cfg.QueueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameRedrivePolicy}})
	if err != nil {
		return fmt.Errorf("billing triggers queue %s: %w", c.cfg.QueueURL, err)
	}
	if out.Attributes[string(types.QueueAttributeNameRedrivePolicy)] == "" {
		return fmt.Errorf("billing triggers queue %s has no redrive policy: a message that is not a trigger would stay on it for good", c.cfg.QueueURL)
	}
	return nil
}

// Run receives and records triggers until ctx is done; the messages in
// hand finish first.
func (c *Consumer) Run(ctx context.Context) {
	backoff := c.cfg.Backoff
	for ctx.Err() == nil {
		msgs, err := c.receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.log.Error("billing triggers: receive failed; retrying", "error", err, "backoff", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = c.cfg.Backoff
		if len(msgs) == 0 {
			continue
		}
		if ctx.Err() != nil {
			// Not started: give them back at once for another replica.
			c.setVisibility(msgs, 0, "give back at shutdown")
			return
		}
		c.handle(ctx, msgs)
	}
}

func (c *Consumer) receive(ctx context.Context) ([]types.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.WaitTime+c.cfg.RequestTimeout)
	defer cancel()
	out, err := c.api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(c.cfg.QueueURL),
		MaxNumberOfMessages:         10,
		WaitTimeSeconds:             int32(c.cfg.WaitTime / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
	})
	if err != nil {
		return nil, fmt.Errorf("receive from %s: %w", c.cfg.QueueURL, err)
	}
	return out.Messages, nil
}

// result of one message.
type result int

const (
	recorded result = iota // delete it
	refused                // leave it to the redrive policy
	failed                 // hide it for FailureBackoff, then again
)

func (c *Consumer) handle(ctx context.Context, msgs []types.Message) {
	results := make([]result, len(msgs))
	var wg sync.WaitGroup
	for i := range msgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = c.one(ctx, msgs[i])
		}()
	}
	wg.Wait()
	var del, back []types.Message
	for i, r := range results {
		switch r {
		case recorded:
			del = append(del, msgs[i])
		case failed:
			back = append(back, msgs[i])
		}
	}
	c.delete(del)
	if len(back) > 0 {
		c.setVisibility(back, c.cfg.FailureBackoff, "back off after a failure")
	}
}

// one records one message's trigger; the record is detached from ctx's
// cancellation (a shutdown lets it finish, so the message can be deleted).
func (c *Consumer) one(ctx context.Context, m types.Message) (res result) {
	defer func() {
		if v := recover(); v != nil {
			c.log.Error("billing triggers: a message panicked; it comes again after its visibility timeout",
				"message_id", aws.ToString(m.MessageId), "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			res = failed
		}
	}()
	count, _ := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	log := c.log.With("message_id", aws.ToString(m.MessageId), "receive_count", count)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.RequestTimeout)
	defer cancel()
	body := aws.ToString(m.Body)
	t, eventID, err := ParseEvent([]byte(body))
	if err == nil {
		_, _, err = c.intake.Accept(rctx, t, SourceQueue, eventID)
		if errors.Is(err, ErrReferenceConflict) {
			err = &Refusal{Reason: ReasonConflict, Err: err}
		}
	}
	var ref *Refusal
	switch {
	case errors.As(err, &ref):
		c.refuse(rctx, log, m, ref, body, count)
		return refused
	case err != nil:
		log.Warn("billing triggers: could not record the trigger; the message comes again", "error", err, "visibility", c.cfg.FailureBackoff)
		return failed
	}
	return recorded
}

// refuse keeps why a message is not a trigger (the message itself stays
// for the dead-letter redrive: it is never deleted silently).
func (c *Consumer) refuse(ctx context.Context, log *slog.Logger, m types.Message, ref *Refusal, body string, count int) {
	if c.intake.Observer != nil {
		c.intake.Observer.Refused(ref.Reason)
	}
	log.Error("billing triggers: message refused; it stays on the queue for the dead-letter redrive", "reason", ref.Reason, "error", ref.Err)
	id := aws.ToString(m.MessageId)
	if id == "" {
		return
	}
	if err := c.intake.Store.RecordRefusal(ctx, id, ref, body, count); err != nil {
		log.Warn("billing triggers: could not record the refusal (the log line above says why)", "error", err)
	}
}

// delete removes messages whose triggers are recorded; a delete that
// fails leaves the message to come again, a duplicate reference then.
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
		c.log.Warn("billing triggers: delete failed; the recorded triggers will come again as duplicates", "error", err, "messages", len(msgs))
		return
	}
	for _, f := range out.Failed {
		c.log.Warn("billing triggers: delete failed; the recorded trigger will come again as a duplicate",
			"code", aws.ToString(f.Code), "message", aws.ToString(f.Message))
	}
}

func (c *Consumer) setVisibility(msgs []types.Message, d time.Duration, why string) {
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle,
			VisibilityTimeout: int32(d / time.Second)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
	defer cancel()
	if _, err := c.api.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(c.cfg.QueueURL),
		Entries: entries}); err != nil {
		c.log.Warn("billing triggers: could not change visibility; the messages keep the one they have", "why", why, "error", err)
	}
}
