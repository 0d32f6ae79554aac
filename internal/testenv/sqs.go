package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/uuid"

	"github.com/stripe-payments/stripe-payments/internal/eventbridge"
)

// SQSEndpoint is the local SQS server of the stack (SQS_ENDPOINT; fauxqs,
// started by scripts/devstack.sh). Unset or not answering fails the test.
func SQSEndpoint(t testing.TB) string {
	t.Helper()
	return require(t, "SQS_ENDPOINT")
}

// SQS returns a client for the local SQS server, checked to answer.
func SQS(t testing.TB) *sqs.Client {
	t.Helper()
	region := os.Getenv("AWS_REGION")
	if region == "" {
		region = "us-east-1"
	}
	client, err := eventbridge.NewClient(context.Background(), region, SQSEndpoint(t))
	if err != nil {
		t.Fatalf("sqs client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.ListQueues(ctx, &sqs.ListQueuesInput{MaxResults: aws.Int32(1)}); err != nil {
		t.Fatalf("the local SQS server at %s does not answer (start it with scripts/devstack.sh up): %v", SQSEndpoint(t), err)
	}
	return client
}

// Queue is a queue of one test, with its dead-letter queue.
type Queue struct {
	URL, ARN       string
	DLQURL, DLQARN string
}

// CreateQueue creates a queue unique to this test whose messages move to a
// dead-letter queue of its own after maxReceives receives (as Terraform's
// redrive policy does), with the given visibility timeout; both are deleted
// when the test ends.
func CreateQueue(t testing.TB, client *sqs.Client, visibility time.Duration, maxReceives int) Queue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := "t-eventbridge-" + uuid.NewString()[:13]
	create := func(name string, attrs map[string]string) (string, string) {
		out, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
		if err != nil {
			t.Fatalf("create queue %s: %v", name, err)
		}
		url := aws.ToString(out.QueueUrl)
		t.Cleanup(func() {
			_, _ = client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(url)})
		})
		got, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
		if err != nil {
			t.Fatalf("queue %s attributes: %v", name, err)
		}
		return url, got.Attributes[string(types.QueueAttributeNameQueueArn)]
	}
	var q Queue
	q.DLQURL, q.DLQARN = create(name+"-dlq", nil)
	q.URL, q.ARN = create(name, map[string]string{
		"VisibilityTimeout": strconv.Itoa(int(visibility / time.Second)),
		"RedrivePolicy":     fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, q.DLQARN, maxReceives),
	})
	return q
}

// EventBridgeEvent is the SQS message body an EventBridge rule delivers for
// an event with this source and detail, in EventBridge's envelope (the
// detail-type is the Stripe event's type, as Stripe sets it).
func EventBridgeEvent(t testing.TB, source string, detail []byte) string {
	t.Helper()
	var typ struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(detail, &typ)
	env := map[string]any{
		"version":     "0",
		"id":          uuid.NewString(),
		"detail-type": typ.Type,
		"source":      source,
		"account":     "111122223333",
		"time":        time.Now().UTC().Format(time.RFC3339),
		"region":      "us-east-1",
		"resources":   []string{},
		"detail":      json.RawMessage(detail),
	}
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatalf("eventbridge envelope: %v", err)
	}
	return string(b)
}

// StripeSource is a partner event source as Stripe names it.
const StripeSource = "aws.partner/stripe.com/ed_test_61RM8ltWcTW4mbsxf16RJyfa2xSQLHJJh1sxm7H0KVT6"
