package testenv

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/uuid"
)

// CreateFIFOQueue creates a FIFO queue unique to this test (the billing
// queue's kind) whose messages move to a FIFO dead-letter queue of its own
// after maxReceives receives, as Terraform's redrive policy does; both are
// deleted when the test ends.
func CreateFIFOQueue(t testing.TB, client *sqs.Client, visibility time.Duration, maxReceives int) Queue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := "t-billing-" + uuid.NewString()[:13]
	create := func(name string, attrs map[string]string) (string, string) {
		attrs["FifoQueue"] = "true"
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
	q.DLQURL, q.DLQARN = create(name+"-dlq.fifo", map[string]string{})
	q.URL, q.ARN = create(name+".fifo", map[string]string{
		"VisibilityTimeout": strconv.Itoa(int(visibility / time.Second)),
		"RedrivePolicy":     fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, q.DLQARN, maxReceives),
	})
	return q
}
