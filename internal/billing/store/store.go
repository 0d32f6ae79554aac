// Package store is the billing core's DynamoDB single-table store: the
// subscriptions, billing periods, receipts, PaymentIntent references, test
// clocks and sweep watermarks of BILLING_TABLE, the append-only history of
// BILLING_HISTORY_TABLE, and the commit of a model.Tx as one
// TransactWriteItems. It implements model.Store; DynamoDB's errors become
// billing's vocabulary here (apperr.ErrNotFound, model.ErrConflict,
// apperr.ErrInvalid for a cursor).
package store

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
)

// Store reads and writes the billing table and its history table. Every
// write of a subscription, period or marker is a whole-item put conditioned
// on the version it was read at (optimistic concurrency): the item's index
// keys are recomputed from its state on every write, so an item can never be
// left in an index it should have left. DynamoDB errors become the package's
// sentinels here.
//
// Store declares nothing itself: each concept of the table is a type of its
// own over the same tables, and embedding promotes their methods, so that
// Store is model.Store and testclock.Store while no one type holds them all.
type Store struct {
	*tables         // records: subscriptions, periods, references; the commit
	dueIndex        // the due-date indexes the jobs read
	sweeps          // the jobs' sweep watermarks
	testClocks      // test clocks, their members and runs
	accountRegistry // the Stripe accounts the billing core charges on
	listings        // the pages the API and the console list
	lookups         // subscriptions found by id, customer or email
	erasure         // the erasure of a subscriber's personal data
	reconciliation  // the periods the reconciliation compares with Stripe
}

// tables is the billing table and its history table, with what every
// concept of the store builds on: reads of one record by key (a
// subscription, a period, a PaymentIntent reference) and the commit of a
// change.
type tables struct {
	db      *dynamodb.Client
	table   string
	history string
	shards  int
}

// The concepts of the store, each over the same tables (embedded: their
// methods read and commit through it as Store's did).
type (
	dueIndex        struct{ *tables }
	sweeps          struct{ *tables }
	testClocks      struct{ *tables }
	accountRegistry struct{ *tables }
	listings        struct{ *tables }
	lookups         struct{ *tables }
	erasure         struct{ *tables }
	reconciliation  struct{ *tables }
)

// New returns a store; shards is BILLING_SHARDS.
func New(db *dynamodb.Client, table, historyTable string, shards int) *Store {
	if shards < 1 {
		shards = 1
	}
	t := &tables{db: db, table: table, history: historyTable, shards: shards}
	return &Store{tables: t, dueIndex: dueIndex{t}, sweeps: sweeps{t}, testClocks: testClocks{t},
		accountRegistry: accountRegistry{t}, listings: listings{t}, lookups: lookups{t}, erasure: erasure{t},
		reconciliation: reconciliation{t}}
}

// Shards is the configured write-shard count.
func (s *tables) Shards() int { return s.shards }

func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"PK": &types.AttributeValueMemberS{Value: pk},
		"SK": &types.AttributeValueMemberS{Value: sk},
	}
}

func (s *tables) getItem(ctx context.Context, pk, sk string, out any) error {
	res, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), Key: key(pk, sk), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return fmt.Errorf("get %s %s: %w", pk, sk, err)
	}
	if len(res.Item) == 0 {
		return apperr.New(apperr.CodeNotFound, "not found")
	}
	if err := attributevalue.UnmarshalMap(res.Item, out); err != nil {
		return fmt.Errorf("decode %s %s: %w", pk, sk, err)
	}
	return nil
}

// GetSubscription reads a subscription by id (strongly consistent).
func (s *tables) GetSubscription(ctx context.Context, account, sub string) (model.Subscription, error) {
	if !model.ValidID(account) || !model.ValidID(sub) {
		return model.Subscription{}, apperr.New(apperr.CodeNotFound, "subscription %s not found", sub)
	}
	kc := expression.Key("PK").Equal(expression.Value(accountPK(account))).
		And(expression.Key("SK").BeginsWith(prefixSub + sub + "#SKU#"))
	expr, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return model.Subscription{}, err
	}
	out, err := s.db.Query(ctx, &dynamodb.QueryInput{
		TableName: aws.String(s.table), KeyConditionExpression: expr.KeyCondition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
		ConsistentRead: aws.Bool(true), Limit: aws.Int32(2),
	})
	if err != nil {
		return model.Subscription{}, fmt.Errorf("get subscription %s: %w", sub, err)
	}
	if len(out.Items) == 0 {
		return model.Subscription{}, apperr.New(apperr.CodeNotFound, "subscription %s not found", sub)
	}
	var it subItem
	if err := attributevalue.UnmarshalMap(out.Items[0], &it); err != nil {
		return model.Subscription{}, fmt.Errorf("decode subscription %s: %w", sub, err)
	}
	return it.subscription(), nil
}

// GetPeriod reads one billing period (strongly consistent).
func (s *tables) GetPeriod(ctx context.Context, account, sub string, d dates.Date) (model.Period, error) {
	var it periodItem
	if err := s.getItem(ctx, accountPK(account), periodSK(sub, d), &it); err != nil {
		return model.Period{}, err
	}
	return it.period(), nil
}

// GetPaymentRef finds the period a PaymentIntent was created for.
func (s *tables) GetPaymentRef(ctx context.Context, pi string) (model.PaymentRef, error) {
	var it piItem
	if err := s.getItem(ctx, piKey(pi), piKey(pi), &it); err != nil {
		return model.PaymentRef{}, err
	}
	return model.PaymentRef{PaymentIntent: it.PaymentIntent, AccountID: it.AccountID,
		SubscriptionID: it.SubscriptionID, BillingDate: parseDate(it.BillingDate), Amount: it.Amount, Currency: it.Currency,
		RefundID: it.RefundID}, nil
}

// ListPeriods reads every billing period of a subscription, oldest first.
func (s *tables) ListPeriods(ctx context.Context, account, sub string) ([]model.Period, error) {
	var periods []model.Period
	err := s.queryAll(ctx, accountPK(account), prefixPeriod+sub+"#", func(raw map[string]types.AttributeValue) error {
		var it periodItem
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			return err
		}
		periods = append(periods, it.period())
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list periods of %s: %w", sub, err)
	}
	return periods, nil
}

func (s *tables) queryAll(ctx context.Context, pk, skPrefix string, fn func(map[string]types.AttributeValue) error) error {
	kc := expression.Key("PK").Equal(expression.Value(pk)).And(expression.Key("SK").BeginsWith(skPrefix))
	expr, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return err
	}
	p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
		TableName: aws.String(s.table), KeyConditionExpression: expr.KeyCondition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
		ConsistentRead: aws.Bool(true),
	})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, raw := range out.Items {
			if err := fn(raw); err != nil {
				return err
			}
		}
	}
	return nil
}
