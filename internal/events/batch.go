package events

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
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
// retrying unprocessed items. These writes are unconditional: callers only
// pass records whose effects Postgres has committed, and a processed record
// is the final state, so overwriting one with another is harmless. Records
// with IfAbsent or IfUnchanged are written on condition instead (see
// putIfAbsent), and when the table holds something else for some of their
// events PutProcessed writes everything else and answers a
// *NotWrittenError naming those.
func (s *Store) PutProcessed(ctx context.Context, recs []Record) error {
	// A rejection is written without a claim: a replay may claim its event
	// later, and the write-behind must then read it (see Marker).
	var rejected []string
	var plain, ifAbsent []Record
	for _, r := range recs {
		if r.LastError != "" {
			rejected = append(rejected, r.ID)
		}
		if r.IfAbsent || r.IfUnchanged != nil {
			ifAbsent = append(ifAbsent, r)
		} else {
			plain = append(plain, r)
		}
	}
	if err := s.mark(ctx, rejected); err != nil {
		return fmt.Errorf("batch write events: %w", err)
	}
	if err := s.batchWrite(ctx, plain); err != nil {
		return err
	}
	refused, err := s.putIfAbsent(ctx, ifAbsent, maxTxWrite)
	if err != nil {
		return err
	}
	if len(refused) > 0 {
		return &NotWrittenError{IDs: refused}
	}
	return nil
}

// NotWrittenError names the records PutProcessed did not write because the
// table held a record of their event and they were IfAbsent, or another
// record than their IfUnchanged: the caller reads those (again) and writes
// them superseded (Supersede).
type NotWrittenError struct{ IDs []string }

func (e *NotWrittenError) Error() string {
	return fmt.Sprintf("%d event records not written: the table holds a record of their events", len(e.IDs))
}

