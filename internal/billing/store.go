package billing

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
	"github.com/stripe-payments/stripe-payments/internal/dynamo"
)

// Store reads and writes the billing table and its history table. Every
// write of a subscription, period or marker is a whole-item put conditioned
// on the version it was read at (optimistic concurrency): the item's index
// keys are recomputed from its state on every write, so an item can never be
// left in an index it should have left. DynamoDB errors become the package's
// sentinels here.
type Store struct {
	db      *dynamodb.Client
	table   string
	history string
	shards  int
}

// NewStore returns a store; shards is BILLING_SHARDS.
func NewStore(db *dynamodb.Client, table, historyTable string, shards int) *Store {
	if shards < 1 {
		shards = 1
	}
	return &Store{db: db, table: table, history: historyTable, shards: shards}
}

// Shards is the configured write-shard count.
func (s *Store) Shards() int { return s.shards }

// Tx collects the writes of one logical change and its history entries;
// Commit applies them in one TransactWriteItems (all or nothing), so the
// history holds exactly the changes that happened.
type Tx struct {
	store   *Store
	cause   string
	now     time.Time
	writes  []types.TransactWriteItem
	history []HistoryEntry
	err     error
}

// NewTx starts a change made by cause at now.
func (s *Store) NewTx(cause string, now time.Time) *Tx {
	return &Tx{store: s, cause: sanitizeCause(cause), now: now}
}

func sanitizeCause(c string) string {
	c = strings.NewReplacer("#", "_", " ", "_").Replace(c)
	if len(c) > 200 {
		c = c[:200]
	}
	return c
}

func (tx *Tx) fail(err error) {
	if tx.err == nil {
		tx.err = err
	}
}

// versionCond: the item is still at version v (v == 0: it does not exist).
func versionCond(v int64) expression.ConditionBuilder {
	if v == 0 {
		return expression.AttributeNotExists(expression.Name("PK"))
	}
	return expression.Name("Version").Equal(expression.Value(v))
}

func (tx *Tx) put(item any, cond *expression.ConditionBuilder) {
	av, err := attributevalue.MarshalMap(item)
	if err != nil {
		tx.fail(fmt.Errorf("marshal: %w", err))
		return
	}
	p := &types.Put{TableName: aws.String(tx.store.table), Item: av}
	if cond != nil {
		expr, err := expression.NewBuilder().WithCondition(*cond).Build()
		if err != nil {
			tx.fail(err)
			return
		}
		p.ConditionExpression = expr.Condition()
		p.ExpressionAttributeNames = expr.Names()
		p.ExpressionAttributeValues = expr.Values()
	}
	tx.writes = append(tx.writes, types.TransactWriteItem{Put: p})
}

func (tx *Tx) del(pk, sk string, cond expression.ConditionBuilder) {
	expr, err := expression.NewBuilder().WithCondition(cond).Build()
	if err != nil {
		tx.fail(err)
		return
	}
	tx.writes = append(tx.writes, types.TransactWriteItem{Delete: &types.Delete{
		TableName: aws.String(tx.store.table), Key: key(pk, sk),
		ConditionExpression: expr.Condition(), ExpressionAttributeNames: expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	}})
}

// PutSubscription writes sub if it is still at sub.Version (0: creates it)
// and advances sub.Version. After a failed Commit, re-read before retrying.
func (tx *Tx) PutSubscription(sub *Subscription) {
	cond := versionCond(sub.Version)
	sub.Version++
	sub.UpdatedAt = tx.now
	tx.put(toSubItem(*sub, tx.store.shards), &cond)
}

// CheckSubscription makes the change conditional on sub being unchanged
// since it was read and not CANCELLED, without writing it.
func (tx *Tx) CheckSubscription(sub Subscription) {
	cond := versionCond(sub.Version).And(expression.Name("Status").NotEqual(expression.Value(string(SubCancelled))))
	expr, err := expression.NewBuilder().WithCondition(cond).Build()
	if err != nil {
		tx.fail(err)
		return
	}
	tx.writes = append(tx.writes, types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName: aws.String(tx.store.table), Key: key(accountPK(sub.AccountID), subSK(sub.SubscriptionID, sub.SKU)),
		ConditionExpression: expr.Condition(), ExpressionAttributeNames: expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	}})
}

// PutPeriod writes p at its next version and appends a history entry for
// the change, unless quiet (bookkeeping that changes nothing a reader of the
// history cares about, such as marking an attempt in flight).
func (tx *Tx) PutPeriod(p *Period, quiet bool) {
	cond := versionCond(p.Version)
	p.Version++
	p.LastRunDate = tx.now
	tx.put(toPeriodItem(*p, tx.store.shards), &cond)
	if quiet {
		return
	}
	tx.history = append(tx.history, HistoryEntry{
		AccountID: p.AccountID, SubscriptionID: p.SubscriptionID, BillingDate: p.BillingDate,
		Status: p.Status, Process: p.Process, UpdatedEvent: p.UpdatedEvent, LastRunDate: tx.now,
		TransactionID: p.TransactionID, Error: p.Error, Amount: p.Amount, Attempts: p.Attempts,
		Version: p.Version, Cause: tx.cause,
	})
}

