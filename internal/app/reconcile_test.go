package app_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/thin"
)

// Reconciliation (docs/design.md §11): what the service holds compared
// with what Stripe holds now, healed through the one handler.

// testClock is the fake Stripe's clock, moved by the test.
type testClock struct {
	mu sync.Mutex
	at time.Time
}

func (c *testClock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.at }
func (c *testClock) set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.at = t }

func startReconcileApp(t *testing.T, fake *stripetest.Stripe, env map[string]string) *purchaseEnv {
	t.Helper()
	e := &purchaseEnv{stripe: fake, sink: newActionSink(t)}
	// The merchant is a connected account of the platform at Stripe.
	fake.Put("", stripetest.Account(merchant, "standard", "", time.Now().Unix()))
	vars := map[string]string{
		"STRIPE_API_KEY":  "sk_test_fake_reconcile",
		"STRIPE_API_BASE": fake.URL,
		"ACTIONS_URL":     e.sink.URL,
		"ACTIONS_SECRET":  actionsSecret,
	}
	for k, v := range env {
		vars[k] = v
	}
	a := startApp(t, nil, vars)
	e.app, e.url = a, a.Admin.URL()
	return e
}

// reconcile starts a run through the API and waits for its end.
func (e *purchaseEnv) reconcile(t *testing.T, body string) (run map[string]any, findings []map[string]any) {
	t.Helper()
	status, started := e.send(t, http.MethodPost, "/internal/v1/reconciliations", body)
	require.Equal(t, http.StatusAccepted, status, started)
	id := started["id"].(string)
	require.Regexp(t, `^rec_[0-9a-f]{24}$`, id)
	deadline := time.Now().Add(60 * time.Second)
	for {
		run = e.get(t, "/internal/v1/reconciliations/"+id)
		if run["status"] == "done" {
			break
		}
		require.True(t, time.Now().Before(deadline), "reconciliation %s still %v: %v", id, run["status"], run)
		time.Sleep(50 * time.Millisecond)
	}
	list := e.get(t, "/internal/v1/reconciliations/"+id+"/findings")
	for _, f := range list["data"].([]any) {
		findings = append(findings, f.(map[string]any))
	}
	return run, findings
}

func (e *purchaseEnv) send(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, bytes.NewReader([]byte(body)))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), string(raw))
	return resp.StatusCode, out
}

func counts(run map[string]any) map[string]any {
	return map[string]any{"checked": run["checked"], "drifted": run["drifted"], "healed": run["healed"], "failed": run["failed"]}
}

func count(n int) map[string]any {
	return map[string]any{"checked": float64(n), "drifted": float64(0), "healed": float64(0), "failed": float64(0)}
}

// A purchase whose success event was lost 40 days ago, beyond the Events
// API's 30 days: the reconciliation finds it and fulfils it once, through
// the handler; a second run finds nothing.
func TestReconcileFulfilsAPurchaseWhoseSuccessWasLost(t *testing.T) {
	clock := &testClock{at: time.Now().Add(-40 * 24 * time.Hour)}
	fake := stripetest.New(t, stripetest.Options{Now: clock.now})
	e := startReconcileApp(t, fake, nil)

	lost, _, lostPI := e.legacyPurchase(t)
	_, _, okPI := e.legacyPurchase(t) // still unpaid at Stripe: in sync
	_, err := fake.DashboardChange(lostPI, "succeeded")
	require.NoError(t, err)
	clock.set(time.Now())
	require.Equal(t, "new", e.get(t, "/v1/purchases/"+lost)["status"], "no event reached the service")

	run, findings := e.reconcile(t, `{"dry_run": false}`)
	assert.Equal(t, map[string]any{"checked": float64(3), "drifted": float64(1), "healed": float64(1), "failed": float64(0)}, counts(run),
		"two PaymentIntents and the merchant's account")
	require.Len(t, findings, 1)
	f := findings[0]
	assert.Equal(t, lostPI, f["object"])
	assert.Equal(t, "payment_intent", f["kind"])
	assert.Equal(t, merchant, f["stripe_account"])
	assert.Equal(t, "payment_intent new, purchase new", f["local"])
	assert.Equal(t, "payment_intent succeeded", f["stripe"])
	assert.Contains(t, f["action"], "payment_intent.succeeded evt_reconcile_"+lostPI+"_")
	assert.Nil(t, f["error"])

	got := e.get(t, "/v1/purchases/"+lost)
	assert.Equal(t, "fulfilled", got["status"])
	assert.Equal(t, "paid", got["payment_status"])
	acts := waitActions(t, e.sink, 1)
	assert.Equal(t, "purchase.fulfilled", acts[0].Type)
	assert.Equal(t, lost, *acts[0].PurchaseID)

	// Every read was at Stripe, on the merchant's account: the two
	// PaymentIntents (created 40 days before the purchases' rows, outside
	// the listing's window) retrieved one by one.
	var reads []string
	for _, r := range fake.Requests() {
		if r.Method == http.MethodGet && strings.HasPrefix(r.Path, "/v1/payment_intents") {
			assert.Equal(t, merchant, r.StripeAccount)
			reads = append(reads, r.Path)
		}
	}
	assert.ElementsMatch(t, []string{"/v1/payment_intents", "/v1/payment_intents/" + lostPI, "/v1/payment_intents/" + okPI}, reads)

	// A second run finds nothing; nothing is fulfilled twice.
	run, findings = e.reconcile(t, `{"dry_run": false}`)
	assert.Equal(t, count(3), counts(run), "the unpaid purchase, the fulfilled one (final, but changed within the window), the account")
	assert.Empty(t, findings)
	time.Sleep(300 * time.Millisecond)
	assert.Len(t, received(t, e.sink), 1, "fulfilled once")
}

