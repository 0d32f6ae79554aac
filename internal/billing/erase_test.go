package billing_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
)

// scanFor lists the items of table holding needle in any attribute
// (case-insensitive), as "PK SK".
func scanFor(t *testing.T, e *billingtest.Env, table, needle string) []string {
	t.Helper()
	var hits []string
	p := dynamodb.NewScanPaginator(e.DB, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		require.NoError(t, err)
		for _, it := range page.Items {
			if strings.Contains(strings.ToLower(fmt.Sprint(dump(it))), strings.ToLower(needle)) {
				hits = append(hits, dump(it["PK"])+" "+dump(it["SK"]))
			}
		}
	}
	return hits
}

// dump renders an item or attribute value as text, nested values included.
func dump(v any) string {
	switch x := v.(type) {
	case map[string]types.AttributeValue:
		var b strings.Builder
		for k, a := range x {
			b.WriteString(k + "=" + dump(a) + ";")
		}
		return b.String()
	case *types.AttributeValueMemberS:
		return x.Value
	case *types.AttributeValueMemberM:
		return dump(x.Value)
	case *types.AttributeValueMemberL:
		var b strings.Builder
		for _, a := range x.Value {
			b.WriteString(dump(a) + ",")
		}
		return b.String()
	default:
		return fmt.Sprint(v)
	}
}

// TestErasePersonalData: the erasure leaves the
// subscriber's address nowhere in the billing and history tables (the
// subscription, every period, a history entry that quoted it, the
// indexes' copies), changes no other history entry, appends one entry
// recording it, and the subscription goes on billing (without email).
func TestErasePersonalData(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	const addr = "Payer.Erase@Example.com"
	in := billingtest.Input("gold", 2)
	in.Email = addr
	sub, err := e.Service.CreateSubscription(ctx, "acc-erase", in)
	require.NoError(t, err)
	other, err := e.Service.CreateSubscription(ctx, "acc-erase", func() billing.CreateInput {
		o := billingtest.Input("silver", 2)
		o.Email = "keep@example.com"
		return o
	}())
	require.NoError(t, err)
	remind(t, e, "2024-01-01")
	collect(t, e, "2024-01-02")
	remind(t, e, "2024-01-26")
	periods, err := e.Store.ListPeriods(ctx, sub.AccountID, sub.SubscriptionID)
	require.NoError(t, err)
	require.NotEmpty(t, periods)
	// A history entry quoting the address (a decline message that named it).
	before := history(t, e, sub)
	require.NotEmpty(t, before)
	quoted := fmt.Sprintf("%s#%06d", before[0].BillingDate, before[0].Version)
	_, err = e.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(e.History),
		Key: map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: "ACC#acc-erase#SUB#" + sub.SubscriptionID},
			"SK": &types.AttributeValueMemberS{Value: quoted}},
		UpdateExpression:          aws.String("SET #e = :e"),
		ExpressionAttributeNames:  map[string]string{"#e": "Error"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":e": &types.AttributeValueMemberS{Value: "card of " + strings.ToLower(addr) + " declined"}},
		ConditionExpression:       aws.String("attribute_exists(PK)")})
	require.NoError(t, err)
	require.NotEmpty(t, scanFor(t, e, e.Billing, addr), "the address is in the billing table before")
	require.NotEmpty(t, scanFor(t, e, e.History, addr))

	got, err := e.Service.ErasePersonalData(ctx, sub.AccountID, sub.SubscriptionID)
	require.NoError(t, err)
	assert.True(t, got.Subscription)
	assert.Equal(t, len(periods), got.Periods)
	assert.Equal(t, 1, got.HistoryEntries)

	assert.Empty(t, scanFor(t, e, e.Billing, addr), "the address is nowhere in the billing table")
	assert.Empty(t, scanFor(t, e, e.History, addr), "nor in the history table")
	assert.NotEmpty(t, scanFor(t, e, e.Billing, "keep@example.com"), "another subscriber's address is kept")
	s, err := e.Service.GetSubscription(ctx, sub.AccountID, sub.SubscriptionID)
	require.NoError(t, err)
	assert.Empty(t, s.Email)
	assert.Equal(t, sub.Status, s.Status)

	after := history(t, e, sub)
	require.Len(t, after, len(before)+1, "one entry appended")
	var erasure []billing.HistoryEntry
	for _, h := range after {
		if strings.Contains(h.Cause, "personal data erased") {
			erasure = append(erasure, h)
		}
	}
	require.Len(t, erasure, 1)
	assert.Equal(t, billing.ProcAdmin, erasure[0].Process)
	changed := 0
	for i, h := range before {
		a := after[i]
		if h.Error != a.Error {
			changed++
			assert.Equal(t, "card of [email erased] declined", a.Error)
		}
		h.Error, a.Error = "", ""
		assert.Equal(t, h, a, "no other field of an entry changes")
	}
	assert.Equal(t, 1, changed)

	// Billing goes on: the next period is charged, with no email.
	collect(t, e, "2024-02-02")
	s, err = e.Service.GetSubscription(ctx, sub.AccountID, sub.SubscriptionID)
	require.NoError(t, err)
	assert.Equal(t, "2024-02-02", s.LastPaymentDate.String())
	assert.Empty(t, scanFor(t, e, e.Billing, addr))
	for _, a := range e.Notifier.Actions() {
		if a.SubscriptionID != nil && *a.SubscriptionID == other.SubscriptionID {
			continue
		}
		if a.Created > "2024-01-27" {
			assert.Empty(t, a.Email, "actions after the erasure carry no email")
		}
	}

	_, err = e.Service.ErasePersonalData(ctx, sub.AccountID, "sub-missing")
	assert.ErrorIs(t, err, apperr.ErrNotFound)
}
