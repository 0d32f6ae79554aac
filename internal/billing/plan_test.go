package billing_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billingtest"
	"github.com/stripe-payments/stripe-payments/internal/dynamo"
	"github.com/stripe-payments/stripe-payments/internal/lock"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// planChange is a PATCH with sku and amount.
func planChange(sku string, amount int64) billing.Change {
	return billing.Change{SKU: &sku, Amount: &amount}
}

// docs/design.md §8 "Plan change" and its item-key table: the subscription's key
// names its SKU, so a plan change moves the item to its new key in one
// transaction, keeping its id claim, its periods and its history; every
// period not yet charged is charged at the new plan and records it
// (receipt, billing.payment_completed action); a change to a lower amount
// shows pending_downgrade until the first period at the new plan is
// charged.
func TestPlanChangeMovesTheSubscriptionToItsNewKey(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	collect(t, e, "2024-01-10")
	before := history(t, e, sub)
	require.NotEmpty(t, before)

	e.Clock.SetDate(d("2024-01-15"))
	got, err := e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, planChange("silver", 999))
	require.NoError(t, err)
	assert.Equal(t, "silver", got.SKU)
	assert.Equal(t, int64(999), got.Amount)
	assert.True(t, got.PendingDowngrade, "a change to a lower amount")
	assert.Equal(t, "2024-02-10", got.NextPaymentDate.String(), "the schedule does not move")

	oldPK, oldSK := subKeys(sub)
	assert.Empty(t, rawItem(t, e, oldPK, oldSK), "the old key is gone")
	newPK, newSK := subKeys(got)
	item := rawItem(t, e, newPK, newSK)
	require.NotEmpty(t, item, "the subscription is at its new key")
	assert.Equal(t, "silver", str(item, "SKU"))
	assert.NotEmpty(t, inIndex(t, e, dynamo.BillingPaymentsIndex, newPK, newSK), "in the payments index at its new key")
	assert.Empty(t, inIndex(t, e, dynamo.BillingPaymentsIndex, oldPK, oldSK))
	claim := rawItem(t, e, "ACC#acc-1", "SID#"+sub.SubscriptionID)
	assert.Equal(t, "silver", str(claim, "SKU"), "the id claim follows the key")
	read, err := e.Service.GetSubscription(ctx, "acc-1", sub.SubscriptionID)
	require.NoError(t, err)
	assert.Equal(t, got.Version, read.Version)
	assert.True(t, read.PendingDowngrade)

	// The id stays claimed: a create of it under either SKU is refused.
	for _, sku := range []string{"gold", "bronze"} {
		in := billingtest.Input(sku, 10)
		in.SubscriptionID = sub.SubscriptionID
		_, err := e.Service.CreateSubscription(ctx, "acc-1", in)
		assert.ErrorIs(t, err, billing.ErrDuplicate, sku)
	}

	// Periods and history stay: the charged one keeps its plan, the next
	// one has the new plan.
	assert.Equal(t, "gold", period(t, e, sub, "2024-01-10").SKU)
	next := period(t, e, sub, "2024-02-10")
	assert.Equal(t, "silver", next.SKU)
	assert.Equal(t, int64(999), next.Amount)
	assert.Equal(t, "plan-changed-to-silver", next.UpdatedEvent)
	after := history(t, e, sub)
	for _, h := range before {
		assert.Contains(t, after, h, "history is append-only")
	}

	remind(t, e, "2024-02-03")
	collect(t, e, "2024-02-10")
	pis := e.Stripe.PIs()
	require.Len(t, pis, 2)
	assert.Equal(t, int64(999), pis[1].Amount)
	assert.Equal(t, "silver", pis[1].Metadata[billing.MetaSKU])
	receipts, err := e.Service.ListReceipts(ctx, "acc-1", 100, "")
	require.NoError(t, err)
	var rs []string
	for _, r := range receipts.Items {
		rs = append(rs, fmt.Sprintf("%s %s %d", r.BillingDate, r.SKU, r.Amount))
	}
	assert.ElementsMatch(t, []string{"2024-01-10 gold 1999", "2024-02-10 silver 999"}, rs, "receipts name the plan they paid for")
	var completed []string
	for _, a := range e.Notifier.Actions() {
		if a.Type == billing.ActionPaymentCompleted {
			completed = append(completed, fmt.Sprintf("%s %s %d", a.BillingDetails.BillingDate, a.BillingDetails.SKU, a.BillingDetails.Amount))
		}
	}
	assert.ElementsMatch(t, []string{"2024-01-10 gold 1999", "2024-02-10 silver 999"}, completed)
	read, err = e.Service.GetSubscription(ctx, "acc-1", sub.SubscriptionID)
	require.NoError(t, err)
	assert.False(t, read.PendingDowngrade, "the first period at the new plan is charged")
}

