package billing_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/store"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/lock"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

var (
	ctx = context.Background()
	d   = dates.MustParse
)

// inIndex reports the partitions of index where the item (pk, sk) is.
func inIndex(t *testing.T, e *billingtest.Env, index, pk, sk string) []string {
	t.Helper()
	out, err := e.DB.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(e.Billing), IndexName: aws.String(index)})
	require.NoError(t, err)
	attr := dynamo.BillingGSI1PK
	if index == dynamo.BillingPaymentsIndex {
		attr = dynamo.BillingGSI2PK
	}
	var parts []string
	for _, it := range out.Items {
		if it["PK"].(*types.AttributeValueMemberS).Value == pk && it["SK"].(*types.AttributeValueMemberS).Value == sk {
			parts = append(parts, it[attr].(*types.AttributeValueMemberS).Value)
		}
	}
	return parts
}

func rawItem(t *testing.T, e *billingtest.Env, pk, sk string) map[string]types.AttributeValue {
	t.Helper()
	out, err := e.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.Billing), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: pk}, "SK": &types.AttributeValueMemberS{Value: sk}}})
	require.NoError(t, err)
	return out.Item
}

func str(item map[string]types.AttributeValue, k string) string {
	if v, ok := item[k].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func subKeys(sub billing.Subscription) (string, string) {
	return "ACC#" + sub.AccountID, "SUB#" + sub.SubscriptionID + "#SKU#" + sub.SKU
}

func history(t *testing.T, e *billingtest.Env, sub billing.Subscription) []billing.HistoryEntry {
	t.Helper()
	return e.HistoryOf(t, sub)
}

func statuses(h []billing.HistoryEntry, date string) []billing.Status {
	var out []billing.Status
	for _, e := range h {
		if e.BillingDate.String() == date {
			out = append(out, e.Status)
		}
	}
	return out
}

func period(t *testing.T, e *billingtest.Env, sub billing.Subscription, date string) billing.Period {
	t.Helper()
	return e.Period(t, sub, date)
}

func collect(t *testing.T, e *billingtest.Env, date string) *billing.Report {
	t.Helper()
	return e.Collect(t, date)
}

func remind(t *testing.T, e *billingtest.Env, date string) *billing.Report {
	t.Helper()
	return e.Remind(t, date)
}

func TestCreateSubscriptionIsInBothIndexes(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 15))
	require.NoError(t, err)
	assert.Equal(t, "2024-01-15", sub.NextPaymentDate.String())
	assert.Equal(t, "2024-01-08", sub.NextReminderDate.String())
	assert.Equal(t, billing.SubActive, sub.Status)

	pk, sk := subKeys(sub)
	shard := store.Shard("acc-1", e.Store.Shards())
	assert.Equal(t, []string{store.Partition(d("2024-01-15"), shard)}, inIndex(t, e, dynamo.BillingPaymentsIndex, pk, sk))
	assert.Equal(t, []string{store.Partition(d("2024-01-08"), shard)}, inIndex(t, e, dynamo.BillingRemindersIndex, pk, sk))
	item := rawItem(t, e, pk, sk)
	assert.Equal(t, store.NeverSentinel, str(item, "GSI2SK"), "never paid: the sentinel keeps it in the sparse index")
	assert.Equal(t, store.NeverSentinel, str(item, "GSI1SK"))

	p := period(t, e, sub, "2024-01-15")
	assert.Equal(t, billing.Scheduled, p.Status)
	assert.Equal(t, []billing.Status{billing.Scheduled}, statuses(history(t, e, sub), "2024-01-15"))

	t.Run("idempotent create with a client id", func(t *testing.T) {
		in := billingtest.Input("silver", 3)
		in.SubscriptionID = "fixed-id"
		a, err := e.Service.CreateSubscription(ctx, "acc-1", in)
		require.NoError(t, err)
		b, err := e.Service.CreateSubscription(ctx, "acc-1", in)
		require.NoError(t, err)
		assert.Equal(t, a.Version, b.Version)
		in.Amount = 5
		_, err = e.Service.CreateSubscription(ctx, "acc-1", in)
		assert.ErrorIs(t, err, billing.ErrDuplicate)
	})
}

