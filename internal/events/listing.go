package events

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/stripe-payments/stripe-payments/internal/dynamo"
)

// Page is one page of a listing.
type Page struct {
	Records    []Record
	NextCursor string // empty on the last page
}

// Range bounds an index query on its sort key, both ends inclusive; empty
// ends are open.
type Range struct {
	From, To string
}

// ByDate lists the events created on date (YYYY-MM-DD) whose time part
// (HH:MM:SS.mmm) lies in r, oldest first.
func (s *Store) ByDate(ctx context.Context, date string, r Range, limit int32, cursor string) (Page, error) {
	return s.query(ctx, dynamo.EventsDateTimeIndex, "date", date, "time", r, limit, cursor)
}

// ByAccount lists the events of a Connect account whose timestamp lies in r.
func (s *Store) ByAccount(ctx context.Context, account string, r Range, limit int32, cursor string) (Page, error) {
	return s.query(ctx, dynamo.EventsAccountIndex, "stripe_account", account, "timestamp", s.unexpired(r), limit, cursor)
}

// BySubscription lists the events about a subscription whose timestamp lies in r.
func (s *Store) BySubscription(ctx context.Context, subscription string, r Range, limit int32, cursor string) (Page, error) {
	return s.query(ctx, dynamo.EventsSubscriptionIndex, "subscription", subscription, "timestamp", s.unexpired(r), limit, cursor)
}

// unexpired narrows a timestamp range to records younger than the TTL, so
// the index never reads what the base table would call expired.
func (s *Store) unexpired(r Range) Range {
	floor := s.now().Add(-s.ttl).UTC().Format(TimestampLayout)
	if r.From < floor {
		r.From = floor
	}
	return r
}

func (s *Store) query(ctx context.Context, index, pkName, pkValue, skName string, r Range, limit int32, cursor string) (Page, error) {
	if s.pending != nil {
		// An index lists only what the table holds: first let every record
		// acknowledged before this query reach it (usually none is pending,
		// else milliseconds), so a listing after a 200 shows the event.
		if err := s.pending.Settled(ctx); err != nil {
			return Page{}, fmt.Errorf("list events: %w", err)
		}
	}
	keyCond := expression.Key(pkName).Equal(expression.Value(pkValue))
	sk := expression.Key(skName)
	switch {
	case r.From != "" && r.To != "":
		if r.From > r.To {
			return Page{}, nil
		}
		keyCond = keyCond.And(sk.Between(expression.Value(r.From), expression.Value(r.To)))
	case r.From != "":
		keyCond = keyCond.And(sk.GreaterThanEqual(expression.Value(r.From)))
	case r.To != "":
		keyCond = keyCond.And(sk.LessThanEqual(expression.Value(r.To)))
	}
	expr, err := expression.NewBuilder().WithKeyCondition(keyCond).Build()
	if err != nil {
		return Page{}, fmt.Errorf("build key condition: %w", err)
	}
	start, err := dynamo.DecodeCursor(cursor, map[string]string{pkName: pkValue}, "id", pkName, skName)
	if err != nil {
		return Page{}, err
	}
	out, err := s.client.Query(ctx, &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		IndexName:                 aws.String(index),
		KeyConditionExpression:    expr.KeyCondition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
		ExclusiveStartKey:         start,
		Limit:                     aws.Int32(limit),
	})
	if err != nil {
		return Page{}, fmt.Errorf("query %s: %w", index, err)
	}
	ids := make([]string, 0, len(out.Items))
	for _, raw := range out.Items {
		var k struct {
			ID string `dynamodbav:"id"`
		}
		if err := attributevalue.UnmarshalMap(raw, &k); err != nil {
			return Page{}, fmt.Errorf("decode index item: %w", err)
		}
		ids = append(ids, k.ID)
	}
	// Index projections lack the bookkeeping fields: read them from the table.
	byID, err := s.BatchGet(ctx, ids)
	if err != nil {
		return Page{}, err
	}
	page := Page{Records: make([]Record, 0, len(ids))}
	for _, id := range ids {
		if rec, ok := byID[id]; ok {
			page.Records = append(page.Records, rec)
		}
	}
	if page.NextCursor, err = dynamo.EncodeCursor(out.LastEvaluatedKey); err != nil {
		return Page{}, err
	}
	return page, nil
}