// Bad input: a clear error (ErrInvalid: 400), and nothing changes — the
// item stays at its key and version, the history gains nothing.
func TestPlanChangeBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	amount := func(v int64) *int64 { return &v }
	sku := func(v string) *string { return &v }
	tests := []struct {
		name   string
		ch     billing.Change
		cancel bool
	}{
		{name: "sku without amount", ch: billing.Change{SKU: sku("silver")}},
		{name: "empty sku", ch: billing.Change{SKU: sku(""), Amount: amount(999)}},
		{name: "sku with a key separator", ch: billing.Change{SKU: sku("silver#2"), Amount: amount(999)}},
		{name: "sku with a slash", ch: billing.Change{SKU: sku("silver/2"), Amount: amount(999)}},
		{name: "sku with a space", ch: billing.Change{SKU: sku("silver 2"), Amount: amount(999)}},
		{name: "sku too long", ch: billing.Change{SKU: sku(strings.Repeat("s", 129)), Amount: amount(999)}},
		{name: "amount zero", ch: billing.Change{SKU: sku("silver"), Amount: amount(0)}},
		{name: "amount negative", ch: billing.Change{SKU: sku("silver"), Amount: amount(-100)}},
		{name: "on a cancelled subscription", ch: billing.Change{SKU: sku("silver"), Amount: amount(999)}, cancel: true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			account := fmt.Sprintf("acc-bad-%d", i)
			sub, err := e.Service.CreateSubscription(ctx, account, billingtest.Input("gold", 10))
			require.NoError(t, err)
			if tc.cancel {
				sub, err = e.Service.UpdateSubscription(ctx, account, sub.SubscriptionID, billing.Change{Action: "cancel"})
				require.NoError(t, err)
			}
			h := history(t, e, sub)
			_, err = e.Service.UpdateSubscription(ctx, account, sub.SubscriptionID, tc.ch)
			require.ErrorIs(t, err, apperr.ErrInvalid)
			read, err := e.Service.GetSubscription(ctx, account, sub.SubscriptionID)
			require.NoError(t, err)
			assert.Equal(t, sub.Version, read.Version)
			assert.Equal(t, "gold", read.SKU)
			assert.Equal(t, int64(1999), read.Amount)
			assert.False(t, read.PendingDowngrade)
			assert.Equal(t, h, history(t, e, sub), "history untouched")
			pk, sk := subKeys(sub)
			assert.NotEmpty(t, rawItem(t, e, pk, sk))
		})
	}
}

