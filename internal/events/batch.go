package events

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// MaxLastError bounds the last_error attribute: an error chain can quote a
// whole payload, and the record must stay small.
const MaxLastError = 1000

// maxBatchWrite is DynamoDB's BatchWriteItem limit.
const maxBatchWrite = 25

// attributes renders a record as DynamoDB attributes by hand: this is the
// ingest hot path, where reflection-based marshalling showed in profiles.
func attributes(r Record) (map[string]types.AttributeValue, error) {
	payload, err := storedPayload(r.Payload)
	if err != nil {
		return nil, err
	}
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	av := map[string]types.AttributeValue{
		"id":             s(r.ID),
		"type":           s(r.Type),
		"stripe_account": s(r.StripeAccount),
		"timestamp":      s(r.Timestamp()),
		"date":           s(r.Date()),
		"time":           s(r.Time()),
		"expiration":     &types.AttributeValueMemberN{Value: strconv.FormatInt(r.Expiration.Unix(), 10)},
		"livemode":       &types.AttributeValueMemberBOOL{Value: r.Livemode},
		"status":         s(string(r.Status)),
		"received_at":    s(r.ReceivedAt.UTC().Format(bookkeepingTimeLayout)),
		"source":         s(string(r.Source)),
		"attempts":       &types.AttributeValueMemberN{Value: strconv.Itoa(r.Attempts)},
	}
	if payload != nil {
		av["payload"] = &types.AttributeValueMemberB{Value: payload}
	}
	if r.Subscription != "" {
		av["subscription"] = s(r.Subscription)
	}
	if r.APIVersion != "" {
		av["api_version"] = s(r.APIVersion)
	}
	if !r.ProcessedAt.IsZero() {
		av["processed_at"] = s(r.ProcessedAt.UTC().Format(bookkeepingTimeLayout))
	}
	if r.LastError != "" {
		av["last_error"] = s(truncate(r.LastError, MaxLastError))
	}
	thinAttributes(r, av)
	return av, nil
}

// PutProcessed writes finished records with BatchWriteItem, 25 per request,
// retrying unprocessed items. The writes are unconditional: callers only
// pass records whose effects Postgres has committed, and a processed record
// is the final state, so overwriting one with another is harmless.
func (s *Store) PutProcessed(ctx context.Context, recs []Record) error {
	// A rejection is written without a claim: a replay may claim its event
	// later, and the write-behind must then read it (see Marker).
	var rejected []string
	for _, r := range recs {
		if r.LastError != "" {
			rejected = append(rejected, r.ID)
		}
	}
	if err := s.mark(ctx, rejected); err != nil {
		return fmt.Errorf("batch write events: %w", err)
	}
	for start := 0; start < len(recs); start += maxBatchWrite {
		chunk := recs[start:min(start+maxBatchWrite, len(recs))]
		writes := make([]types.WriteRequest, 0, len(chunk))
		for _, r := range chunk {
			av, err := attributes(r)
			if err != nil {
				return err
			}
			writes = append(writes, types.WriteRequest{PutRequest: &types.PutRequest{Item: av}})
			// Encoding a batch (gzip above all) is about a millisecond of
			// CPU, and Go preempts a goroutine only after 10 ms: on a small
			// machine the answer path's goroutines queued behind it. Yielding per record
			// took c=1 from ≈ 800 to ≈ 925/s (BENCHMARKS.md, issue 16).
			runtime.Gosched()
		}
		request := map[string][]types.WriteRequest{s.table: writes}
		for attempt := 0; len(request[s.table]) > 0; attempt++ {
			out, err := s.client.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: request})
			if err != nil {
				return fmt.Errorf("batch write events: %w", err)
			}
			request = out.UnprocessedItems
			if len(request[s.table]) > 0 {
				if err := sleep(ctx, backoff(attempt)); err != nil {
					return fmt.Errorf("batch write events: %w", err)
				}
			}
		}
	}
	return nil
}

// RecordFailure leaves a trace of a delivery whose processing failed: the
// record is created as failed, or an existing unprocessed one counts one more
// attempt and takes the error. A processed record is never touched.
func (s *Store) RecordFailure(ctx context.Context, r Record, cause error) error {
	r.Status, r.LastError = StatusFailed, truncate(cause.Error(), MaxLastError)
	av, err := attributes(r)
	if err != nil {
		return err
	}
	// Marked before it is written (see Marker). Without the mark (Postgres
	// failing too) the failure is still recorded, for the API and the
	// console; only its attempt may go uncounted if a claim follows.
	if merr := s.mark(ctx, []string{r.ID}); merr != nil {
		if err := s.recordFailure(ctx, r, av); err != nil {
			return errors.Join(err, merr)
		}
		return fmt.Errorf("failure of %s recorded, not marked for the write-behind (its attempt may go uncounted): %w", r.ID, merr)
	}
	return s.recordFailure(ctx, r, av)
}

func (s *Store) recordFailure(ctx context.Context, r Record, av map[string]types.AttributeValue) error {
	cond := expression.AttributeNotExists(expression.Name("id")).
		Or(expression.Name("expiration").LessThanEqual(expression.Value(s.now().Unix())))
	expr, err := expression.NewBuilder().WithCondition(cond).Build()
	if err != nil {
		return fmt.Errorf("build condition: %w", err)
	}
	_, err = s.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                 aws.String(s.table),
		Item:                      av,
		ConditionExpression:       expr.Condition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	})
	if err == nil {
		return nil
	}
	if !isConditionFailed(err) {
		return fmt.Errorf("record failure of %s: %w", r.ID, err)
	}
	update := expression.Set(expression.Name("status"), expression.Value(string(StatusFailed))).
		Set(expression.Name("last_error"), expression.Value(r.LastError)).
		Add(expression.Name("attempts"), expression.Value(1))
	notProcessed := expression.AttributeExists(expression.Name("id")).
		And(expression.Name("status").NotEqual(expression.Value(string(StatusProcessed))))
	return s.update(ctx, r.ID, update, notProcessed, true)
}

// truncate bounds a string kept on a record.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