// A subscription cancelled in Stripe's Dashboard, whose event never came:
// the reconciliation unsubscribes it once.
func TestReconcileUnsubscribesASubscriptionCancelledInTheDashboard(t *testing.T) {
	fake := stripetest.New(t, stripetest.Options{})
	e := startReconcileApp(t, fake, nil)
	account := uuid.NewString()
	status, p, _ := e.purchase(t, map[string]any{"account": account, "stripe_account": merchant, "mode": "product",
		"customer": "cus_PfYl2mB3cD4eF5", "payment_method": "pm_1OqDcI2eZvKYlo2CkLmNoPqR", "recurring_price": "price_M1"}, "")
	require.Equal(t, http.StatusCreated, status, p)
	id, sub := p["id"].(string), p["subscription"].(string)
	other, _, _ := e.legacyPurchase(t) // another kind on the same account: not touched
	md := map[string]any{"purchase_id": id, "account": account}
	e.webhook(t, stripetest.Event{Fixture: "customer.subscription.created", Object: map[string]any{"id": sub, "status": "active", "metadata": md}})
	require.Equal(t, "active", e.get(t, "/internal/v1/subscriptions/"+sub)["status"])
	waitActions(t, e.sink, 1) // purchase.fulfilled

	_, err := fake.DashboardChange(sub, "canceled")
	require.NoError(t, err)
	run, findings := e.reconcile(t, `{"dry_run": false, "kinds": ["subscription"]}`)
	assert.Equal(t, map[string]any{"checked": float64(1), "drifted": float64(1), "healed": float64(1), "failed": float64(0)}, counts(run))
	require.Len(t, findings, 1)
	assert.Equal(t, sub, findings[0]["object"])
	assert.Equal(t, "subscription", findings[0]["kind"])
	assert.Equal(t, "subscription active, purchase fulfilled", findings[0]["local"])
	assert.Equal(t, "subscription canceled", findings[0]["stripe"])
	assert.Contains(t, findings[0]["action"], "customer.subscription.deleted")
	assert.Equal(t, "terminated", e.get(t, "/internal/v1/subscriptions/"+sub)["status"])
	acts := waitActions(t, e.sink, 2)
	assert.Equal(t, "subscription.terminated", acts[1].Type)
	assert.Equal(t, sub, *acts[1].SubscriptionID)

	run, findings = e.reconcile(t, `{"dry_run": false}`)
	assert.Equal(t, count(3), counts(run), "the terminated subscription (changed just now), the unpaid purchase, the account")
	assert.Empty(t, findings)
	time.Sleep(300 * time.Millisecond)
	assert.Len(t, received(t, e.sink), 2, "unsubscribed once")
	assert.Equal(t, "new", e.get(t, "/v1/purchases/"+other)["status"])
}

