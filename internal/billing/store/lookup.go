package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
)

// Lookup items let an operator find a subscription without its account
// (the console's search): written by the create, in its
// transaction, one per way to find it:
//
//	PK=LKP#SUB#<subscription>        SK=ACC#<account>#SUB#<subscription>
//	PK=LKP#CUS#<customer>            SK=ACC#<account>#SUB#<subscription>
//	PK=LKP#EML#<sha256 of the email> SK=ACC#<account>#SUB#<subscription>
//
// The email is keyed by its hash so that no key holds an address; the
// erasure deletes that item. Subscriptions created before these items
// existed are found by their account only.
const prefixLookup = "LKP#"

// lookupItem points at one subscription.
type lookupItem struct {
	PK             string `dynamodbav:"PK"`
	SK             string `dynamodbav:"SK"`
	Type           string `dynamodbav:"Type"`
	AccountID      string `dynamodbav:"AccountId"`
	SubscriptionID string `dynamodbav:"SubscriptionId"`
}

func lookupPK(by model.LookupBy, value string) string {
	switch by {
	case model.BySubscription:
		return prefixLookup + "SUB#" + value
	case model.ByCustomer:
		return prefixLookup + "CUS#" + value
	case model.ByEmail:
		sum := sha256.Sum256([]byte(strings.ToLower(strings.TrimSpace(value))))
		return prefixLookup + "EML#" + hex.EncodeToString(sum[:])
	}
	return ""
}

func lookupSK(account, sub string) string { return accountPK(account) + "#SUB#" + sub }

// lookupItems are the items that find sub.
func lookupItems(sub model.Subscription) []lookupItem {
	var out []lookupItem
	for _, k := range []struct {
		by    model.LookupBy
		value string
	}{{model.BySubscription, sub.SubscriptionID}, {model.ByCustomer, sub.PaymentDetails.Customer}, {model.ByEmail, sub.Email}} {
		if k.value == "" {
			continue
		}
		out = append(out, lookupItem{PK: lookupPK(k.by, k.value), SK: lookupSK(sub.AccountID, sub.SubscriptionID), Type: "LKP",
			AccountID: sub.AccountID, SubscriptionID: sub.SubscriptionID})
	}
	return out
}

// FindSubscriptions reads the subscriptions a subscription id, a Stripe
// customer or an email finds, at most limit (one query on the lookup items,
// then one read per subscription).
func (s *lookups) FindSubscriptions(ctx context.Context, by model.LookupBy, value string, limit int32) ([]model.Subscription, error) {
	pk := lookupPK(by, value)
	if pk == "" || value == "" {
		return nil, apperr.Invalid("find subscriptions: unknown lookup")
	}
	kc := expression.Key("PK").Equal(expression.Value(pk))
	expr, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, err
	}
	res, err := s.db.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(s.table), KeyConditionExpression: expr.KeyCondition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(), Limit: aws.Int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("find subscriptions: %w", err)
	}
	var out []model.Subscription
	for _, raw := range res.Items {
		var it lookupItem
		if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
			return nil, fmt.Errorf("decode lookup: %w", err)
		}
		sub, err := s.GetSubscription(ctx, it.AccountID, it.SubscriptionID)
		if err != nil {
			return nil, fmt.Errorf("find subscriptions: read %s: %w", it.SubscriptionID, err)
		}
		if by == model.ByEmail && !strings.EqualFold(strings.TrimSpace(sub.Email), strings.TrimSpace(value)) {
			continue // erased since, or a hash collision: not this address
		}
		out = append(out, sub)
	}
	return out, nil
}

// deleteEmailLookup removes the item that finds sub by addr (the erasure).
func (s *erasure) deleteEmailLookup(ctx context.Context, account, sub, addr string) error {
	if addr == "" {
		return nil
	}
	if _, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.table),
		Key: key(lookupPK(model.ByEmail, addr), lookupSK(account, sub))}); err != nil {
		return fmt.Errorf("delete the email lookup of %s: %w", sub, err)
	}
	return nil
}
