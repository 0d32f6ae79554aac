package store

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/stripe-payments/stripe-payments/internal/billing/model"
)

// PeriodsToReconcile reads every billing period the reconciliation
// compares with Stripe (docs/design.md §11): those waiting for Stripe to
// settle a bank debit (ACHSENT; a settlement whose event was lost leaves
// its period there for good) and those with an attempt whose outcome is
// unknown (InFlightKey set). No index holds periods by status, so this is
// one strongly consistent Scan of the table, filtered: it reads (and
// bills) every item once, which a daily job can afford where a
// per-request path could not.
func (s *reconciliation) PeriodsToReconcile(ctx context.Context) ([]model.Period, error) {
	filter := expression.Name("SK").BeginsWith(prefixPeriod).
		And(expression.Or(expression.Name("BillingStatus").Equal(expression.Value(string(model.ACHSent))),
			expression.Name("InFlightKey").AttributeExists()))
	expr, err := expression.NewBuilder().WithFilter(filter).Build()
	if err != nil {
		return nil, err
	}
	p := dynamodb.NewScanPaginator(s.db, &dynamodb.ScanInput{
		TableName: aws.String(s.table), FilterExpression: expr.Filter(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(), ConsistentRead: aws.Bool(true),
	})
	var out []model.Period
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("scan the ACHSENT and in-flight periods: %w", err)
		}
		for _, raw := range page.Items {
			var it periodItem
			if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
				return nil, fmt.Errorf("decode period: %w", err)
			}
			out = append(out, it.period())
		}
	}
	return out, nil
}