// PutReceipt adds a receipt; it must not exist.
func (tx *Tx) PutReceipt(r Receipt) {
	cond := expression.AttributeNotExists(expression.Name("PK"))
	tx.put(toReceiptItem(r), &cond)
}

// PutPaymentRef records which period a PaymentIntent belongs to.
func (tx *Tx) PutPaymentRef(ref PaymentRef) {
	tx.put(piItem{PK: piKey(ref.PaymentIntent), SK: piKey(ref.PaymentIntent), Type: "PI",
		PaymentIntent: ref.PaymentIntent, AccountID: ref.AccountID, SubscriptionID: ref.SubscriptionID,
		BillingDate: ref.BillingDate.String()}, nil)
}

// Empty reports whether the change writes nothing.
func (tx *Tx) Empty() bool { return len(tx.writes) == 0 }

// Commit applies every write of tx and appends its history entries in one
// transaction. ErrConflict: an item changed since it was read (or a
// concurrent transaction touched it); nothing was written.
func (s *Store) Commit(ctx context.Context, tx *Tx) error {
	if tx.err != nil {
		return tx.err
	}
	writes := tx.writes
	for _, e := range tx.history {
		w, err := s.historyWrite(e)
		if err != nil {
			return err
		}
		writes = append(writes, w)
	}
	if len(writes) == 0 {
		return nil
	}
	if len(writes) > maxTxItems {
		return fmt.Errorf("billing transaction: %d writes, more than DynamoDB's %d", len(writes), maxTxItems)
	}
	if len(writes) == 1 {
		return s.single(ctx, writes[0])
	}
	_, err := s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: writes})
	var canceled *types.TransactionCanceledException
	if errors.As(err, &canceled) {
		for _, r := range canceled.CancellationReasons {
			switch aws.ToString(r.Code) {
			case "ConditionalCheckFailed", "TransactionConflict":
				return fmt.Errorf("billing transaction: %w", ErrConflict)
			}
		}
	}
	var inProgress *types.TransactionInProgressException
	if errors.As(err, &inProgress) {
		return fmt.Errorf("billing transaction: %w", ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("billing transaction: %w", err)
	}
	return nil
}

// maxTxItems is TransactWriteItems' limit.
const maxTxItems = 100

// historyWrite is the put of one history entry: it must not exist (no
// write ever replaces an entry).
func (s *Store) historyWrite(e HistoryEntry) (types.TransactWriteItem, error) {
	av, err := attributevalue.MarshalMap(toHistoryItem(e))
	if err != nil {
		return types.TransactWriteItem{}, fmt.Errorf("marshal history: %w", err)
	}
	expr, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name("PK"))).Build()
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	return types.TransactWriteItem{Put: &types.Put{
		TableName: aws.String(s.history), Item: av, ConditionExpression: expr.Condition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	}}, nil
}

// single performs a one-item change without a transaction (half the cost).
func (s *Store) single(ctx context.Context, w types.TransactWriteItem) error {
	var err error
	switch {
	case w.Put != nil:
		_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: w.Put.TableName, Item: w.Put.Item, ConditionExpression: w.Put.ConditionExpression,
			ExpressionAttributeNames: w.Put.ExpressionAttributeNames, ExpressionAttributeValues: w.Put.ExpressionAttributeValues,
		})
	case w.Delete != nil:
		_, err = s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: w.Delete.TableName, Key: w.Delete.Key, ConditionExpression: w.Delete.ConditionExpression,
			ExpressionAttributeNames: w.Delete.ExpressionAttributeNames, ExpressionAttributeValues: w.Delete.ExpressionAttributeValues,
		})
	default:
		return nil // a lone condition check writes nothing
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return fmt.Errorf("billing write: %w", ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("billing write: %w", err)
	}
	return nil
}

func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"PK": &types.AttributeValueMemberS{Value: pk},
		"SK": &types.AttributeValueMemberS{Value: sk},
	}
}

func (s *Store) getItem(ctx context.Context, pk, sk string, out any) error {
	res, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.table), Key: key(pk, sk), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return fmt.Errorf("get %s %s: %w", pk, sk, err)
	}
	if len(res.Item) == 0 {
		return ErrNotFound
	}
	if err := attributevalue.UnmarshalMap(res.Item, out); err != nil {
		return fmt.Errorf("decode %s %s: %w", pk, sk, err)
	}
	return nil
}

// GetSubscription reads a subscription by id (strongly consistent).
func (s *Store) GetSubscription(ctx context.Context, account, sub string) (Subscription, error) {
	if !validID(account) || !validID(sub) {
		return Subscription{}, ErrNotFound
	}
	kc := expression.Key("PK").Equal(expression.Value(accountPK(account))).
		And(expression.Key("SK").BeginsWith(prefixSub + sub + "#SKU#"))
	expr, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return Subscription{}, err
	}
	out, err := s.db.Query(ctx, &dynamodb.QueryInput{
		TableName: aws.String(s.table), KeyConditionExpression: expr.KeyCondition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
		ConsistentRead: aws.Bool(true), Limit: aws.Int32(2),
	})
	if err != nil {
		return Subscription{}, fmt.Errorf("get subscription %s: %w", sub, err)
	}
	if len(out.Items) == 0 {
		return Subscription{}, ErrNotFound
	}
	var it subItem
	if err := attributevalue.UnmarshalMap(out.Items[0], &it); err != nil {
		return Subscription{}, fmt.Errorf("decode subscription %s: %w", sub, err)
	}
	return it.subscription(), nil
}

