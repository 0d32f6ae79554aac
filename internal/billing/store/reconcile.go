package store

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/stripe-payments/stripe-payments/internal/billing"
)

// PeriodsAchSent reads every billing period waiting for Stripe to settle a
// bank debit (ACHSENT), for the reconciliation (docs/design.md §11): a
// settlement whose event was lost leaves its period there for good. No
// index holds periods by status, so this is a strongly consistent Scan of
// the table, filtered: it reads (and bills) every item once, which a
// daily job can afford where a per-request path could not.
func (s *Store) PeriodsAchSent(ctx context.Context) ([]billing.Period, error) {
	filter := expression.Name("SK").BeginsWith(prefixPeriod).
		And(expression.Name("BillingStatus").Equal(expression.Value(string(billing.ACHSent))))
	expr, err := expression.NewBuilder().WithFilter(filter).Build()
	if err != nil {
		return nil, err
	}
	p := dynamodb.NewScanPaginator(s.db, &dynamodb.ScanInput{
		TableName: aws.String(s.table), FilterExpression: expr.Filter(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(), ConsistentRead: aws.Bool(true),
	})
	var out []billing.Period
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("scan the ACHSENT periods: %w", err)
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
