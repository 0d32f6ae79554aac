package store

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/dynamo"
)

// ListSubscriptions lists an account's subscriptions (getSubscriptionsByAccount).
func (s *listings) ListSubscriptions(ctx context.Context, account string, limit int32, cursor string) (model.Page[model.Subscription], error) {
	var page model.Page[model.Subscription]
	kc := expression.Key("PK").Equal(expression.Value(accountPK(account))).And(expression.Key("SK").BeginsWith(prefixSub))
	items, next, err := s.listPage(ctx, s.table, kc, nil, true, accountPK(account), limit, cursor)
	if err != nil {
		return page, err
	}
	for _, raw := range items {
		var it subItem
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			return page, fmt.Errorf("decode subscription: %w", err)
		}
		page.Items = append(page.Items, it.subscription())
	}
	page.NextCursor = next
	return page, nil
}

// ListReceipts lists an account's unexpired receipts, newest first
// (getReceiptsByAccount). DynamoDB deletes expired items only eventually, so
// the key range skips receipts processed before the retention window and a
// filter drops the ones at its edge.
func (s *listings) ListReceipts(ctx context.Context, account string, now time.Time, retention time.Duration, limit int32, cursor string) (model.Page[model.Receipt], error) {
	var page model.Page[model.Receipt]
	oldest := dates.Of(now.UTC().Add(-retention)).AddDays(-1)
	kc := expression.Key("PK").Equal(expression.Value(accountPK(account))).
		And(expression.Key("SK").Between(expression.Value(prefixReceipt+oldest.String()), expression.Value("REC$")))
	filter := expression.Name("TTL").GreaterThan(expression.Value(now.Unix()))
	items, next, err := s.listPage(ctx, s.table, kc, &filter, false, accountPK(account), limit, cursor)
	if err != nil {
		return page, err
	}
	for _, raw := range items {
		var it receiptItem
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			return page, fmt.Errorf("decode receipt: %w", err)
		}
		page.Items = append(page.Items, it.receipt())
	}
	page.NextCursor = next
	return page, nil
}

// ListHistory lists the history of a subscription, by billing date and then
// in order of change.
func (s *listings) ListHistory(ctx context.Context, account, sub string, limit int32, cursor string) (model.Page[model.HistoryEntry], error) {
	var page model.Page[model.HistoryEntry]
	pk := historyPK(account, sub)
	kc := expression.Key("PK").Equal(expression.Value(pk))
	items, next, err := s.listPage(ctx, s.history, kc, nil, true, pk, limit, cursor)
	if err != nil {
		return page, err
	}
	for _, raw := range items {
		var it historyItem
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			return page, fmt.Errorf("decode history: %w", err)
		}
		page.Items = append(page.Items, it.entry())
	}
	page.NextCursor = next
	return page, nil
}

// AllHistory reads the whole history of a subscription.
func (s *listings) AllHistory(ctx context.Context, account, sub string) ([]model.HistoryEntry, error) {
	var all []model.HistoryEntry
	cursor := ""
	for {
		page, err := s.ListHistory(ctx, account, sub, 1000, cursor)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if page.NextCursor == "" {
			return all, nil
		}
		cursor = page.NextCursor
	}
}