// A dry run reports the drift and changes nothing: no state, no action,
// no event handed to the handler.
func TestReconcileDryRunChangesNothing(t *testing.T) {
	fake := stripetest.New(t, stripetest.Options{})
	e := startReconcileApp(t, fake, nil)
	id, _, pi := e.legacyPurchase(t)
	_, err := fake.DashboardChange(pi, "succeeded")
	require.NoError(t, err)

	run, findings := e.reconcile(t, `{"dry_run": true}`)
	assert.Equal(t, true, run["dry_run"])
	assert.Equal(t, map[string]any{"checked": float64(2), "drifted": float64(1), "healed": float64(0), "failed": float64(0)}, counts(run))
	require.Len(t, findings, 1)
	assert.Equal(t, "none (dry run): would hand the handler payment_intent.succeeded", findings[0]["action"])
	assert.Equal(t, "new", e.get(t, "/v1/purchases/"+id)["status"])
	assert.Equal(t, "new", e.get(t, "/internal/v1/payments/"+pi)["status"])
	time.Sleep(300 * time.Millisecond)
	assert.Empty(t, received(t, e.sink))
	status, _ := get(t, e.url+"/internal/v1/events?stripe_account="+merchant, token)
	require.Equal(t, http.StatusOK, status)
	_, list := get(t, e.url+"/internal/v1/events?stripe_account="+merchant, token)
	assert.Empty(t, list["data"], "no snapshot event was recorded")
}

// Bad requests are refused with a clear error and start nothing.
func TestReconcileRefusesBadRequests(t *testing.T) {
	e := startReconcileApp(t, stripetest.New(t, stripetest.Options{}), nil)
	for _, tc := range []struct{ name, body, want string }{
		{"dry_run missing", `{}`, "dry_run"},
		{"dry_run null", `{"dry_run": null}`, "dry_run"},
		{"unknown kind", `{"dry_run": true, "kinds": ["charge"]}`, "kinds"},
		{"since malformed", `{"dry_run": true, "since": "yesterday"}`, "since"},
		{"since in the future", `{"dry_run": true, "since": "2999-01-01"}`, "since"},
		{"unknown field", `{"dry_run": true, "window": "1d"}`, "window"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := e.send(t, http.MethodPost, "/internal/v1/reconciliations", tc.body)
			assert.Equal(t, http.StatusBadRequest, status, body)
			assert.Contains(t, body["error"].(map[string]any)["message"], tc.want)
		})
	}
	status, _ := e.send(t, http.MethodGet, "/internal/v1/reconciliations/rec_nope", "")
	assert.Equal(t, http.StatusBadRequest, status)
	status, _ = e.send(t, http.MethodGet, "/internal/v1/reconciliations/rec_000000000000000000000000", "")
	assert.Equal(t, http.StatusNotFound, status)
	var n int
	require.NoError(t, e.app.Pool.QueryRow(t.Context(), `SELECT count(*) FROM reconciliations`).Scan(&n))
	assert.Zero(t, n, "no run was started")
}

// A run under a storm of 429s slows down (every retry waits: the budget
// pauses every replica, the reader backs off) and finishes with nothing
// failed.
func TestReconcileUnderA429StormSlowsDownAndFinishes(t *testing.T) {
	fake := stripetest.New(t, stripetest.Options{})
	e := startReconcileApp(t, fake, nil)
	id, _, pi := e.legacyPurchase(t)
	_, err := fake.DashboardChange(pi, "succeeded")
	require.NoError(t, err)
	const storm = 4
	fake.Fail(http.MethodGet, "/v1/payment_intents*", http.StatusTooManyRequests, "invalid_request_error", "rate_limit",
		"Request rate limit exceeded.", storm)

	started := time.Now()
	run, findings := e.reconcile(t, `{"dry_run": false, "kinds": ["payment_intent"]}`)
	assert.Equal(t, map[string]any{"checked": float64(1), "drifted": float64(1), "healed": float64(1), "failed": float64(0)}, counts(run))
	require.Len(t, findings, 1)
	assert.Equal(t, "fulfilled", e.get(t, "/v1/purchases/"+id)["status"])

	var reads []time.Time
	for _, r := range fake.Requests() {
		if r.Method == http.MethodGet && r.Path == "/v1/payment_intents/"+pi {
			reads = append(reads, r.At)
		}
	}
	require.Len(t, reads, storm+1, "each 429 retried once, then the answer")
	for i := 1; i < len(reads); i++ {
		assert.GreaterOrEqual(t, reads[i].Sub(reads[i-1]), 500*time.Millisecond, "retry %d waited (no tight loop)", i)
	}
	t.Logf("%d answers 429 in a row: the run took %s", storm, time.Since(started).Round(time.Millisecond))
}

