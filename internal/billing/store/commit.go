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

	"github.com/stripe-payments/stripe-payments/internal/billing/model"
)

// versionCond: the item is still at version v (v == 0: it does not exist).
func versionCond(v int64) expression.ConditionBuilder {
	if v == 0 {
		return expression.AttributeNotExists(expression.Name("PK"))
	}
	return expression.Name("Version").Equal(expression.Value(v))
}

// writes is the DynamoDB form of a change: the transaction items of its
// writes, built in order (the first marshal error wins).
type writes struct {
	store *tables
	items []types.TransactWriteItem
	err   error
}

func (tx *writes) fail(err error) {
	if tx.err == nil {
		tx.err = err
	}
}

func (tx *writes) put(item any, cond *expression.ConditionBuilder) {
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
	tx.items = append(tx.items, types.TransactWriteItem{Put: p})
}

// check is a condition on sub without a write: still at version v and not
// CANCELLED.
func (tx *writes) check(sub model.Subscription, v int64) {
	cond := versionCond(v).And(expression.Name("Status").NotEqual(expression.Value(string(model.SubCancelled))))
	expr, err := expression.NewBuilder().WithCondition(cond).Build()
	if err != nil {
		tx.fail(err)
		return
	}
	tx.items = append(tx.items, types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName: aws.String(tx.store.table), Key: key(accountPK(sub.AccountID), subSK(sub.SubscriptionID, sub.SKU)),
		ConditionExpression: expr.Condition(), ExpressionAttributeNames: expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	}})
}

// add renders one write of a model.Tx: the item's index keys follow from
// its state (items.go), its condition from the version it was read at.
func (tx *writes) add(w model.Write) {
	shards := tx.store.shards
	switch w.Op {
	case model.OpPutSubscription:
		cond := versionCond(w.Expect)
		tx.put(toSubItem(w.Subscription, shards), &cond)
	case model.OpCheckSubscription:
		tx.check(w.Subscription, w.Expect)
	case model.OpPutPeriod:
		cond := versionCond(w.Expect)
		tx.put(toPeriodItem(w.Period, shards), &cond)
	case model.OpPutReceipt:
		cond := expression.AttributeNotExists(expression.Name("PK"))
		tx.put(toReceiptItem(w.Receipt), &cond)
	case model.OpPutPaymentRef:
		ref := w.PaymentRef
		tx.put(piItem{PK: piKey(ref.PaymentIntent), SK: piKey(ref.PaymentIntent), Type: "PI",
			PaymentIntent: ref.PaymentIntent, AccountID: ref.AccountID, SubscriptionID: ref.SubscriptionID,
			BillingDate: ref.BillingDate.String(), Amount: ref.Amount, Currency: ref.Currency, RefundID: ref.RefundID}, nil)
	case model.OpPutClockMember:
		sub := w.Subscription
		tx.put(memberItem{PK: clockPK(sub.TestClock), SK: prefixMember + sub.AccountID + "#" + sub.SubscriptionID,
			Type: "MEM", AccountID: sub.AccountID, SubscriptionID: sub.SubscriptionID}, nil)
	case model.OpMoveSubscription:
		tx.move(w) // a plan change (plan.go)
	case model.OpClaimSubscriptionID:
		sub := w.Subscription
		cond := expression.AttributeNotExists(expression.Name("PK"))
		tx.put(idItem{PK: accountPK(sub.AccountID), SK: idSK(sub.SubscriptionID), Type: "SID",
			SubscriptionID: sub.SubscriptionID, SKU: sub.SKU}, &cond)
		// The create's lookup items (lookup.go): found by id, customer, email.
		for _, it := range lookupItems(sub) {
			tx.put(it, nil)
		}
	default:
		tx.fail(fmt.Errorf("billing transaction: unknown write %d", w.Op))
	}
}

// Commit applies every write of tx and appends its history entries in one
// transaction. ErrConflict: an item changed since it was read (or a
// concurrent transaction touched it); nothing was written.
func (s *tables) Commit(ctx context.Context, tx *model.Tx) error {
	w := &writes{store: s}
	for _, x := range tx.Writes() {
		w.add(x)
	}
	return s.commit(ctx, w, tx.History())
}

// commit applies w and the put of every history entry as one change.
func (s *tables) commit(ctx context.Context, tx *writes, history []model.HistoryEntry) error {
	if tx.err != nil {
		return tx.err
	}
	writes := tx.items
	for _, e := range history {
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
				return fmt.Errorf("billing transaction: %w", model.ErrConflict)
			}
		}
	}
	var inProgress *types.TransactionInProgressException
	if errors.As(err, &inProgress) {
		return fmt.Errorf("billing transaction: %w", model.ErrConflict)
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
func (s *tables) historyWrite(e model.HistoryEntry) (types.TransactWriteItem, error) {
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
func (s *tables) single(ctx context.Context, w types.TransactWriteItem) error {
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
		return fmt.Errorf("billing write: %w", model.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("billing write: %w", err)
	}
	return nil
}
