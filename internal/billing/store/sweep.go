package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// The sweep watermark (internal/billing/sweep.go says what it is for): one
// item, PK=SWEEP, SK=<job>, holds the last date through which a run of job
// left nothing behind.
const sweepPK = "SWEEP"

type sweepItem struct {
	PK      string `dynamodbav:"PK"`
	SK      string `dynamodbav:"SK"`
	Type    string `dynamodbav:"Type"`
	Through string `dynamodbav:"Through"`
}

// SweepWatermark reads the date through which job's runs left nothing
// behind (zero: never).
func (s *sweeps) SweepWatermark(ctx context.Context, job string) (dates.Date, error) {
	var it sweepItem
	err := s.getItem(ctx, sweepPK, job, &it)
	if errors.Is(err, apperr.ErrNotFound) {
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
func (s *sweeps) AdvanceSweep(ctx context.Context, job string, through dates.Date) error {
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