func TestRemindAndCollectOncePerDate(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 15))
	require.NoError(t, err)

	for range 2 {
		rep := remind(t, e, "2024-01-08")
		assert.LessOrEqual(t, rep.Reminded, 1)
	}
	actions := e.Notifier.Actions()
	require.Len(t, actions, 1)
	assert.Equal(t, billing.ActionReminderDue, actions[0].Type)
	assert.Equal(t, "2024-01-15", actions[0].BillingDate)
	got, err := e.Service.GetSubscription(ctx, "acc-1", sub.SubscriptionID)
	require.NoError(t, err)
	assert.Equal(t, "2024-01-08", got.LastReminderDate.String())
	assert.Equal(t, "2024-02-08", got.NextReminderDate.String())

	for i := range 2 {
		rep := collect(t, e, "2024-01-15")
		if i == 0 {
			assert.Equal(t, 1, rep.Succeeded)
		} else {
			assert.Zero(t, rep.Succeeded, "a rerun charges nobody")
		}
	}
	require.Len(t, e.Stripe.PIs(), 1)
	pi := e.Stripe.PIs()[0]
	assert.Equal(t, "acct_test", pi.Account)
	assert.Equal(t, int64(1999), pi.Amount)
	assert.Equal(t, "billing:acc-1:"+sub.SubscriptionID+":2024-01-15:1", pi.IdempotencyKey)
	assert.Equal(t, map[string]string{"billing_account": "acc-1", "billing_subscription": sub.SubscriptionID,
		"billing_date": "2024-01-15", "billing_sku": "gold", "billing_attempt": "1"}, pi.Metadata)

	p := period(t, e, sub, "2024-01-15")
	assert.Equal(t, billing.Completed, p.Status)
	assert.Equal(t, pi.ID, p.TransactionID)
	got, err = e.Service.GetSubscription(ctx, "acc-1", sub.SubscriptionID)
	require.NoError(t, err)
	assert.Equal(t, "2024-02-15", got.NextPaymentDate.String())
	assert.Equal(t, "2024-01-15", got.LastPaymentDate.String())
	assert.Equal(t, "2024-02-08", got.NextReminderDate.String())
	receipts, err := e.Service.ListReceipts(ctx, "acc-1", 100, "")
	require.NoError(t, err)
	require.Len(t, receipts.Items, 1)
	assert.Equal(t, pi.ID, receipts.Items[0].PaymentIntent)
	assert.Equal(t, "2024-01-15", receipts.Items[0].ProcessedDate.String())
	assert.Equal(t, []billing.Status{billing.Scheduled, billing.Completed}, statuses(history(t, e, sub), "2024-01-15"))
	assert.Equal(t, []billing.Status{billing.Scheduled}, statuses(history(t, e, sub), "2024-02-15"))

	pk, sk := subKeys(sub)
	assert.Equal(t, "2024-01-15", str(rawItem(t, e, pk, sk), "GSI2SK"), "sorted on LastPaymentDate once paid")
	kinds := map[string]int{}
	for _, a := range e.Notifier.Actions() {
		kinds[a.Type]++
	}
	assert.Equal(t, map[string]int{billing.ActionReminderDue: 1, billing.ActionPaymentCompleted: 1}, kinds)
}

