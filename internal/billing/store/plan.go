package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
)

// move renders model.OpMoveSubscription (a plan change, docs/design.md §8): the
// subscription's key names its SKU and a key cannot change, so, as
// reference 003's AdminUpdate does, the item is deleted at its old key and
// put at its new one, here in the change's one transaction: the delete is
// conditioned on the version it was read at (a concurrent change, or a
// collection's write, makes the whole change fail), the put on the new key
// not existing. The id claim is rewritten with the new SKU: still one id,
// one subscription (a create of the id under any SKU stays refused).
func (tx *writes) move(w model.Write) {
	sub := w.Subscription
	if w.FromSKU == sub.SKU || w.Expect == 0 {
		tx.fail(fmt.Errorf("billing transaction: move of %s from %q to %q at version %d", sub.SubscriptionID, w.FromSKU, sub.SKU, w.Expect))
		return
	}
	expr, err := expression.NewBuilder().WithCondition(versionCond(w.Expect)).Build()
	if err != nil {
		tx.fail(err)
		return
	}
	tx.items = append(tx.items, types.TransactWriteItem{Delete: &types.Delete{
		TableName: aws.String(tx.store.table), Key: key(accountPK(sub.AccountID), subSK(sub.SubscriptionID, w.FromSKU)),
		ConditionExpression: expr.Condition(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	}})
	absent := versionCond(0)
	tx.put(toSubItem(sub, tx.store.shards), &absent)
	// The claim is this subscription's (or absent, for one created before
	// claims existed): never another's.
	claimed := expression.AttributeNotExists(expression.Name("PK")).
		Or(expression.Name("SubscriptionId").Equal(expression.Value(sub.SubscriptionID)))
	tx.put(idItem{PK: accountPK(sub.AccountID), SK: idSK(sub.SubscriptionID), Type: "SID",
		SubscriptionID: sub.SubscriptionID, SKU: sub.SKU}, &claimed)
}

// movedSubscription reads the subscription an index entry names where it
// is now: a plan change moved it to the key of its new SKU after the
// (eventually consistent) index was read. apperr.ErrNotFound when it is gone.
func (s *dueIndex) movedSubscription(ctx context.Context, e model.IndexEntry) (model.Subscription, error) {
	subID, _, ok := strings.Cut(strings.TrimPrefix(e.SK, prefixSub), "#SKU#")
	if !ok {
		return model.Subscription{}, fmt.Errorf("not a subscription key: %s", e.SK)
	}
	return s.GetSubscription(ctx, e.AccountID, subID)
}

// isNotFound reports apperr.ErrNotFound.
func isNotFound(err error) bool { return errors.Is(err, apperr.ErrNotFound) }