// RECONCILE_EVERY starts one run per period across every replica: two
// replicas on one database start one scheduled run between them, and it
// runs to its end.
func TestReconcileEveryStartsOneRunAcrossReplicas(t *testing.T) {
	fake := stripetest.New(t, stripetest.Options{})
	e := startReconcileApp(t, fake, map[string]string{"RECONCILE_EVERY": "1h"})
	startReconcileApp(t, fake, map[string]string{"RECONCILE_EVERY": "1h", "DATABASE_URL": e.app.Env["DATABASE_URL"]})
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n, done int
		require.NoError(t, e.app.Pool.QueryRow(t.Context(), `SELECT count(*), count(*) FILTER (WHERE status = 'done')
			FROM reconciliations WHERE created_by = 'schedule' AND NOT dry_run`).Scan(&n, &done))
		if n == 1 && done == 1 {
			break
		}
		require.LessOrEqual(t, n, 1, "one scheduled run per period")
		require.True(t, time.Now().Before(deadline), "no scheduled run done: %d started, %d done", n, done)
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	var n int
	require.NoError(t, e.app.Pool.QueryRow(t.Context(), `SELECT count(*) FROM reconciliations`).Scan(&n))
	assert.Equal(t, 1, n, "the second replica started none")
}

// An ACH debit whose settlement event was lost: its period stays ACHSENT
// until the reconciliation reads the PaymentIntent and settles the period
// through the billing feed, as the webhook would have (COMPLETED, a
// receipt, one billing.payment_completed action); a second run finds
// nothing.
func TestReconcileSettlesAnACHDebitWhoseSettlementWasLost(t *testing.T) {
	fake := stripetest.New(t, stripetest.Options{})
	fake.Decide = func(p stripetest.PI) stripetest.Behavior {
		if strings.Contains(p.PaymentMethod, "Bank") {
			return stripetest.Process
		}
		return stripetest.Succeed
	}
	e := startReconcileApp(t, fake, nil)
	base := e.url + "/internal/v1"
	day := time.Now().UTC().AddDate(0, 0, -20)
	status, clock := send(t, http.MethodPost, base+"/test_clocks", map[string]any{"frozen_time": day.Format("2006-01-02") + "T12:00:00Z"})
	require.Equal(t, http.StatusCreated, status, clock)
	clockID := clock["id"].(string)
	payDay := day.AddDate(0, 0, 2)
	status, sub := send(t, http.MethodPost, base+"/accounts/acc-ach/subscriptions", map[string]any{
		"sku": "gold", "email": "r@example.com", "payment_day": payDay.Day(), "amount": 1200, "currency": "usd",
		"term": "MONTHLY", "customer": "cus_ach", "payment_method": "pm_usBankAccount_success", "stripe_account": merchant,
		"test_clock": clockID})
	require.Equal(t, http.StatusCreated, status, sub)
	subID := sub["subscription_id"].(string)
	status, body := send(t, http.MethodPost, base+"/test_clocks/"+clockID+"/advance",
		map[string]any{"frozen_time": payDay.Format("2006-01-02") + "T12:00:00Z"})
	require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, status, body)
	require.Eventually(t, func() bool {
		_, c := get(t, base+"/test_clocks/"+clockID, token)
		return c["status"] == "ready"
	}, 2*time.Minute, 50*time.Millisecond)
	pis := fake.PIs()
	require.Len(t, pis, 1)
	debit := pis[0]
	require.Equal(t, "processing", debit.Status)
	history := func() []map[string]any {
		_, h := get(t, base+"/accounts/acc-ach/subscriptions/"+subID+"/history", token)
		var out []map[string]any
		for _, x := range h["data"].([]any) {
			out = append(out, x.(map[string]any))
		}
		return out
	}
	// The latest history entry of the charged period (oldest first; the
	// next period is scheduled beside it).
	latest := func() map[string]any {
		var last map[string]any
		for _, h := range history() {
			if h["billing_date"] == payDay.Format("2006-01-02") {
				last = h
			}
		}
		return last
	}
	require.Equal(t, "ACHSENT", latest()["billing_status"])

	// The debit settles at Stripe; its event never reaches the service.
	_, err := fake.Settle(debit.ID, true)
	require.NoError(t, err)

	run, findings := e.reconcile(t, `{"dry_run": false, "kinds": ["billing_attempt"]}`)
	assert.Equal(t, map[string]any{"checked": float64(1), "drifted": float64(1), "healed": float64(1), "failed": float64(0)}, counts(run))
	require.Len(t, findings, 1)
	f := findings[0]
	assert.Equal(t, debit.ID, f["object"])
	assert.Equal(t, "billing_attempt", f["kind"])
	assert.Equal(t, merchant, f["stripe_account"])
	assert.Equal(t, "billing period ACHSENT", f["local"])
	assert.Equal(t, "payment_intent succeeded", f["stripe"])
	assert.Contains(t, f["action"], "settled the period from payment_intent.succeeded evt_reconcile_"+debit.ID+"_")

	last := latest()
	assert.Equal(t, "COMPLETED", last["billing_status"], "settled as the webhook would have")
	assert.Equal(t, debit.ID, last["transaction_id"])
	_, receipts := get(t, base+"/accounts/acc-ach/receipts", token)
	require.Len(t, receipts["data"], 1)

	run, findings = e.reconcile(t, `{"dry_run": false, "kinds": ["billing_attempt"]}`)
	assert.Equal(t, count(0), counts(run), "nothing is ACHSENT any more")
	assert.Empty(t, findings)
	var completed int
	require.NoError(t, e.app.Pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox WHERE type = 'billing.payment_completed'`).Scan(&completed))
	assert.Equal(t, 1, completed, "one billing.payment_completed action")
}

// A connected account that disconnected the platform (Stripe answers 403
// account_invalid) is found and closed in the poller's account registry:
// the poller stops walking it; a second run finds nothing. A dry run only
// reports it.
func TestReconcileStopsPollingADeauthorizedAccount(t *testing.T) {
	fake := stripetest.New(t, stripetest.Options{})
	e := startReconcileApp(t, fake, map[string]string{"STRIPE_PLATFORM_ACCOUNT": "acct_1PlatformReconcile"})
	e.legacyPurchase(t) // the poller walks the merchant's account
	const other = "acct_1OtherMerchant"
	fake.Put("", stripetest.Account(other, "standard", "", time.Now().Unix()))
	_, err := e.app.Pool.Exec(t.Context(), `INSERT INTO processed_events (event_id, stripe_account, event_type, event_created)
		VALUES ('evt_other_1', $1, 'customer.created', now())`, other)
	require.NoError(t, err)
	_, err = fake.DashboardChange(merchant, "deauthorized")
	require.NoError(t, err)

	run, findings := e.reconcile(t, `{"dry_run": true, "kinds": ["account"]}`)
	assert.Equal(t, map[string]any{"checked": float64(2), "drifted": float64(1), "healed": float64(0), "failed": float64(0)}, counts(run))
	require.Len(t, findings, 1)
	assert.Equal(t, "none (dry run): would stop polling the account", findings[0]["action"])
	// What the poller walks, its grace after a close passed.
	reg := thin.NewRegistry(e.app.Pool)
	reg.ClosedGrace = 0
	polled := func() []string {
		accounts, err := thin.Polled{Registry: reg, Others: ledger.NewAccounts(e.app.Pool)}.Accounts(t.Context())
		require.NoError(t, err)
		return accounts
	}
	assert.Contains(t, polled(), merchant, "a dry run closes nothing")

	run, findings = e.reconcile(t, `{"dry_run": false, "kinds": ["account"]}`)
	assert.Equal(t, map[string]any{"checked": float64(2), "drifted": float64(1), "healed": float64(1), "failed": float64(0)}, counts(run))
	require.Len(t, findings, 1)
	f := findings[0]
	assert.Equal(t, merchant, f["object"])
	assert.Equal(t, "account", f["kind"])
	assert.Equal(t, "account polled", f["local"])
	assert.Contains(t, f["stripe"], "access revoked")
	assert.Contains(t, f["action"], "closed in the poller's account registry (evt_reconcile_"+merchant+"_")
	assert.NotContains(t, polled(), merchant, "the poller stops walking it")
	assert.Contains(t, polled(), other)
	for _, r := range fake.Requests() {
		if strings.HasPrefix(r.Path, "/v1/accounts/") {
			assert.Empty(t, r.StripeAccount, "the platform asks about its connected account")
		}
	}

	run, findings = e.reconcile(t, `{"dry_run": false, "kinds": ["account"]}`)
	assert.Equal(t, count(1), counts(run), "the closed account is not compared again; the other one is in sync")
	assert.Empty(t, findings)
}