// A plan change racing a collection (§8: none charged twice or skipped):
// while the collection holds the account's lock the change is refused
// (ErrLocked: 409); while an attempt is in flight (a crash after its claim)
// it is refused (ErrConflict: 409) and the attempt's rerun charges the plan
// it was made for, once; the change is accepted after.
func TestPlanChangeRacingACollection(t *testing.T) {
	t.Parallel()
	t.Run("lock held", func(t *testing.T) {
		t.Parallel()
		e := billingtest.NewEnv(t, billingtest.Options{})
		sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
		require.NoError(t, err)
		other := lock.New(e.DB, e.Locks, lock.Options{Owner: "job", Lease: 2 * time.Second, Heartbeat: 100 * time.Millisecond})
		held, err := other.Acquire(ctx, billing.LockKey("acc-1"), true)
		require.NoError(t, err)
		h := history(t, e, sub)
		_, err = e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, planChange("silver", 999))
		assert.ErrorIs(t, err, billing.ErrLocked)
		assert.Equal(t, h, history(t, e, sub))
		require.NoError(t, held.Release(ctx))
	})
	t.Run("attempt in flight", func(t *testing.T) {
		t.Parallel()
		var once sync.Once
		e := billingtest.NewEnv(t, billingtest.Options{Lease: 300 * time.Millisecond, Heartbeat: 50 * time.Millisecond,
			Crash: func(step string, p billing.Period) error {
				var crash bool
				if step == "claimed" {
					once.Do(func() { crash = true })
				}
				if crash {
					return billing.ErrCrash
				}
				return nil
			}})
		sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
		require.NoError(t, err)
		e.Clock.SetDate(d("2024-01-10"))
		_, err = e.Service.Collect(ctx, d("2024-01-10"))
		require.ErrorIs(t, err, billing.ErrCrash)
		require.NotEmpty(t, period(t, e, sub, "2024-01-10").InFlightKey)
		h := history(t, e, sub)
		require.Eventually(t, func() bool { // the crashed job's lease runs out
			_, err = e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, planChange("silver", 999))
			return !errors.Is(err, billing.ErrLocked)
		}, 20*time.Second, 100*time.Millisecond)
		assert.ErrorIs(t, err, billing.ErrConflict, "an attempt in flight: refused")
		assert.Equal(t, h, history(t, e, sub), "nothing changed")
		read, err := e.Service.GetSubscription(ctx, "acc-1", sub.SubscriptionID)
		require.NoError(t, err)
		assert.Equal(t, "gold", read.SKU)

		rep := collect(t, e, "2024-01-10")
		assert.True(t, rep.OK(), "%+v", rep)
		_, err = e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, planChange("silver", 999))
		require.NoError(t, err)
		collect(t, e, "2024-02-10")
		var got []string
		for _, pi := range e.Stripe.PIs() {
			got = append(got, fmt.Sprintf("%s %s %d %s", pi.Metadata[billing.MetaDate], pi.Metadata[billing.MetaSKU], pi.Amount, pi.Status))
		}
		assert.Equal(t, []string{"2024-01-10 gold 1999 succeeded", "2024-02-10 silver 999 succeeded"}, got,
			"the attempt in flight charged its own plan once; the next period the new plan")
	})
}

// Plan changes and collections run at once, many times over, on many
// subscriptions: whichever wins each race, no period is charged twice or
// skipped, and every charge, receipt and period agree on the plan and
// amount (a charge is for the plan its period had when it was claimed).
func TestPlanChangeConcurrentWithCollections(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	const subs = 6
	ids := make([]string, subs)
	for i := range subs {
		sub, err := e.Service.CreateSubscription(ctx, fmt.Sprintf("acc-race-%d", i), billingtest.Input("plan-0", 10))
		require.NoError(t, err)
		ids[i] = sub.SubscriptionID
	}
	plans := []struct {
		sku    string
		amount int64
	}{{"plan-0", 1999}, {"plan-1", 999}, {"plan-2", 2999}}
	for month := 1; month <= 4; month++ {
		day := d(fmt.Sprintf("2024-%02d-10", month))
		e.Clock.SetDate(day)
		var wg sync.WaitGroup
		for i := range subs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := plans[(i+month)%len(plans)]
				for try := 0; try < 20; try++ {
					_, err := e.Service.UpdateSubscription(ctx, fmt.Sprintf("acc-race-%d", i), ids[i], planChange(p.sku, p.amount))
					if err == nil || !(errors.Is(err, billing.ErrLocked) || errors.Is(err, billing.ErrConflict)) {
						assert.NoError(t, err)
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			}()
		}
		for range 3 { // the day's job, rerun while the changes race it
			_, err := e.Service.Collect(ctx, day)
			require.NoError(t, err)
		}
		wg.Wait()
		rep, err := e.Service.Collect(ctx, day)
		require.NoError(t, err)
		require.True(t, rep.OK(), "%+v", rep)
	}
	byPeriod := map[string][]stripetest.PI{}
	for _, pi := range e.Stripe.PIs() {
		k := pi.Metadata[billing.MetaAccount] + " " + pi.Metadata[billing.MetaDate]
		byPeriod[k] = append(byPeriod[k], pi)
	}
	amountOf := map[string]int64{"plan-0": 1999, "plan-1": 999, "plan-2": 2999}
	for i := range subs {
		account := fmt.Sprintf("acc-race-%d", i)
		receipts, err := e.Service.ListReceipts(ctx, account, 100, "")
		require.NoError(t, err)
		assert.Len(t, receipts.Items, 4, account)
		for _, r := range receipts.Items {
			assert.Equal(t, amountOf[r.SKU], r.Amount, "%s %s: the receipt's plan and amount agree", account, r.BillingDate)
			pis := byPeriod[account+" "+r.BillingDate.String()]
			require.Len(t, pis, 1, "%s %s: one charge", account, r.BillingDate)
			assert.Equal(t, r.SKU, pis[0].Metadata[billing.MetaSKU])
			assert.Equal(t, r.Amount, pis[0].Amount)
			p, err := e.Store.GetPeriod(ctx, account, ids[i], r.BillingDate)
			require.NoError(t, err)
			assert.Equal(t, billing.Completed, p.Status)
			assert.Equal(t, r.SKU, p.SKU)
		}
	}
}