func TestDeclinedPeriodRetriesOnScheduleThenGoesStale(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior { return stripetest.Decline }
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 31))
	require.NoError(t, err)
	require.Equal(t, "2024-01-31", sub.NextPaymentDate.String())

	for day := d("2024-01-31"); !day.After(d("2024-03-02")); day = day.AddDays(1) {
		collect(t, e, day.String())
	}
	var attempts []string
	for _, pi := range e.Stripe.PIs() {
		if pi.Metadata["billing_date"] == "2024-01-31" {
			attempts = append(attempts, pi.Created.Format("2006-01-02"))
		}
	}
	assert.Equal(t, []string{"2024-01-31", "2024-02-01", "2024-02-03", "2024-02-05", "2024-02-07"}, attempts)
	p := period(t, e, sub, "2024-01-31")
	assert.Equal(t, billing.Stale, p.Status)
	assert.Equal(t, 5, p.Attempts)
	assert.Equal(t, []billing.Status{billing.Scheduled, billing.Error, billing.Error, billing.Error, billing.Error, billing.Error, billing.Stale},
		statuses(history(t, e, sub), "2024-01-31"))
	// The subscription moved on after the first attempt: February was tried
	// on its own date, in parallel with January's retries.
	feb := period(t, e, sub, "2024-02-29")
	assert.Equal(t, billing.Error, feb.Status)
	receipts, err := e.Service.ListReceipts(ctx, "acc-1", 100, "")
	require.NoError(t, err)
	assert.Empty(t, receipts.Items)
}

func TestRetrySucceeds(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	n := 0
	e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior {
		n++
		if n == 1 {
			return stripetest.Decline
		}
		return stripetest.Succeed
	}
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	collect(t, e, "2024-01-10")
	collect(t, e, "2024-01-11")
	collect(t, e, "2024-01-11")
	p := period(t, e, sub, "2024-01-10")
	assert.Equal(t, billing.Completed, p.Status)
	assert.Equal(t, billing.ProcRetry, p.Process)
	assert.Len(t, e.Stripe.PIs(), 2)
	got, err := e.Service.GetSubscription(ctx, "acc-1", sub.SubscriptionID)
	require.NoError(t, err)
	assert.Equal(t, "2024-01-10", got.LastPaymentDate.String())
	assert.Equal(t, "2024-02-10", got.NextPaymentDate.String())
}

func TestCrashAfterChargeReusesTheIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	lost := true
	e.Stripe.Decide = func(stripetest.PI) stripetest.Behavior {
		if lost {
			lost = false
			return stripetest.Lost
		}
		return stripetest.Succeed
	}
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	rep := collect(t, e, "2024-01-10")
	assert.Equal(t, 1, rep.Unknown)
	p := period(t, e, sub, "2024-01-10")
	assert.Equal(t, billing.Scheduled, p.Status)
	assert.NotEmpty(t, p.InFlightKey)

	rep = collect(t, e, "2024-01-10")
	assert.Equal(t, 1, rep.Succeeded)
	require.Len(t, e.Stripe.PIs(), 1, "the rerun got the same PaymentIntent back")
	assert.Equal(t, billing.Completed, period(t, e, sub, "2024-01-10").Status)
}

// The account lock's key is docs/design.md §8's.
func TestLockKey(t *testing.T) {
	assert.Equal(t, "subscription-billing:user_id:u-42", billing.LockKey("u-42"))
}

func TestLockedAccountIsSkippedAndPickedUpByTheRerun(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	other := lock.New(e.DB, e.Locks, lock.Options{Owner: "other", Lease: 2 * time.Second, Heartbeat: 100 * time.Millisecond})
	held, err := other.Acquire(ctx, billing.LockKey("acc-1"), true)
	require.NoError(t, err)
	rep := collect(t, e, "2024-01-10")
	assert.Equal(t, 1, rep.Locked)
	assert.Empty(t, e.Stripe.PIs())
	_, err = e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{Action: "cancel"})
	assert.ErrorIs(t, err, billing.ErrLocked, "the API refuses while a collection holds the lock")
	require.NoError(t, held.Release(ctx))
	rep = collect(t, e, "2024-01-10")
	assert.Equal(t, 1, rep.Succeeded)
}
