package app_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// BenchmarkIngest measures one full ingest through the real server: HTTP,
// signature check, DynamoDB record, Postgres ledger transaction, mark
// processed. BenchmarkRawConditionalPut is its baseline: the storage write
// that every ingest must make at least once.
func BenchmarkIngest(b *testing.B) {
	a := startApp(b, nil, nil)
	url := a.Server.URL() + "/webhooks/stripe"
	payloads := make([][]byte, b.N)
	for i := range payloads {
		payloads[i] = stripetest.Event{Fixture: "payment_intent.succeeded"}.Build(b)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(payloads[i]))
		req.Header.Set("Stripe-Signature", stripetest.Sign(payloads[i], secret, time.Now()))
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

func BenchmarkRawConditionalPut(b *testing.B) {
	a := startApp(b, nil, nil)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, err := a.Dynamo.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(a.Config.EventsTable),
			Item: map[string]types.AttributeValue{
				"id":      &types.AttributeValueMemberS{Value: stripetest.NewID()},
				"payload": &types.AttributeValueMemberB{Value: bytes.Repeat([]byte("x"), 600)},
			},
			ConditionExpression: aws.String("attribute_not_exists(id)"),
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