// Across a paused period: the paused periods are skipped at the new plan
// (no charge), the first period after the pause is charged at it, and the
// downgrade is pending until then.
func TestPlanChangeAcrossAPausedPeriod(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	collect(t, e, "2024-01-10")
	e.Clock.SetDate(d("2024-01-15"))
	_, err = e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, billing.Change{Action: "pause", Months: 2})
	require.NoError(t, err)
	e.Clock.SetDate(d("2024-02-20"))
	collect(t, e, "2024-02-10")
	e.Clock.SetDate(d("2024-02-20"))
	got, err := e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, planChange("silver", 999))
	require.NoError(t, err)
	assert.Equal(t, billing.SubPaused, got.Status)
	assert.True(t, got.PendingDowngrade)
	assert.Equal(t, "silver", period(t, e, sub, "2024-03-10").SKU, "the paused period has the new plan")
	collect(t, e, "2024-03-10")
	read, err := e.Service.GetSubscription(ctx, "acc-1", sub.SubscriptionID)
	require.NoError(t, err)
	assert.True(t, read.PendingDowngrade, "a skipped period charges nothing")
	collect(t, e, "2024-04-10")
	var got2 []string
	for _, pi := range e.Stripe.PIs() {
		got2 = append(got2, fmt.Sprintf("%s %s %d", pi.Metadata[billing.MetaDate], pi.Metadata[billing.MetaSKU], pi.Amount))
	}
	assert.Equal(t, []string{"2024-01-10 gold 1999", "2024-04-10 silver 999"}, got2)
	assert.Equal(t, billing.PausedSkipped, period(t, e, sub, "2024-02-10").Status)
	assert.Equal(t, billing.PausedSkipped, period(t, e, sub, "2024-03-10").Status)
	read, err = e.Service.GetSubscription(ctx, "acc-1", sub.SubscriptionID)
	require.NoError(t, err)
	assert.False(t, read.PendingDowngrade)
}

// An index entry read before a plan change names the old key: the job
// finds the subscription where it is now (DynamoDB's indexes are
// eventually consistent, so a run can read the old entry after the move).
func TestIndexEntryOfTheOldKeyFindsTheMovedSubscription(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	pk, sk := subKeys(sub)
	_, err = e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, planChange("platinum", 4999))
	require.NoError(t, err)
	entry := billing.IndexEntry{PK: pk, SK: sk, Date: d("2024-01-10"), AccountID: "acc-1", Kind: billing.EntrySubscription}
	moved, p, found, err := e.Store.GetSubscriptionWithPeriod(ctx, entry)
	require.NoError(t, err)
	assert.Equal(t, "platinum", moved.SKU)
	assert.True(t, found)
	assert.Equal(t, "platinum", p.SKU)
	at, err := e.Store.GetSubscriptionAt(ctx, entry)
	require.NoError(t, err)
	assert.Equal(t, "platinum", at.SKU)
	assert.False(t, at.PendingDowngrade, "an upgrade")
}

