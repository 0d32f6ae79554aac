package app_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/batchrun"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// batchStripe is the fake Stripe's behaviour in the batch test: the
// period of 2024-01-10 is declined (lost_card for the hard account, which
// gets no retry; insufficient_funds for the others) and its day-1 retry is
// declined again, but for the in-flight account whose retry gets a 500
// before anything happens (its outcome unknown). Once collect is set every
// charge succeeds; the charge of crashOn first cancels crash (the process
// dies while the charge is at Stripe, which still makes it).
type batchStripe struct {
	mu      sync.Mutex
	collect bool
	crashOn string
	crash   context.CancelFunc
}

const (
	batHard   = "bat-a-hard"
	batCrash  = "bat-b-crash"
	batFlight = "bat-c-flight"
	batSoft   = "bat-d-soft"
	batOther  = "bat-e-other" // an ERROR period outside the account selection
	batPaid   = "bat-f-paid"
)

func (b *batchStripe) decide(p stripetest.PI) stripetest.Behavior {
	b.mu.Lock()
	defer b.mu.Unlock()
	acc := p.Metadata[billing.MetaAccount]
	if b.collect {
		if acc == b.crashOn && b.crash != nil {
			b.crash()
			b.crash = nil
			time.Sleep(200 * time.Millisecond) // the client has given up: its answer is lost
		}
		return stripetest.Succeed
	}
	if acc == batPaid || p.Metadata[billing.MetaDate] != "2024-01-10" {
		return stripetest.Succeed
	}
	if acc == batFlight && strings.HasSuffix(p.IdempotencyKey, ":2") {
		return stripetest.Fail500
	}
	return stripetest.Decline
}

