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

	"github.com/stripe-payments/stripe-payments/internal/billing"
)

// erasedSKPrefix keys the history entry that records an erasure: it is not
// a period's change (no billing date and version of its own), and sorts
// after every period entry.
const erasedSKPrefix = "ERASED#"

// ErasePersonalData removes the subscriber's personal fields (the email)
// from the subscription item and every period item of sub, replaces the
// address wherever a history entry quotes it (Error, Cause, UpdatedEvent),
// and appends entry, which records the erasure. Rewriting those history
// entries is the only write that ever changes a history entry (docs/retention.md).
// The caller holds the account's billing lock, as every writer of these
// items does, so no write from a stale read puts the email back. It is
// idempotent: a second call finds nothing left to erase and appends one more
// entry. It answers how many items it changed.
func (s *Store) ErasePersonalData(ctx context.Context, account, sub string, entry billing.HistoryEntry) (billing.Erasure, error) {
	var out billing.Erasure
	current, err := s.GetSubscription(ctx, account, sub)
	if err != nil {
		return out, err
	}
	addr := current.Email
	remove := expression.Remove(expression.Name("Email"))
	exists := expression.AttributeExists(expression.Name("PK"))
	upd, err := expression.NewBuilder().WithUpdate(remove).WithCondition(exists).Build()
	if err != nil {
		return out, err
	}
	update := func(key map[string]types.AttributeValue) error {
		_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(s.table), Key: key, UpdateExpression: upd.Update(),
			ConditionExpression: upd.Condition(), ExpressionAttributeNames: upd.Names(), ExpressionAttributeValues: upd.Values(),
		})
		return err
	}
	// The lookup by email first: a rerun after a failure in between still
	// knows the address.
	if err := s.deleteEmailLookup(ctx, account, sub, addr); err != nil {
		return out, err
	}
	if err := update(key(accountPK(account), subSK(sub, current.SKU))); err != nil {
		return out, fmt.Errorf("erase the email of subscription %s: %w", sub, err)
	}
	out.Subscription = true
	periods, err := s.ListPeriods(ctx, account, sub)
	if err != nil {
		return out, err
	}
	for _, p := range periods {
		if p.Email == "" {
			continue
		}
		if err := update(key(accountPK(account), periodSK(sub, p.BillingDate))); err != nil {
			return out, fmt.Errorf("erase the email of period %s of %s: %w", p.BillingDate, sub, err)
		}
		out.Periods++
	}
	if addr != "" {
		n, err := s.redactHistory(ctx, account, sub, addr)
		out.HistoryEntries = n
		if err != nil {
			return out, err
		}
	}
	it := toHistoryItem(entry)
	it.SK = erasedSKPrefix + entry.LastRunDate.UTC().Format(time.RFC3339Nano)
	av, err := attributevalue.MarshalMap(it)
	if err != nil {
		return out, fmt.Errorf("marshal erasure entry: %w", err)
	}
	cond, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name("PK"))).Build()
	if err != nil {
		return out, err
	}
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.history), Item: av,
		ConditionExpression: cond.Condition(), ExpressionAttributeNames: cond.Names()}); err != nil {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			return out, fmt.Errorf("erasure entry of %s: %w", sub, billing.ErrConflict)
		}
		return out, fmt.Errorf("write the erasure entry of %s: %w", sub, err)
	}
	return out, nil
}

// redactedAddress replaces an erased address in a history entry's text.
const redactedAddress = "[email erased]"

// redactHistory replaces addr in the text fields of sub's history entries
// that quote it.
func (s *Store) redactHistory(ctx context.Context, account, sub, addr string) (int, error) {
	pk := historyPK(account, sub)
	kc, err := expression.NewBuilder().WithKeyCondition(expression.Key("PK").Equal(expression.Value(pk))).Build()
	if err != nil {
		return 0, err
	}
	n := 0
	p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{TableName: aws.String(s.history),
		KeyConditionExpression: kc.KeyCondition(), ExpressionAttributeNames: kc.Names(),
		ExpressionAttributeValues: kc.Values(), ConsistentRead: aws.Bool(true)})
	lower := strings.ToLower(addr)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return n, fmt.Errorf("read the history of %s: %w", sub, err)
		}
		for _, raw := range page.Items {
			var it historyItem
			if err := attributevalue.UnmarshalMap(raw, &it); err != nil {
				return n, fmt.Errorf("decode history of %s: %w", sub, err)
			}
			var set expression.UpdateBuilder
			changed := false
			for name, v := range map[string]string{"Error": it.Error, "Cause": it.Cause, "UpdatedEvent": it.UpdatedEvent} {
				if strings.Contains(strings.ToLower(v), lower) {
					set = set.Set(expression.Name(name), expression.Value(replaceFold(v, addr, redactedAddress)))
					changed = true
				}
			}
			if !changed {
				continue
			}
			// The one write that changes a history entry (docs/retention.md):
			// only an entry that exists, only these three text attributes
			// (terraform/iam.tf grants nothing more: BillingHistoryErasure).
			upd, err := expression.NewBuilder().WithUpdate(set).
				WithCondition(expression.AttributeExists(expression.Name("PK"))).Build()
			if err != nil {
				return n, err
			}
			if _, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(s.history),
				Key: key(it.PK, it.SK), UpdateExpression: upd.Update(), ConditionExpression: upd.Condition(),
				ExpressionAttributeNames: upd.Names(), ExpressionAttributeValues: upd.Values()}); err != nil {
				return n, fmt.Errorf("erase the email from a history entry of %s: %w", sub, err)
			}
			n++
		}
	}
	return n, nil
}

// replaceFold replaces every case-insensitive occurrence of old in s.
func replaceFold(s, old, repl string) string {
	var b strings.Builder
	ls, lo := strings.ToLower(s), strings.ToLower(old)
	for {
		i := strings.Index(ls, lo)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		b.WriteString(repl)
		s, ls = s[i+len(old):], ls[i+len(old):]
	}
}