func (s *listings) listPage(ctx context.Context, table string, kc expression.KeyConditionBuilder, filter *expression.ConditionBuilder,
	forward bool, pk string, limit int32, cursor string) ([]map[string]types.AttributeValue, string, error) {
	start, err := dynamo.DecodeCursor(cursor, map[string]string{"PK": pk}, "PK", "SK")
	if err != nil { // apperr.ErrInvalid: a cursor this listing did not issue
		return nil, "", err
	}
	b := expression.NewBuilder().WithKeyCondition(kc)
	if filter != nil {
		b = b.WithFilter(*filter)
	}
	expr, err := b.Build()
	if err != nil {
		return nil, "", err
	}
	in := &dynamodb.QueryInput{
		TableName: aws.String(table), KeyConditionExpression: expr.KeyCondition(),
		FilterExpression: expr.Filter(), ExpressionAttributeNames: expr.Names(),
		ExpressionAttributeValues: expr.Values(), ExclusiveStartKey: start,
		Limit: aws.Int32(limit), ScanIndexForward: aws.Bool(forward),
	}
	var items []map[string]types.AttributeValue
	// A filtered page can come back short: keep reading until it is full
	// or the range ends, so that a page is never empty with a cursor.
	for {
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, "", fmt.Errorf("query %s: %w", table, err)
		}
		items = append(items, out.Items...)
		if len(out.LastEvaluatedKey) == 0 {
			return items, "", nil
		}
		if int32(len(items)) >= limit {
			next, err := dynamo.EncodeCursor(out.LastEvaluatedKey)
			return items, next, err
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
		in.Limit = aws.Int32(limit - int32(len(items)))
	}
}

// ListPeriodsPage lists a subscription's periods, newest first (their
// sort keys end in the billing date), a page at a time.
func (s *listings) ListPeriodsPage(ctx context.Context, account, sub string, limit int32, cursor string) (model.Page[model.Period], error) {
	var page model.Page[model.Period]
	kc := expression.Key("PK").Equal(expression.Value(accountPK(account))).And(expression.Key("SK").BeginsWith(prefixPeriod + sub + "#"))
	items, next, err := s.listPage(ctx, s.table, kc, nil, false, accountPK(account), limit, cursor)
	if err != nil {
		return page, err
	}
	for _, raw := range items {
		var it periodItem
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			return page, fmt.Errorf("decode period: %w", err)
		}
		page.Items = append(page.Items, it.period())
	}
	page.NextCursor = next
	return page, nil
}

// ListOpenPeriods reads, oldest first, at most limit periods of a
// subscription that are SCHEDULED or ERROR or have an attempt in flight:
// one filtered query, holding at most limit periods.
func (s *listings) ListOpenPeriods(ctx context.Context, account, sub string, limit int32) ([]model.Period, error) {
	kc := expression.Key("PK").Equal(expression.Value(accountPK(account))).And(expression.Key("SK").BeginsWith(prefixPeriod + sub + "#"))
	filter := expression.Name("BillingStatus").In(expression.Value(string(model.Scheduled)), expression.Value(string(model.Error))).
		Or(expression.AttributeExists(expression.Name("InFlightKey")))
	items, _, err := s.listPage(ctx, s.table, kc, &filter, true, accountPK(account), limit, "")
	if err != nil {
		return nil, fmt.Errorf("list the open periods of %s: %w", sub, err)
	}
	out := make([]model.Period, 0, len(items))
	for _, raw := range items {
		var it periodItem
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			return nil, fmt.Errorf("decode period: %w", err)
		}
		out = append(out, it.period())
	}
	return out, nil
}

// ListPeriodsToWatch reads the periods of an account that need an
// operator's eye: those with a collection attempt whose outcome is not
// recorded (InFlightKey set) and those left unpaid (ERROR, STALE). One
// query over the account's period items, filtered, for the console's
// account page (every period is read, only those come back).
func (s *listings) ListPeriodsToWatch(ctx context.Context, account string) ([]model.Period, error) {
	kc := expression.Key("PK").Equal(expression.Value(accountPK(account))).And(expression.Key("SK").BeginsWith(prefixPeriod))
	status := expression.Name("BillingStatus")
	filter := expression.AttributeExists(expression.Name("InFlightKey")).
		Or(status.In(expression.Value(string(model.Error)), expression.Value(string(model.Stale))))
	expr, err := expression.NewBuilder().WithKeyCondition(kc).WithFilter(filter).Build()
	if err != nil {
		return nil, err
	}
	p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
		TableName: aws.String(s.table), KeyConditionExpression: expr.KeyCondition(), FilterExpression: expr.Filter(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(), ConsistentRead: aws.Bool(true),
	})
	var out []model.Period
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list the periods to watch of %s: %w", account, err)
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