// TestBatchCollectionThroughTestClocksResumesAfterRestart (docs/design.md §4, §8
// "Batch collection", "Declines that retrying cannot fix"): subscriptions on
// a test clock whose period of 2024-01-10 is ERROR (a hard decline, soft
// declines, one whose retry is in flight) are collected by a batch naming
// their accounts: a dry run lists them and changes nothing; the batch's
// process dies while Stripe makes the second item's charge; a new process on
// the same tables and database resumes the batch on its own and finishes it:
// every selected period charged once (the interrupted charge settled with
// its own idempotency key, not made again), process BATCH in the history, a
// receipt each; the hard-declined period collected; the in-flight one
// skipped and reported with nothing sent to Stripe; the account outside the
// selection untouched. Bad input is a clear 400 (404 for an unknown batch)
// and changes nothing.
func TestBatchCollectionThroughTestClocksResumesAfterRestart(t *testing.T) {
	ctx := context.Background()
	fake := &batchStripe{}
	first := apptest.New(t, apptest.Options{Env: map[string]string{"INTERNAL_API_TOKEN": token}})
	first.Fake.Decide = fake.decide
	first.Fake.DeclineAs = func(p stripetest.PI) string {
		if p.Metadata[billing.MetaAccount] == batHard {
			return "lost_card"
		}
		return "insufficient_funds"
	}

	clock, err := first.Clocks.CreateClock(ctx, time.Date(2024, 1, 9, 12, 0, 0, 0, time.UTC), "batch")
	require.NoError(t, err)
	subs := map[string]string{}
	for _, acc := range []string{batHard, batCrash, batFlight, batSoft, batOther, batPaid} {
		id := strings.ReplaceAll(acc, "-", "")
		sub, err := first.Billing.CreateSubscription(ctx, acc, billing.CreateInput{SKU: "gold", Email: "b@example.com", PaymentDay: 10,
			Amount: 900, Currency: "usd", Term: dates.Monthly, Customer: "cus_" + id, PaymentMethod: "pm_" + id,
			StripeAccount: "acct_" + id, TestClock: clock.ID})
		require.NoError(t, err)
		subs[acc] = sub.SubscriptionID
	}
	_, done, err := first.Clocks.AdvanceClock(ctx, ctx, clock.ID, time.Date(2024, 1, 11, 12, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	<-done
	period := func(acc string) billing.Period {
		p, err := first.BillingStore.GetPeriod(ctx, acc, subs[acc], dates.MustParse("2024-01-10"))
		require.NoError(t, err)
		return p
	}
	require.Equal(t, billing.Error, period(batHard).Status)
	require.True(t, period(batHard).NotRetried, "lost_card is not retried")
	require.Equal(t, 1, period(batHard).Attempts)
	require.Equal(t, billing.Error, period(batSoft).Status)
	require.Equal(t, 2, period(batSoft).Attempts, "the day-1 retry was made")
	require.NotEmpty(t, period(batFlight).InFlightKey, "the retry's outcome is unknown")
	require.Equal(t, billing.Completed, period(batPaid).Status)

	succeeded := func(acc string) (n int) {
		for _, p := range first.Fake.PIs() {
			if p.Metadata[billing.MetaAccount] == acc && p.Metadata[billing.MetaDate] == "2024-01-10" && p.Status == "succeeded" {
				n++
			}
		}
		return n
	}
	charges := func(acc string) (n int) {
		for _, p := range first.Fake.PIs() {
			if p.Metadata[billing.MetaAccount] == acc {
				n++
			}
		}
		return n
	}
	before := map[string]int{}
	for acc := range subs {
		before[acc] = charges(acc)
	}

	sel := billing.BatchSelection{AccountIDs: []string{batHard, batCrash, batFlight, batSoft, batPaid}}
	// The dry run lists what would be charged and changes nothing.
	preview, err := first.Batches.Store.DryRun(ctx, sel)
	require.NoError(t, err)
	var listed []string
	for _, c := range preview {
		listed = append(listed, c.AccountID+" "+c.BillingDate.String()+" "+c.Skip)
	}
	assert.Equal(t, []string{batHard + " 2024-01-10 ", batCrash + " 2024-01-10 ", batFlight + " 2024-01-10 in_flight", batSoft + " 2024-01-10 "}, listed)
	for acc := range subs {
		assert.Equal(t, before[acc], charges(acc), "a dry run charges nothing (%s)", acc)
	}

	b, err := first.Batches.Store.Start(ctx, sel, "test")
	require.NoError(t, err)
	assert.Equal(t, 4, b.Matched)

	// The first process: dies while Stripe makes the second item's charge.
	fake.mu.Lock()
	fake.collect, fake.crashOn = true, batCrash
	runCtx, cancel := context.WithCancel(ctx)
	fake.crash = cancel
	fake.mu.Unlock()
	runner := batchrun.NewRunner(first.Batches.Store, first.Billing, batchrun.RunnerConfig{Lease: time.Second})
	worked, err := runner.RunOnce(runCtx)
	assert.True(t, worked)
	assert.ErrorIs(t, err, context.Canceled)
	mid, err := first.Batches.Store.Get(ctx, b.ID)
	require.NoError(t, err)
	assert.Equal(t, batchrun.StatusRunning, mid.Status)
	assert.Equal(t, 1, mid.Done, "the item charged at the crash is not recorded")
	assert.Equal(t, billing.BatchPaid, mid.Items[0].Outcome)
	assert.Empty(t, mid.Items[1].Outcome)
	assert.NotEmpty(t, period(batCrash).InFlightKey, "the interrupted charge is in flight")
	assert.Eventually(t, func() bool { return succeeded(batCrash) == 1 }, 5*time.Second, 20*time.Millisecond,
		"Stripe made the interrupted charge")
	first.Close()

	// The restarted process resumes the batch on its own.
	second := apptest.Start(t, apptest.Options{Env: first.Env, Stripe: first.Fake})
	base := second.AdminURL + "/internal/v1/billing/batches"
	var progress map[string]any
	require.Eventually(t, func() bool {
		status, body := get(t, base+"/"+b.ID, token)
		require.Equal(t, http.StatusOK, status, body)
		progress = body
		return body["status"] == batchrun.StatusDone
	}, 60*time.Second, 100*time.Millisecond)
	assert.EqualValues(t, 4, progress["matched"])
	assert.EqualValues(t, 4, progress["done"])
	assert.EqualValues(t, 3, progress["paid"])
	assert.EqualValues(t, 1, progress["skipped"])
	assert.EqualValues(t, 0, progress["failed"])
	outcomes := map[string]string{}
	for _, it := range progress["items"].([]any) {
		m := it.(map[string]any)
		outcomes[m["account_id"].(string)] = m["outcome"].(string)
	}
	assert.Equal(t, map[string]string{batHard: "paid", batCrash: "paid", batFlight: "skipped_in_flight", batSoft: "paid"}, outcomes)

	for _, acc := range []string{batHard, batCrash, batSoft} {
		assert.Equal(t, 1, succeeded(acc), "%s: one successful charge for the period", acc)
		p := period(acc)
		assert.Equal(t, billing.Completed, p.Status, acc)
		assert.Equal(t, billing.ProcBatch, p.Process, acc)
		status, hist := get(t, second.AdminURL+"/internal/v1/accounts/"+acc+"/subscriptions/"+subs[acc]+"/history?limit=1000", token)
		require.Equal(t, http.StatusOK, status, hist)
		var last map[string]any
		for _, h := range hist["data"].([]any) {
			if e := h.(map[string]any); e["billing_date"] == "2024-01-10" {
				last = e
			}
		}
		require.NotNil(t, last, acc)
		assert.Equal(t, "COMPLETED", last["billing_status"], acc)
		assert.Equal(t, "BATCH", last["process"], acc)
		// (The API lists the receipts of the last 13 months of real time.)
		rec, err := second.BillingStore.ListReceipts(ctx, acc, time.Date(2024, 1, 11, 12, 0, 0, 0, time.UTC), 400*24*time.Hour, 10, "")
		require.NoError(t, err)
		require.Len(t, rec.Items, 1, acc)
		assert.Equal(t, "2024-01-10", rec.Items[0].BillingDate.String(), acc)
	}
	assert.Equal(t, before[batCrash]+1, charges(batCrash), "the resumed charge reused its idempotency key: no second PaymentIntent")
	assert.Equal(t, before[batFlight], charges(batFlight), "in flight: nothing sent to Stripe")
	assert.Equal(t, before[batOther], charges(batOther), "outside the selection: untouched")
	assert.Equal(t, billing.Error, period(batOther).Status)

	// A time range without accounts reads the payments index (real time and
	// every test clock): the flight and other accounts are left.
	status, body := send(t, http.MethodPost, base, map[string]any{"since": "2024-01-01", "until": "2024-01-31", "dry_run": true})
	require.Equal(t, http.StatusOK, status, body)
	listed = nil
	for _, it := range body["data"].([]any) {
		m := it.(map[string]any)
		listed = append(listed, m["account_id"].(string)+" "+m["would"].(string))
	}
	assert.Equal(t, []string{batFlight + " skip_in_flight", batOther + " charge"}, listed)

	// Bad input: a clear 4xx, nothing recorded, nothing charged.
	var batches int
	count := func() int {
		require.NoError(t, second.Pool.QueryRow(ctx, `SELECT count(*) FROM billing_batches`).Scan(&batches))
		return batches
	}
	n, pis := count(), len(second.Fake.PIs())
	for _, tc := range []struct {
		name string
		body any
		want string
	}{
		{"no selection and no time range", map[string]any{"dry_run": false}, "account_ids or a time range"},
		{"dry run without selection", map[string]any{"dry_run": true}, "account_ids or a time range"},
		{"dry run matching nothing", map[string]any{"dry_run": true, "account_ids": []string{"bat-nobody"}}, "matches no subscription"},
		{"run matching nothing", map[string]any{"dry_run": false, "account_ids": []string{batPaid}}, "matches no subscription"},
		{"unknown field", map[string]any{"dry_run": false, "accounts": []string{batOther}}, "unknown field"},
		{"field in the wrong case", map[string]any{"dry_run": false, "Account_IDs": []string{batOther}}, ""},
		{"not a date", map[string]any{"dry_run": false, "since": "2024-01-01T00:00:00Z"}, "since must be a date"},
		{"until before since", map[string]any{"dry_run": false, "since": "2024-02-01", "until": "2024-01-01"}, "until must be on or after since"},
		{"range too long without accounts", map[string]any{"dry_run": false, "since": "2022-01-01", "until": "2024-01-31"}, "at most 366 days"},
		{"bad account id", map[string]any{"dry_run": false, "account_ids": []string{"a#b"}}, "account_ids"},
		{"account named twice", map[string]any{"dry_run": false, "account_ids": []string{batOther, batOther}}, "named twice"},
		{"account_ids not a list", map[string]any{"dry_run": false, "account_ids": batOther}, ""},
		{"dry_run not a boolean", map[string]any{"account_ids": []string{batOther}, "dry_run": "yes"}, ""},
		// batOther has an ERROR period a batch would charge: without an
		// explicit dry_run nothing may start.
		{"dry_run missing", map[string]any{"account_ids": []string{batOther}}, "dry_run is required"},
		{"dry_run null", map[string]any{"account_ids": []string{batOther}, "dry_run": nil}, "dry_run is required"},
		{"dry_run missing, a time range", map[string]any{"since": "2024-01-01", "until": "2024-01-31"}, "dry_run is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := send(t, http.MethodPost, base, tc.body)
			assert.Equal(t, http.StatusBadRequest, status, body)
			e, _ := body["error"].(map[string]any)
			require.NotNil(t, e, body)
			assert.Equal(t, "invalid_parameter", e["code"])
			assert.Contains(t, e["message"], tc.want)
		})
	}
	assert.Equal(t, n, count(), "no batch recorded")
	assert.Len(t, second.Fake.PIs(), pis, "nothing charged")
	assert.Equal(t, billing.Error, period(batOther).Status, "the ERROR period a batch would have charged is left as it was")
	status, body = get(t, base+"/bat_000000000000000000000000", token)
	assert.Equal(t, http.StatusNotFound, status, body)
	status, body = get(t, base+"/not-a-batch", token)
	assert.Equal(t, http.StatusBadRequest, status, body)
	status, body = get(t, base+"/"+b.ID+"?x=1", token)
	assert.Equal(t, http.StatusBadRequest, status, body)
}
