package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/stripe-payments/stripe-payments/internal/billing/model"
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
func (s *erasure) ErasePersonalData(ctx context.Context, account, sub string, entry model.HistoryEntry) (model.Erasure, error) {
	var out model.Erasure
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
			return out, fmt.Errorf("erasure entry of %s: %w", sub, model.ErrConflict)
		}
		return out, fmt.Errorf("write the erasure entry of %s: %w", sub, err)
	}
	return out, nil
}

// redactedAddress replaces an erased address in a history entry's text.
const redactedAddress = "[email erased]"

// redactHistory replaces addr in the text fields of sub's history entries
// that quote it.
func (s *erasure) redactHistory(ctx context.Context, account, sub, addr string) (int, error) {
	pk := historyPK(account, sub)
	kc, err := expression.NewBuilder().WithKeyCondition(expression.Key("PK").Equal(expression.Value(pk))).Build()
	if err != nil {
		return 0, err
	}
	n := 0
	p := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{TableName: aws.String(s.history),
		KeyConditionExpression: kc.KeyCondition(), ExpressionAttributeNames: kc.Names(),
		ExpressionAttributeValues: kc.Values(), ConsistentRead: aws.Bool(true)})
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
				if containsFold(v, addr) {
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

// replaceFold replaces every case-insensitive occurrence of old in s,
// leftmost first. It compares rune by rune, as strings.EqualFold does, on
// the original text: lower-casing both sides first would shift the byte
// offsets whenever a rune's lower case has another length (İ, ẞ, Ⱥ) and
// cut the wrong bytes. A byte that is not UTF-8 matches only itself.
func replaceFold(s, old, repl string) string {
	if old == "" {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		if n := prefixFold(s, old); n > 0 {
			b.WriteString(repl)
			s = s[n:]
			continue
		}
		_, n := utf8.DecodeRuneInString(s)
		b.WriteString(s[:n])
		s = s[n:]
	}
	return b.String()
}

// containsFold reports whether s holds old case-insensitively (as
// replaceFold matches).
func containsFold(s, old string) bool {
	if old == "" {
		return true
	}
	for len(s) > 0 {
		if prefixFold(s, old) > 0 {
			return true
		}
		_, n := utf8.DecodeRuneInString(s)
		s = s[n:]
	}
	return false
}

// prefixFold answers how many bytes of s begin with old case-insensitively
// (0: s does not).
func prefixFold(s, old string) int {
	i := 0
	for len(old) > 0 {
		if i == len(s) {
			return 0
		}
		sr, sn := utf8.DecodeRuneInString(s[i:])
		or, on := utf8.DecodeRuneInString(old)
		if (sr == utf8.RuneError && sn == 1) || (or == utf8.RuneError && on == 1) {
			if sn != on || s[i] != old[0] {
				return 0
			}
		} else if !equalFoldRune(sr, or) {
			return 0
		}
		i += sn
		old = old[on:]
	}
	return i
}

// equalFoldRune reports whether a and b are equal under Unicode simple case
// folding (the orbit strings.EqualFold walks).
func equalFoldRune(a, b rune) bool {
	if a == b {
		return true
	}
	for r := unicode.SimpleFold(a); r != a; r = unicode.SimpleFold(r) {
		if r == b {
			return true
		}
	}
	return false
}
