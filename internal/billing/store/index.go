package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// QueryIndex reads the partition of date and shard of a billing index
// (eventually consistent: callers re-check on the table before acting):
// of real time when clock is empty, else of that test clock.
func (s *dueIndex) QueryIndex(ctx context.Context, which model.Index, clock string, date dates.Date, shard int) ([]model.IndexEntry, error) {
	partition := indexPartition(clock, date, shard)
	index, pkAttr := dynamo.BillingRemindersIndex, dynamo.BillingGSI1PK
	if which == model.PaymentsIndex {
		index, pkAttr = dynamo.BillingPaymentsIndex, dynamo.BillingGSI2PK
	}
	kc := expression.Key(pkAttr).Equal(expression.Value(partition))
	expr, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, err
	}
	p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
		TableName: aws.String(s.table), IndexName: aws.String(index),
		KeyConditionExpression: expr.KeyCondition(), ExpressionAttributeNames: expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	})
	var entries []model.IndexEntry
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("query %s %s: %w", index, partition, err)
		}
		for _, raw := range out.Items {
			var e struct {
				PK string `dynamodbav:"PK"`
				SK string `dynamodbav:"SK"`
			}
			if err := attributevalue.UnmarshalMap(raw, &e); err != nil {
				return nil, fmt.Errorf("decode index entry: %w", err)
			}
			entries = append(entries, indexEntry(e.PK, e.SK, date))
		}
	}
	return entries, nil
}

// indexEntry is the entry of the item at pk, sk read from the partition of
// date: its account and what it is follow from the key scheme (items.go).
func indexEntry(pk, sk string, date dates.Date) model.IndexEntry {
	e := model.IndexEntry{PK: pk, SK: sk, Date: date, AccountID: strings.TrimPrefix(pk, prefixAccount)}
	switch {
	case strings.HasPrefix(sk, prefixSub):
		e.Kind = model.EntrySubscription
	case strings.HasPrefix(sk, prefixPeriod):
		e.Kind = model.EntryPeriod
	}
	return e
}

// GetSubscriptionAt reads the subscription item at an index entry's keys.
func (s *dueIndex) GetSubscriptionAt(ctx context.Context, e model.IndexEntry) (model.Subscription, error) {
	var it subItem
	if err := s.getItem(ctx, e.PK, e.SK, &it); isNotFound(err) {
		return s.movedSubscription(ctx, e) // a plan change moved it (plan.go)
	} else if err != nil {
		return model.Subscription{}, err
	}
	return it.subscription(), nil
}

// GetPeriodAt reads the period item at an index entry's keys.
func (s *dueIndex) GetPeriodAt(ctx context.Context, e model.IndexEntry) (model.Period, error) {
	var it periodItem
	if err := s.getItem(ctx, e.PK, e.SK, &it); err != nil {
		return model.Period{}, err
	}
	return it.period(), nil
}

// GetSubscriptionWithPeriod reads, in one strongly consistent BatchGetItem,
// the subscription at a payments-index entry and its period dated on the
// entry's partition date (the period it is due for, unless it moved since
// the index was read: found is false then).
func (s *dueIndex) GetSubscriptionWithPeriod(ctx context.Context, e model.IndexEntry) (sub model.Subscription, p model.Period, found bool, err error) {
	subID, _, ok := strings.Cut(strings.TrimPrefix(e.SK, prefixSub), "#SKU#")
	if !ok {
		return sub, p, false, fmt.Errorf("not a subscription key: %s", e.SK)
	}
	keys := []map[string]types.AttributeValue{key(e.PK, e.SK), key(e.PK, periodSK(subID, e.Date))}
	req := map[string]types.KeysAndAttributes{s.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
	var items []map[string]types.AttributeValue
	for attempt := 0; len(req) > 0; attempt++ {
		if attempt > 8 {
			return sub, p, false, errors.New("batch get: unprocessed keys after retries")
		}
		if attempt > 0 {
			time.Sleep(time.Duration(attempt*attempt) * 20 * time.Millisecond)
		}
		out, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
		if err != nil {
			return sub, p, false, fmt.Errorf("batch get %s: %w", e.SK, err)
		}
		items = append(items, out.Responses[s.table]...)
		req = out.UnprocessedKeys
	}
	subFound := false
	for _, raw := range items {
		var kind struct {
			Type string `dynamodbav:"Type"`
		}
		if err := attributevalue.UnmarshalMap(raw, &kind); err != nil {
			return sub, p, false, err
		}
		switch kind.Type {
		case "SUB":
			var it subItem
			if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
				return sub, p, false, fmt.Errorf("decode subscription: %w", err)
			}
			sub, subFound = it.subscription(), true
		case "PER":
			var it periodItem
			if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
				return sub, p, false, fmt.Errorf("decode period: %w", err)
			}
			p, found = it.period(), true
		}
	}
	if !subFound {
		// A plan change moved it to its new key since the index was read
		// (plan.go): the subscription where it is now, with the period.
		if sub, err = s.movedSubscription(ctx, e); err != nil {
			return sub, p, false, err
		}
	}
	return sub, p, found, nil
}
