package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
)

// Key scheme of the test clocks in BILLING_TABLE (package testclock):
//
//	clock         PK=CLOCK#<clock>  SK=CLOCK
//	member        PK=CLOCK#<clock>  SK=MEM#<account>#<subscription>
//	run           PK=CLOCK#<clock>  SK=RUN#<clock time, RFC 3339>
//	registry      PK=CLOCKS         SK=<clock>   (ListClocks, no scan)
//
// A clock's subscriptions and periods carry TestClock, which puts their
// index entries in the clock's own partitions (items.go indexPartition).
const (
	prefixClock  = "CLOCK#"
	skClock      = "CLOCK"
	prefixMember = "MEM#"
	prefixRun    = "RUN#"
	pkClocks     = "CLOCKS"
)

func clockPK(id string) string { return prefixClock + id }

type clockItem struct {
	PK          string `dynamodbav:"PK"`
	SK          string `dynamodbav:"SK"`
	Type        string `dynamodbav:"Type"`
	ClockID     string `dynamodbav:"ClockId"`
	Name        string `dynamodbav:"Name,omitempty"`
	FrozenTime  string `dynamodbav:"FrozenTime"`
	ReachedTime string `dynamodbav:"ReachedTime"`
	Status      string `dynamodbav:"Status"`
	Error       string `dynamodbav:"Error,omitempty"`
	LeaseOwner  string `dynamodbav:"LeaseOwner,omitempty"`
	LeaseUntil  string `dynamodbav:"LeaseUntil,omitempty"`
	CreatedAt   string `dynamodbav:"CreatedAt"`
	UpdatedAt   string `dynamodbav:"UpdatedAt"`
	Version     int64  `dynamodbav:"Version"`
}

func toClockItem(c model.Clock) clockItem {
	return clockItem{
		PK: clockPK(c.ID), SK: skClock, Type: "CLOCK", ClockID: c.ID, Name: c.Name,
		FrozenTime: formatTime(c.FrozenTime), ReachedTime: formatTime(c.ReachedTime), Status: string(c.Status),
		Error: c.Error, LeaseOwner: c.LeaseOwner, LeaseUntil: formatTime(c.LeaseUntil),
		CreatedAt: formatTime(c.CreatedAt), UpdatedAt: formatTime(c.UpdatedAt), Version: c.Version,
	}
}

func (it clockItem) clock() model.Clock {
	return model.Clock{
		ID: it.ClockID, Name: it.Name, FrozenTime: parseTime(it.FrozenTime), ReachedTime: parseTime(it.ReachedTime),
		Status: model.ClockStatus(it.Status), Error: it.Error, CreatedAt: parseTime(it.CreatedAt), UpdatedAt: parseTime(it.UpdatedAt),
		Version: it.Version, LeaseOwner: it.LeaseOwner, LeaseUntil: parseTime(it.LeaseUntil),
	}
}

type memberItem struct {
	PK             string `dynamodbav:"PK"`
	SK             string `dynamodbav:"SK"`
	Type           string `dynamodbav:"Type"`
	AccountID      string `dynamodbav:"AccountId"`
	SubscriptionID string `dynamodbav:"SubscriptionId"`
}

type runItem struct {
	PK            string `dynamodbav:"PK"`
	SK            string `dynamodbav:"SK"`
	Type          string `dynamodbav:"Type"`
	Time          string `dynamodbav:"Time"`
	Date          string `dynamodbav:"Date"`
	Entries       int    `dynamodbav:"Entries"`
	Reminded      int    `dynamodbav:"Reminded"`
	Charged       int    `dynamodbav:"Charged"`
	Processing    int    `dynamodbav:"Processing"`
	Declined      int    `dynamodbav:"Declined"`
	Stale         int    `dynamodbav:"Stale"`
	PausedSkipped int    `dynamodbav:"PausedSkipped"`
	Unresolved    int    `dynamodbav:"Unresolved"`
	Errors        int    `dynamodbav:"Errors"`
	Error         string `dynamodbav:"Error,omitempty"`
	// Absent on runs recorded before bank debits were waited for: zero.
	DebitsSettled   int `dynamodbav:"DebitsSettled,omitempty"`
	DebitsUnsettled int `dynamodbav:"DebitsUnsettled,omitempty"`
}

type clockRegistryItem struct {
	PK      string `dynamodbav:"PK"`
	SK      string `dynamodbav:"SK"`
	Type    string `dynamodbav:"Type"`
	ClockID string `dynamodbav:"ClockId"`
}

// PutClock writes c if it is still at c.Version (0: creates it, with its
// registry entry) and advances c.Version; ErrConflict when it changed
// meanwhile.
func (s *testClocks) PutClock(ctx context.Context, c *model.Clock, now time.Time) error {
	cond := versionCond(c.Version)
	tx := &writes{store: s.tables}
	if c.Version == 0 {
		tx.put(clockRegistryItem{PK: pkClocks, SK: c.ID, Type: "CLOCKREG", ClockID: c.ID}, nil)
	}
	c.Version++
	c.UpdatedAt = now
	tx.put(toClockItem(*c), &cond)
	if err := s.commit(ctx, tx, nil); err != nil {
		c.Version--
		return fmt.Errorf("write test clock %s: %w", c.ID, err)
	}
	return nil
}

// GetClock reads a test clock (strongly consistent).
func (s *testClocks) GetClock(ctx context.Context, id string) (model.Clock, error) {
	if !model.ValidID(id) {
		return model.Clock{}, apperr.New(apperr.CodeNotFound, "test clock %s not found", id)
	}
	var it clockItem
	if err := s.getItem(ctx, clockPK(id), skClock, &it); err != nil {
		return model.Clock{}, err
	}
	return it.clock(), nil
}