// GetPeriod reads one billing period (strongly consistent).
func (s *Store) GetPeriod(ctx context.Context, account, sub string, d dates.Date) (Period, error) {
	var it periodItem
	if err := s.getItem(ctx, accountPK(account), periodSK(sub, d), &it); err != nil {
		return Period{}, err
	}
	return it.period(), nil
}

// GetPaymentRef finds the period a PaymentIntent was created for.
func (s *Store) GetPaymentRef(ctx context.Context, pi string) (PaymentRef, error) {
	var it piItem
	if err := s.getItem(ctx, piKey(pi), piKey(pi), &it); err != nil {
		return PaymentRef{}, err
	}
	return PaymentRef{PaymentIntent: it.PaymentIntent, AccountID: it.AccountID,
		SubscriptionID: it.SubscriptionID, BillingDate: parseDate(it.BillingDate)}, nil
}

// ListPeriods reads every billing period of a subscription, oldest first.
func (s *Store) ListPeriods(ctx context.Context, account, sub string) ([]Period, error) {
	var periods []Period
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

func (s *Store) queryAll(ctx context.Context, pk, skPrefix string, fn func(map[string]types.AttributeValue) error) error {
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

// IndexEntry is one item of a due-date index partition.
type IndexEntry struct {
	PK, SK string
	// Date is the date of the partition the entry was read from.
	Date dates.Date
}

// Account is the account id of the entry.
func (e IndexEntry) Account() string { return strings.TrimPrefix(e.PK, prefixAccount) }

// QueryIndex reads the partition of date and shard of a billing index
// (eventually consistent: callers re-check on the table before acting):
// of real time when clock is empty, else of that test clock.
func (s *Store) QueryIndex(ctx context.Context, index, clock string, date dates.Date, shard int) ([]IndexEntry, error) {
	partition := indexPartition(clock, date, shard)
	pkAttr := dynamo.BillingGSI1PK
	if index == dynamo.BillingPaymentsIndex {
		pkAttr = dynamo.BillingGSI2PK
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
	var entries []IndexEntry
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
			entries = append(entries, IndexEntry{PK: e.PK, SK: e.SK, Date: date})
		}
	}
	return entries, nil
}

// Page of a list.
type Page[T any] struct {
	Items      []T
	NextCursor string
}

// ListSubscriptions lists an account's subscriptions (getSubscriptionsByAccount).
func (s *Store) ListSubscriptions(ctx context.Context, account string, limit int32, cursor string) (Page[Subscription], error) {
	var page Page[Subscription]
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
func (s *Store) ListReceipts(ctx context.Context, account string, now time.Time, retention time.Duration, limit int32, cursor string) (Page[Receipt], error) {
	var page Page[Receipt]
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
func (s *Store) ListHistory(ctx context.Context, account, sub string, limit int32, cursor string) (Page[HistoryEntry], error) {
	var page Page[HistoryEntry]
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
func (s *Store) AllHistory(ctx context.Context, account, sub string) ([]HistoryEntry, error) {
	var all []HistoryEntry
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

func (s *Store) listPage(ctx context.Context, table string, kc expression.KeyConditionBuilder, filter *expression.ConditionBuilder,
	forward bool, pk string, limit int32, cursor string) ([]map[string]types.AttributeValue, string, error) {
	start, err := dynamo.DecodeCursor(cursor, map[string]string{"PK": pk}, "PK", "SK")
	if err != nil {
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

// GetSubscriptionAt reads the subscription item at an index entry's keys.
func (s *Store) GetSubscriptionAt(ctx context.Context, e IndexEntry) (Subscription, error) {
	var it subItem
	if err := s.getItem(ctx, e.PK, e.SK, &it); err != nil {
		return Subscription{}, err
	}
	return it.subscription(), nil
}

// GetPeriodAt reads the period item at an index entry's keys.
func (s *Store) GetPeriodAt(ctx context.Context, e IndexEntry) (Period, error) {
	var it periodItem
	if err := s.getItem(ctx, e.PK, e.SK, &it); err != nil {
		return Period{}, err
	}
	return it.period(), nil
}

// GetSubscriptionWithPeriod reads, in one strongly consistent BatchGetItem,
// the subscription at a payments-index entry and its period dated on the
// entry's partition date (the period it is due for, unless it moved since
// the index was read: found is false then).
func (s *Store) GetSubscriptionWithPeriod(ctx context.Context, e IndexEntry) (sub Subscription, p Period, found bool, err error) {
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
		return sub, p, false, ErrNotFound
	}
	return sub, p, found, nil
}