// docs/design.md §8 "Plan change": receipts name the plan they paid for. A
// customer who pays the declined PaymentIntent of the old plan (gold)
// just as a change to platinum (2500) cancels it has paid for gold: the
// period is completed at gold's amount, and its receipt and
// billing.payment_completed action say gold, not the plan of the change.
func TestOldPlansPaymentIntentPaidAfterAChangeNamesItsPlan(t *testing.T) {
	t.Parallel()
	e, sub, a := declinedThenSucceeds(t, billingtest.Options{})
	e.Stripe.Wrap(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/"+a.ID+"/cancel") {
				_, _, err := e.Stripe.ConfirmAsCustomer("acct_test", a.ID) // the customer pays first
				assert.NoError(t, err)
			}
			next.ServeHTTP(w, r)
		})
	})
	e.Clock.SetDate(d("2024-01-10"))
	_, err := e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, planChange("platinum", 2500))
	require.NoError(t, err, "the change commits; the cancel that follows is refused: A succeeded")
	paid, _ := e.Stripe.Get(a.ID)
	require.Equal(t, "succeeded", paid.Status)
	require.NoError(t, feed(t, e, paid, "payment_intent.succeeded"))
	collect(t, e, "2024-01-11")

	p := period(t, e, sub, "2024-01-10")
	assert.Equal(t, billing.Completed, p.Status)
	assert.Equal(t, a.ID, p.TransactionID)
	require.Len(t, kept(e, sub, "2024-01-10"), 1, "one successful charge for the period")
	receipts, err := e.Service.ListReceipts(ctx, "acc-1", 100, "")
	require.NoError(t, err)
	require.Len(t, receipts.Items, 1)
	assert.Equal(t, "gold", receipts.Items[0].SKU, "the plan the PaymentIntent was made for")
	assert.Equal(t, a.Amount, receipts.Items[0].Amount, "gold's amount, as the PaymentIntent")
	var completed int
	for _, act := range e.Notifier.Actions() {
		if act.Type == "billing.payment_completed" {
			completed++
			require.NotNil(t, act.BillingDetails)
			assert.Equal(t, "gold", act.SKU, "the action names the plan paid for")
			assert.Equal(t, a.Amount, act.Amount)
		}
	}
	assert.Equal(t, 1, completed)
}

// docs/design.md §8 "Plan change": a bank debit settling when the plan
// changes keeps the plan it was made for; if it then fails, the period was
// not charged, and its retry is a new charge at the new plan and amount.
func TestBankDebitFailingAfterAPlanChangeIsRetriedAtTheNewPlan(t *testing.T) {
	t.Parallel()
	e := billingtest.NewEnv(t, billingtest.Options{})
	sub, err := e.Service.CreateSubscription(ctx, "acc-1", billingtest.Input("gold", 10))
	require.NoError(t, err)
	e.Stripe.Decide = billingtest.Behaviors(stripetest.Process)
	collect(t, e, "2024-01-10")
	debit := e.Stripe.PIs()[0]
	require.Equal(t, billing.ACHSent, period(t, e, sub, "2024-01-10").Status)

	e.Clock.SetDate(d("2024-01-11"))
	_, err = e.Service.UpdateSubscription(ctx, "acc-1", sub.SubscriptionID, planChange("platinum", 2500))
	require.NoError(t, err)
	settling := period(t, e, sub, "2024-01-10")
	assert.Equal(t, "gold", settling.SKU, "the settling debit keeps its plan")
	assert.EqualValues(t, debit.Amount, settling.Amount)

	failed, err := e.Stripe.Settle(debit.ID, false)
	require.NoError(t, err)
	require.NoError(t, feed(t, e, failed, "payment_intent.payment_failed"))
	p := period(t, e, sub, "2024-01-10")
	require.Equal(t, billing.Error, p.Status)
	assert.Equal(t, "platinum", p.SKU, "its retries are new charges: the new plan")
	assert.EqualValues(t, 2500, p.Amount)

	collect(t, e, p.NextAttemptDate.String())
	pis := e.Stripe.PIs()
	require.Len(t, pis, 2, "the retry charged")
	assert.EqualValues(t, 2500, pis[1].Amount)
	assert.Equal(t, "platinum", pis[1].Metadata[billing.MetaSKU])
	assert.Equal(t, billing.Completed, period(t, e, sub, "2024-01-10").Status)
}
