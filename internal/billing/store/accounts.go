package store

import (
	"context"
	"fmt"
	"sort"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The registry of the Stripe accounts the billing table charges on: one item
// per connected account in one partition (PK=STRIPEACCOUNTS, SK=<acct>),
// without index attributes. The poller lists it (docs/design.md §7: every account
// the service knows), so a billing account whose webhooks were all missed
// still has its settlements and refunds replayed. "#" never appears in an
// account id, so the partition cannot meet an ACC#/PI# key.
const chargedAccountsPK = "STRIPEACCOUNTS"

type chargedAccountItem struct {
	PK            string `dynamodbav:"PK"`
	SK            string `dynamodbav:"SK"`
	Type          string `dynamodbav:"Type"`
	StripeAccount string `dynamodbav:"StripeAccount"`
}

// RegisterChargedAccounts records that the billing core charges on these
// Stripe accounts. Idempotent (plain puts of fixed items), outside any
// transaction: concurrent creates never conflict on the registry. The
// platform ("") needs no entry: the poller always lists it.
func (s *accountRegistry) RegisterChargedAccounts(ctx context.Context, accounts ...string) error {
	seen := map[string]bool{}
	var reqs []types.WriteRequest
	for _, a := range accounts {
		if a == "" || seen[a] {
			continue
		}
		seen[a] = true
		av, err := attributevalue.MarshalMap(chargedAccountItem{PK: chargedAccountsPK, SK: a, Type: "ACCT", StripeAccount: a})
		if err != nil {
			return fmt.Errorf("marshal charged account: %w", err)
		}
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: av}})
	}
	for len(reqs) > 0 {
		n := min(25, len(reqs))
		pending := map[string][]types.WriteRequest{s.table: reqs[:n]}
		reqs = reqs[n:]
		for attempt := 0; len(pending[s.table]) > 0; attempt++ {
			if attempt > 8 {
				return fmt.Errorf("register charged accounts: unprocessed items after retries")
			}
			out, err := s.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: pending})
			if err != nil {
				return fmt.Errorf("register charged accounts: %w", err)
			}
			pending = out.UnprocessedItems
		}
	}
	return nil
}

// ChargedAccounts lists every Stripe account the billing table charges on,
// sorted (one partition query; poller.AccountSource).
func (s *accountRegistry) ChargedAccounts(ctx context.Context) ([]string, error) {
	var out []string
	expr, err := expression.NewBuilder().
		WithKeyCondition(expression.Key("PK").Equal(expression.Value(chargedAccountsPK))).
		WithProjection(expression.NamesList(expression.Name("SK"))).Build()
	if err != nil {
		return nil, err
	}
	p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
		TableName: aws.String(s.table), KeyConditionExpression: expr.KeyCondition(),
		ProjectionExpression: expr.Projection(), ExpressionAttributeNames: expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list charged accounts: %w", err)
		}
		for _, raw := range page.Items {
			var it struct {
				SK string `dynamodbav:"SK"`
			}
			if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
				return nil, fmt.Errorf("decode charged account: %w", err)
			}
			out = append(out, it.SK)
		}
	}
	sort.Strings(out)
	return out, nil
}

// ChargedAccounts is Store.ChargedAccounts as a poller account source.
type ChargedAccounts struct{ Store *Store }

// Accounts implements poller.AccountSource.
func (c ChargedAccounts) Accounts(ctx context.Context) ([]string, error) {
	return c.Store.ChargedAccounts(ctx)
}