// batchWrite writes recs unconditionally, 25 per BatchWriteItem.
func (s *Store) batchWrite(ctx context.Context, recs []Record) error {
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
			// took c=1 from ≈ 800 to ≈ 925/s (BENCHMARKS.md).
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

// maxTxWrite bounds the items of one TransactWriteItems request (DynamoDB
// allows 100) and maxTxBytes its size (DynamoDB allows 4 MB).
const (
	maxTxWrite = 100
	maxTxBytes = 3 << 20
)

// freshCondition is what a fresh record may be written over: nothing, or
// an expired record (DynamoDB deletes those only eventually; readers treat
// them as absent). A failed or rejected record, or a processed one, makes
// the put fail, and the writer reads it first.
func (s *Store) freshCondition() (expression.Expression, error) {
	cond := expression.AttributeNotExists(expression.Name("id")).
		Or(expression.Name("expiration").LessThanEqual(expression.Value(s.now().Unix())))
	expr, err := expression.NewBuilder().WithCondition(cond).Build()
	if err != nil {
		return expression.Expression{}, fmt.Errorf("build condition: %w", err)
	}
	return expr, nil
}

// condition is what r may be written over: fresh (freshCondition), or,
// with IfUnchanged, the record read before, unchanged. Every other write
// of a record changes one of the three attributes compared: a failure
// recorded adds an attempt, a processed record sets the status or (a
// supersede) the attempts, a rejection the last_error.
func condition(r Record, fresh expression.Expression) (expression.Expression, error) {
	prev := r.IfUnchanged
	if prev == nil {
		return fresh, nil
	}
	// As read: stored truncated already, compared as it is.
	lastError := expression.AttributeNotExists(expression.Name("last_error"))
	if prev.LastError != "" {
		lastError = expression.Name("last_error").Equal(expression.Value(prev.LastError))
	}
	cond := expression.Name("attempts").Equal(expression.Value(prev.Attempts)).
		And(expression.Name("status").Equal(expression.Value(string(prev.Status))), lastError)
	expr, err := expression.NewBuilder().WithCondition(cond).Build()
	if err != nil {
		return expression.Expression{}, fmt.Errorf("build condition of %s: %w", r.ID, err)
	}
	return expr, nil
}

// putIfAbsent writes records that the caller believes have no earlier
// version in the table (the write-behind's rows inserted by their event's
// claim and not marked), each on the condition that the table holds no
// record of that event (freshCondition), at most perTx a transaction. The
// belief can be wrong: a failure recorded while Postgres was down or by an
// older replica goes unmarked, and one can race the writer between its
// load and this put. The condition makes that harmless: putIfAbsent
// answers the ids it did not write. Records with IfUnchanged
// are written the same way, each on its own condition (condition).
//
// TransactWriteItems because BatchWriteItem takes no conditions; 100 a
// transaction cost DynamoDB Local less CPU per record than BatchWriteItem
// of 25 and conditional PutItems far more (BENCHMARKS.md).
func (s *Store) putIfAbsent(ctx context.Context, recs []Record, perTx int) (refused []string, err error) {
	if len(recs) == 0 {
		return nil, nil
	}
	fresh, err := s.freshCondition()
	if err != nil {
		return nil, err
	}
	if s.itemPuts {
		return s.putEachIfAbsent(ctx, recs, fresh)
	}
	var items []types.TransactWriteItem
	var ids []string
	size := 0
	send := func() error {
		more, err := s.transactFresh(ctx, items, ids)
		refused = append(refused, more...)
		items, ids, size = nil, nil, 0
		return err
	}
	for _, r := range recs {
		av, err := attributes(r)
		if err != nil {
			return refused, err
		}
		expr, err := condition(r, fresh)
		if err != nil {
			return refused, err
		}
		// A full transaction goes before this item, which starts the next:
		// built once (its payload's gzip is most of the work).
		n := itemSize(av)
		if len(items) == perTx || (len(items) > 0 && size+n > maxTxBytes) {
			if err := send(); err != nil {
				return refused, err
			}
		}
		size += n
		items = append(items, types.TransactWriteItem{Put: &types.Put{
			TableName: aws.String(s.table), Item: av,
			ConditionExpression: expr.Condition(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
		}})
		ids = append(ids, r.ID)
		runtime.Gosched() // see batchWrite
	}
	if len(items) > 0 {
		if err := send(); err != nil {
			return refused, err
		}
	}
	return refused, nil
}

// maxItemPuts bounds the conditional PutItems of one putEachIfAbsent in
// flight.
const maxItemPuts = 25

// putEachIfAbsent is putIfAbsent with one conditional PutItem a record
// (WithItemPuts).
func (s *Store) putEachIfAbsent(ctx context.Context, recs []Record, fresh expression.Expression) (refused []string, err error) {
	type result struct {
		id      string
		refused bool
		err     error
	}
	results := make(chan result, len(recs))
	slots := make(chan struct{}, maxItemPuts)
	var wg sync.WaitGroup
	for _, r := range recs {
		av, err := attributes(r)
		var expr expression.Expression
		if err == nil {
			expr, err = condition(r, fresh)
		}
		if err != nil {
			wg.Wait()
			return nil, err
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			_, err := s.client.PutItem(ctx, &dynamodb.PutItemInput{
				TableName: aws.String(s.table), Item: av,
				ConditionExpression: expr.Condition(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
			})
			switch {
			case isConditionFailed(err):
				results <- result{id: r.ID, refused: true}
			case err != nil:
				results <- result{id: r.ID, err: fmt.Errorf("write fresh event %s: %w", r.ID, err)}
			}
		}()
		runtime.Gosched() // see batchWrite
	}
	wg.Wait()
	close(results)
	var errs []error
	for res := range results {
		if res.refused {
			refused = append(refused, res.id)
		}
		if res.err != nil {
			errs = append(errs, res.err)
		}
	}
	return refused, errors.Join(errs...)
}

// transactFresh writes items (the puts of ids) in one transaction, again
// without the items whose condition failed (answered) when the transaction
// is cancelled, and again after a backoff when no item was refused by its
// condition: it conflicted with another write of the same items (a failure
// being recorded), was throttled, or was cancelled for no reason it names.
// Backoffs are counted: the ninth round without progress is an error.
func (s *Store) transactFresh(ctx context.Context, items []types.TransactWriteItem, ids []string) (refused []string, err error) {
	for waits := 0; len(items) > 0; {
		_, err := s.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if err == nil {
			return refused, nil
		}
		var tce *types.TransactionCanceledException
		if !errors.As(err, &tce) || len(tce.CancellationReasons) != len(items) {
			return refused, fmt.Errorf("write fresh events: %w", err)
		}
		keep, keepIDs := items[:0:0], ids[:0:0]
		for i, why := range tce.CancellationReasons {
			switch aws.ToString(why.Code) {
			case "ConditionalCheckFailed":
				refused = append(refused, ids[i])
				continue
			case "None", "", "TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded":
				// Not this item's doing, or a failure being recorded, or
				// throttling: again (later, unless another item was refused).
			case "ValidationError":
				// The item itself is refused: the API error a plain write
				// would get, so the write-behind isolates and quarantines it
				// instead of taking the table for down.
				return refused, fmt.Errorf("write fresh event %s: %w (%v)", ids[i],
					&smithy.GenericAPIError{Code: "ValidationException", Message: aws.ToString(why.Message), Fault: smithy.FaultClient}, err)
			case "ItemCollectionSizeLimitExceeded":
				return refused, fmt.Errorf("write fresh event %s: %w (%v)", ids[i],
					&smithy.GenericAPIError{Code: "ItemCollectionSizeLimitExceededException", Message: aws.ToString(why.Message), Fault: smithy.FaultClient}, err)
			default:
				return refused, fmt.Errorf("write fresh event %s: %s: %w", ids[i], aws.ToString(why.Code), err)
			}
			keep, keepIDs = append(keep, items[i]), append(keepIDs, ids[i])
		}
		progressed := len(keep) < len(items) // an item refused by its condition left
		items, ids = keep, keepIDs
		if progressed || len(items) == 0 {
			continue // the rest again at once: their transaction lost only the refused
		}
		if waits >= 8 {
			return refused, fmt.Errorf("write fresh events: still cancelled (conflict, throttling or no reason) after %d attempts: %w", waits+1, err)
		}
		if err := sleep(ctx, backoff(waits)); err != nil {
			return refused, fmt.Errorf("write fresh events: %w", err)
		}
		waits++
	}
	return refused, nil
}

// itemSize estimates an item's size as DynamoDB counts it (names and
// values), to keep a transaction under its 4 MB.
func itemSize(av map[string]types.AttributeValue) int {
	n := 0
	for k, v := range av {
		n += len(k) + 8
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			n += len(v.Value)
		case *types.AttributeValueMemberB:
			n += len(v.Value)
		case *types.AttributeValueMemberN:
			n += len(v.Value)
		}
	}
	return n
}
