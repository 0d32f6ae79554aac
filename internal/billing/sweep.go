package billing

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// The sweep: a period due while the jobs did not run is still charged or
// marked, never forgotten (DESIGN §8 "Failures"), without a table scan.
//
// The collection job reads the payments index partitions of its date and
// of the days before it. Every item stays in the partition of the date it
// is due on until a job acts on it, so what an outage left behind is in
// the partitions of the days the job missed. One item (PK=SWEEP, SK=<job>)
// keeps a watermark: the last date through which a run left nothing behind
// (no locked account, no error, no unknown outcome). A run reads from the
// earlier of (watermark + 1) and (date − BILLING_LOOKBACK_DAYS) to its
// date, and moves the watermark to two days before its date (an entry of
// the last day may not be due yet in its own time zone) only when it was
// clean. So a daily run reads lookback+1 partitions per shard, as
// before; after an outage of N days the first run reads N of them once
// (periods past BILLING_STALE_DAYS are marked STALE, the others charged,
// the catch-up loop charges what followed); and a run that leaves an
// unknown outcome keeps the watermark where it was, so that period is read
// again on every run until it is resolved, whatever the lookback.
// Without a watermark (the first run), a run reads back
// max(lookback, BILLING_STALE_DAYS) days.
const sweepPK = "SWEEP"

type sweepItem struct {
	PK      string `dynamodbav:"PK"`
	SK      string `dynamodbav:"SK"`
	Type    string `dynamodbav:"Type"`
	Through string `dynamodbav:"Through"`
}

// SweepWatermark reads the date through which job's runs left nothing
// behind (zero: never).
func (s *Store) SweepWatermark(ctx context.Context, job string) (dates.Date, error) {
	var it sweepItem
	err := s.getItem(ctx, sweepPK, job, &it)
	if errors.Is(err, ErrNotFound) {
		return dates.Date{}, nil
	}
	if err != nil {
		return dates.Date{}, err
	}
	d, err := dates.Parse(it.Through)
	if err != nil {
		return dates.Date{}, fmt.Errorf("sweep watermark %q: %w", it.Through, err)
	}
	return d, nil
}

// AdvanceSweep moves job's watermark to through, never backwards.
func (s *Store) AdvanceSweep(ctx context.Context, job string, through dates.Date) error {
	av, err := attributevalue.MarshalMap(sweepItem{PK: sweepPK, SK: job, Type: "SWEEP", Through: through.String()})
	if err != nil {
		return err
	}
	cond := expression.AttributeNotExists(expression.Name("PK")).Or(expression.Name("Through").LessThan(expression.Value(through.String())))
	expr, err := expression.NewBuilder().WithCondition(cond).Build()
	if err != nil {
		return err
	}
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: av,
		ConditionExpression: expr.Condition(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values()})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil // already at or past through
	}
	if err != nil {
		return fmt.Errorf("advance sweep watermark: %w", err)
	}
	return nil
}

// sweepFrom is the oldest partition date a run of job for date reads.
func (s *Service) sweepFrom(ctx context.Context, job string, date dates.Date) (dates.Date, error) {
	from := date.AddDays(-s.cfg.LookbackDays)
	wm, err := s.store.SweepWatermark(ctx, job)
	if err != nil {
		return from, fmt.Errorf("%s: %w", job, err)
	}
	if wm.IsZero() {
		return date.AddDays(-max(s.cfg.LookbackDays, s.cfg.Retry.StaleDays)), nil
	}
	if next := wm.AddDays(1); next.Before(from) {
		return next, nil
	}
	return from, nil
}