// ClockMembers lists the subscriptions created on clock.
func (s *testClocks) ClockMembers(ctx context.Context, clock string) ([]model.ClockMember, error) {
	var out []model.ClockMember
	err := s.queryAll(ctx, clockPK(clock), prefixMember, func(raw map[string]types.AttributeValue) error {
		var it memberItem
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			return fmt.Errorf("decode clock member: %w", err)
		}
		out = append(out, model.ClockMember{AccountID: it.AccountID, SubscriptionID: it.SubscriptionID})
		return nil
	})
	return out, err
}

// PutClockRun records one day of an advance.
func (s *testClocks) PutClockRun(ctx context.Context, clock string, r model.ClockRun) error {
	av, err := attributevalue.MarshalMap(runItem{
		PK: clockPK(clock), SK: prefixRun + formatTime(r.Time), Type: "RUN", Time: formatTime(r.Time), Date: r.Date.String(),
		Entries: r.Entries, Reminded: r.Reminded, Charged: r.Charged, Processing: r.Processing, Declined: r.Declined,
		Stale: r.Stale, PausedSkipped: r.PausedSkipped, Unresolved: r.Unresolved, Errors: r.Errors, Error: r.Error,
		DebitsSettled: r.DebitsSettled, DebitsUnsettled: r.DebitsUnsettled,
	})
	if err != nil {
		return err
	}
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: av}); err != nil {
		return fmt.Errorf("record test clock run: %w", err)
	}
	return nil
}

// ClockRuns reads the latest limit runs of clock, newest first.
func (s *testClocks) ClockRuns(ctx context.Context, clock string, limit int32) ([]model.ClockRun, error) {
	kc := expression.Key("PK").Equal(expression.Value(clockPK(clock))).And(expression.Key("SK").BeginsWith(prefixRun))
	expr, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, err
	}
	out, err := s.db.Query(ctx, &dynamodb.QueryInput{
		TableName: aws.String(s.table), KeyConditionExpression: expr.KeyCondition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
		ScanIndexForward: aws.Bool(false), Limit: aws.Int32(limit), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("read test clock runs: %w", err)
	}
	runs := make([]model.ClockRun, 0, len(out.Items))
	for _, raw := range out.Items {
		var it runItem
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			return nil, fmt.Errorf("decode test clock run: %w", err)
		}
		runs = append(runs, model.ClockRun{
			Time: parseTime(it.Time), Date: parseDate(it.Date), Entries: it.Entries, Reminded: it.Reminded,
			Charged: it.Charged, Processing: it.Processing, Declined: it.Declined, Stale: it.Stale,
			PausedSkipped: it.PausedSkipped, Unresolved: it.Unresolved, Errors: it.Errors, Error: it.Error,
			DebitsSettled: it.DebitsSettled, DebitsUnsettled: it.DebitsUnsettled,
		})
	}
	return runs, nil
}

// DeleteClockItems removes every item of clock: its runs and members, then
// the clock itself (last, so a DELETE that fails half-way can be retried).
func (s *testClocks) DeleteClockItems(ctx context.Context, clock string) error {
	var keys []map[string]types.AttributeValue
	for _, prefix := range []string{prefixRun, prefixMember} {
		err := s.queryAll(ctx, clockPK(clock), prefix, func(raw map[string]types.AttributeValue) error {
			var k struct {
				PK string `dynamodbav:"PK"`
				SK string `dynamodbav:"SK"`
			}
			if err := attributevalue.UnmarshalMap(raw, &k); err != nil {
				return err
			}
			keys = append(keys, key(k.PK, k.SK))
			return nil
		})
		if err != nil {
			return fmt.Errorf("list test clock items: %w", err)
		}
	}
	for _, k := range keys {
		if _, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.table), Key: k}); err != nil {
			return fmt.Errorf("delete test clock item: %w", err)
		}
	}
	if _, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.table), Key: key(clockPK(clock), skClock)}); err != nil {
		return fmt.Errorf("delete test clock: %w", err)
	}
	if _, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.table), Key: key(pkClocks, clock)}); err != nil {
		return fmt.Errorf("delete test clock registry entry: %w", err)
	}
	return nil
}

// ListClockIDs lists the ids of every test clock (the registry; a handful).
func (s *testClocks) ListClockIDs(ctx context.Context) ([]string, error) {
	var ids []string
	err := s.queryAll(ctx, pkClocks, "clock_", func(raw map[string]types.AttributeValue) error {
		var it clockRegistryItem
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			return fmt.Errorf("decode test clock registry: %w", err)
		}
		ids = append(ids, it.ClockID)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list test clocks: %w", err)
	}
	return ids, nil
}

// RenewClockLease extends the lease of an advancing clock held by owner
// and records how far it got; ErrConflict when owner no longer holds it.
func (s *testClocks) RenewClockLease(ctx context.Context, id, owner string, reached, until, now time.Time) error {
	set := expression.Set(expression.Name("LeaseUntil"), expression.Value(formatTime(until))).
		Set(expression.Name("UpdatedAt"), expression.Value(formatTime(now)))
	if !reached.IsZero() {
		set = set.Set(expression.Name("ReachedTime"), expression.Value(formatTime(reached)))
	}
	cond := expression.Name("LeaseOwner").Equal(expression.Value(owner)).
		And(expression.Name("Status").Equal(expression.Value(string(model.ClockAdvancing))))
	expr, err := expression.NewBuilder().WithUpdate(set).WithCondition(cond).Build()
	if err != nil {
		return err
	}
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table), Key: key(clockPK(id), skClock), UpdateExpression: expr.Update(),
		ConditionExpression: expr.Condition(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return fmt.Errorf("test clock %s: lease lost: %w", id, model.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("renew test clock lease: %w", err)
	}
	return nil
}
