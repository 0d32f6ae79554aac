package app_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/app"
	"github.com/stripe-payments/stripe-payments/internal/apptest"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
	"github.com/stripe-payments/stripe-payments/poller"
)

// Thin events end to end: the real program on DynamoDB Local and
// Postgres, Stripe faked at the HTTP level with its Events API v1 and v2.

// startThinApp runs the program against fake and sink; env overrides.
func startThinApp(t *testing.T, fake *stripetest.Stripe, sink *testenv.ActionReceiver, env map[string]string) *purchaseEnv {
	t.Helper()
	all := map[string]string{
		"STRIPE_API_KEY":  "sk_test_fake_thin",
		"STRIPE_API_BASE": fake.URL,
		"ACTIONS_URL":     sink.URL,
		"ACTIONS_SECRET":  actionsSecret,
	}
	for k, v := range env {
		all[k] = v
	}
	a := startApp(t, nil, all)
	return &purchaseEnv{app: a, url: a.Admin.URL(), stripe: fake, sink: sink} // the purchase and internal APIs
}

// legacyPurchase creates a legacy purchase on merchant; it returns the
// purchase id, its account and its PaymentIntent.
func (e *purchaseEnv) legacyPurchase(t *testing.T) (id, account, pi string) {
	t.Helper()
	account = uuid.NewString()
	status, p, _ := e.purchase(t, map[string]any{"account": account, "stripe_account": merchant, "mode": "legacy",
		"amount": 2000, "currency": "usd"}, uuid.NewString())
	require.Equal(t, http.StatusCreated, status, p)
	return p["id"].(string), account, p["payment_intent"].(string)
}

// paidChange is one change at Stripe (a PaymentIntent succeeded) as both
// payloads: the snapshot event, listable on the merchant's Events API v1,
// and the thin event naming it, retrievable on the Events API v2 with the
// merchant as context.
type paidChange struct {
	snapshot, thin     []byte
	snapshotID, thinID string
}

func newPaidChange(t *testing.T, fake *stripetest.Stripe, pi, purchaseID, account string) paidChange {
	t.Helper()
	c := paidChange{snapshotID: stripetest.NewID(), thinID: stripetest.NewThinID()}
	c.snapshot = stripetest.Event{Fixture: "payment_intent.succeeded", ID: c.snapshotID, Account: stripetest.Ptr(merchant),
		Object: map[string]any{"id": pi, "metadata": map[string]any{"purchase_id": purchaseID, "account": account}}}.Build(t)
	c.thin = stripetest.Thin{Fixture: "v1.payment_intent.succeeded", ID: c.thinID, Context: stripetest.Ptr(merchant), RelatedID: pi}.Build(t)
	fake.Add(merchant, c.snapshot)
	fake.AddV2(c.thin, c.snapshotID)
	return c
}

// deliverThin posts a signed body and decodes the answer.
func (e *purchaseEnv) deliver(t *testing.T, body []byte) (int, map[string]any) {
	t.Helper()
	status, raw := e.app.Deliver(t, body)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), string(raw))
	return status, out
}

// event reads an event record through the internal API (nil when 404).
func (e *purchaseEnv) event(t *testing.T, id string) map[string]any {
	t.Helper()
	status, body := get(t, e.url+"/internal/v1/events/"+id, token)
	if status == http.StatusNotFound {
		return nil
	}
	require.Equal(t, http.StatusOK, status, body)
	return body
}

// waitHydrated waits until the thin record is processed and returns it.
func (e *purchaseEnv) waitHydrated(t *testing.T, id string) map[string]any {
	t.Helper()
	var rec map[string]any
	waitFor(t, "thin event "+id+" processed", func() bool {
		rec = e.event(t, id)
		return rec != nil && rec["status"] == "processed"
	})
	return rec
}

func TestThinEventFulfilsALegacyPurchase(t *testing.T) {
	fake, sink := stripetest.New(t, stripetest.Options{}), newActionSink(t)
	e := startThinApp(t, fake, sink, nil)
	id, account, pi := e.legacyPurchase(t)
	c := newPaidChange(t, fake, pi, id, account)

	// Hydration waits a moment at Stripe, so the record is seen received.
	fake.DelayV2(500 * time.Millisecond)
	status, ans := e.deliver(t, c.thin)
	require.Equal(t, http.StatusOK, status, ans)
	assert.Equal(t, "received", ans["outcome"])
	assert.Equal(t, "thin", ans["payload_kind"])
	assert.Equal(t, c.thinID, ans["event_id"])
	rec := e.event(t, c.thinID)
	require.NotNil(t, rec, "the thin record is findable at once")
	assert.Equal(t, "received", rec["status"])
	assert.Equal(t, "thin", rec["payload_kind"])
	assert.Equal(t, "v1.payment_intent.succeeded", rec["type"])
	assert.Equal(t, merchant, rec["stripe_account"])
	assert.Equal(t, pi, rec["related_object"])
	assert.Nil(t, rec["processed_at"])

	rec = e.waitHydrated(t, c.thinID)
	assert.Equal(t, c.snapshotID, rec["snapshot_event"])
	assert.Equal(t, "hydrated", rec["hydration"])
	assert.Empty(t, rec["last_error"])
	snap := e.event(t, c.snapshotID)
	require.NotNil(t, snap, "the snapshot event is recorded under its own id")
	assert.Equal(t, "processed", snap["status"])
	assert.Equal(t, "snapshot", snap["payload_kind"])

	got := e.get(t, "/v1/purchases/"+id)
	assert.Equal(t, "fulfilled", got["status"])
	acts := waitActions(t, sink, 1)
	assert.Equal(t, "purchase.fulfilled", acts[0].Type)
	assert.Equal(t, id, *acts[0].PurchaseID)

	// Hydration asked Stripe for the v2 event with the merchant as its
	// context, then for the snapshot event on the merchant's account.
	var v2, v1 int
	for _, r := range fake.Requests() {
		switch r.Path {
		case "/v2/core/events/" + c.thinID:
			v2++
			assert.Equal(t, merchant, r.StripeContext)
		case "/v1/events/" + c.snapshotID:
			v1++
			assert.Equal(t, merchant, r.StripeAccount)
		}
	}
	assert.Equal(t, 1, v2)
	assert.Equal(t, 1, v1)

	// Metrics: one received, one hydrated, its latency, an empty backlog.
	m := scrape(t, e.app)
	for _, line := range []string{
		`stripe_payments_thin_events_received_total{outcome="received"} 1`,
		`stripe_payments_thin_events_hydrated_total{result="hydrated"} 1`,
		"stripe_payments_thin_hydration_latency_seconds_count 1",
		"stripe_payments_thin_hydration_backlog 0",
		"stripe_payments_thin_hydration_oldest_age_seconds 0",
	} {
		assert.True(t, strings.Contains(m, line+"\n"), "metrics lack %q", line)
	}

	// The listings tell the two kinds apart.
	byKind := func(kind string) []string {
		return listAll(t, e.app, url.Values{"stripe_account": {merchant}, "payload_kind": {kind}})
	}
	assert.Equal(t, []string{c.thinID}, byKind("thin"))
	assert.Equal(t, []string{c.snapshotID}, byKind("snapshot"))
	assert.ElementsMatch(t, []string{c.thinID, c.snapshotID}, listAll(t, e.app, url.Values{"stripe_account": {merchant}}))
	status, body := get(t, e.url+"/internal/v1/events?stripe_account="+merchant+"&payload_kind=fat", token)
	assert.Equal(t, http.StatusBadRequest, status, body)

	// Redelivered: answered as a duplicate, nothing more.
	status, ans = e.deliver(t, c.thin)
	require.Equal(t, http.StatusOK, status, ans)
	assert.Equal(t, "duplicate", ans["outcome"])
	time.Sleep(300 * time.Millisecond)
	assert.Len(t, received(t, sink), 1)
}

// TestSnapshotAndThinOfOneChangeApplyOnce delivers one change as a snapshot
// event and as a thin event (Stripe's migration runs both destinations side
// by side), in both orders and at once, to two replicas on the same
// stores: one effect, one action id, whichever arrives first.
func TestSnapshotAndThinOfOneChangeApplyOnce(t *testing.T) {
	fake, sink := stripetest.New(t, stripetest.Options{}), newActionSink(t)
	a := startThinApp(t, fake, sink, nil)
	b := startThinApp(t, fake, sink, a.app.Env)
	orders := []string{"snapshot first", "thin first", "at once", "at once", "at once"}
	var ids []string
	for i, order := range orders {
		id, account, pi := a.legacyPurchase(t)
		ids = append(ids, id)
		c := newPaidChange(t, fake, pi, id, account)
		snap := func() {
			status, ans := a.deliver(t, c.snapshot)
			assert.Equal(t, http.StatusOK, status, ans)
		}
		thin := func() {
			status, ans := b.deliver(t, c.thin)
			assert.Equal(t, http.StatusOK, status, ans)
		}
		switch order {
		case "snapshot first":
			snap()
			thin()
		case "thin first":
			thin()
			b.waitHydrated(t, c.thinID)
			snap()
		default:
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); snap() }()
			go func() { defer wg.Done(); thin() }()
			wg.Wait()
		}
		rec := a.waitHydrated(t, c.thinID)
		assert.Equal(t, c.snapshotID, rec["snapshot_event"], order)
		// The change is one entry of the ledger, under the snapshot's id:
		// both deliveries claimed the same one.
		var claims, thinClaims int
		require.NoError(t, a.app.Pool.QueryRow(t.Context(),
			`SELECT count(*) FILTER (WHERE event_id = $1), count(*) FILTER (WHERE event_id = $2) FROM processed_events`,
			c.snapshotID, c.thinID).Scan(&claims, &thinClaims))
		assert.Equal(t, 1, claims, order)
		assert.Zero(t, thinClaims, "%s: a thin event is never a ledger entry of its own", order)
		assert.Equal(t, "fulfilled", a.get(t, "/v1/purchases/"+id)["status"], order)
		waitActions(t, sink, i+1)
	}
	time.Sleep(500 * time.Millisecond) // a second action would be on its way
	acts := received(t, sink)
	require.Len(t, acts, len(orders), "one action per change")
	seen := map[string]bool{}
	for _, act := range acts {
		assert.False(t, seen[*act.PurchaseID], "purchase %s fulfilled twice", *act.PurchaseID)
		seen[*act.PurchaseID] = true
	}
	for _, id := range ids {
		assert.True(t, seen[id], "purchase %s fulfilled", id)
	}
}

// TestThinHydrationFailsThenSucceeds: the fake Stripe fails a hydration's
// first call once (404, 403, 429, or no answer until the client's 20 s
// timeout): the record stays received with the error, another
// notification is hydrated meanwhile, and the retry hydrates it.
func TestThinHydrationFailsThenSucceeds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  int // 0: Stripe never answers (a timeout)
		code    string
		wantErr string
	}{
		{"not found", http.StatusNotFound, "resource_missing", "stripe answered"},
		{"forbidden", http.StatusForbidden, "", "stripe answered"},
		{"rate limited", http.StatusTooManyRequests, "rate_limit", "stripe answered"},
		{"timeout", 0, "", "Timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake, sink := stripetest.New(t, stripetest.Options{}), newActionSink(t)
			e := startThinApp(t, fake, sink, nil)
			id, account, pi := e.legacyPurchase(t)
			c := newPaidChange(t, fake, pi, id, account)
			// Another notification, which must not wait behind the failing one.
			id2, account2, pi2 := e.legacyPurchase(t)
			c2 := newPaidChange(t, fake, pi2, id2, account2)
			if tc.status == 0 {
				fake.Hang(http.MethodGet, "/v2/core/events/"+c.thinID, 1)
			} else {
				fake.Fail(http.MethodGet, "/v2/core/events/"+c.thinID, tc.status, "invalid_request_error", tc.code, "scripted failure", 1)
			}

			status, ans := e.deliver(t, c.thin)
			require.Equal(t, http.StatusOK, status, ans)
			var rec map[string]any
			waitFor(t, "the failure recorded", func() bool {
				rec = e.event(t, c.thinID)
				return rec != nil && rec["last_error"] != nil && rec["last_error"] != ""
			})
			assert.Equal(t, "received", rec["status"])
			assert.Equal(t, "retrying", rec["hydration"])
			assert.Contains(t, rec["last_error"], tc.wantErr)
			m := scrape(t, e.app)
			assert.True(t, strings.Contains(m, `stripe_payments_thin_events_hydrated_total{result="retry"}`), "a failed try is counted")
			assert.False(t, strings.Contains(m, "stripe_payments_thin_hydration_backlog 0\n"), "the failed notification waits")

			status, ans = e.deliver(t, c2.thin)
			require.Equal(t, http.StatusOK, status, ans)
			e.waitHydrated(t, c2.thinID)

			rec = e.waitHydrated(t, c.thinID) // the retry, after its backoff
			assert.Equal(t, c.snapshotID, rec["snapshot_event"])
			assert.Empty(t, rec["last_error"], "a success clears the last error")
			assert.Equal(t, "fulfilled", e.get(t, "/v1/purchases/"+id)["status"])
			assert.Equal(t, "fulfilled", e.get(t, "/v1/purchases/"+id2)["status"])
		})
	}
}

// TestThinNotificationSurvivesARestartBeforeHydration: the program records
// a thin notification and answers 200, then stops before any hydrator ran
// (its workers never started); the next start hydrates it.
func TestThinNotificationSurvivesARestartBeforeHydration(t *testing.T) {
	fake, sink := stripetest.New(t, stripetest.Options{}), newActionSink(t)
	// A program that only listens: the endpoint records, nothing hydrates.
	down := apptest.New(t, apptest.Options{Stripe: fake, Env: map[string]string{
		"ACTIONS_URL": sink.URL, "ACTIONS_SECRET": actionsSecret}})
	require.NoError(t, down.Server.Open("127.0.0.1:0"))
	require.NoError(t, down.Admin.Open("127.0.0.1:0"))
	down.URL, down.AdminURL = down.Server.URL(), down.Admin.URL()
	first := &purchaseEnv{app: down, url: down.AdminURL, stripe: fake, sink: sink}
	id, account, pi := first.legacyPurchase(t)
	c := newPaidChange(t, fake, pi, id, account)

	status, ans := first.deliver(t, c.thin)
	require.Equal(t, http.StatusOK, status, ans)
	assert.Equal(t, "received", ans["outcome"])
	time.Sleep(300 * time.Millisecond)
	rec := first.event(t, c.thinID)
	require.NotNil(t, rec)
	assert.Equal(t, "received", rec["status"], "nothing hydrates while no worker runs")
	require.NoError(t, down.Server.Close(t.Context()))
	require.NoError(t, down.Admin.Close(t.Context()))

	again := startThinApp(t, fake, sink, down.Env)
	got := again.waitHydrated(t, c.thinID)
	assert.Equal(t, c.snapshotID, got["snapshot_event"])
	assert.Equal(t, "fulfilled", again.get(t, "/v1/purchases/"+id)["status"])
	waitActions(t, sink, 1)
}

// polled runs the poller once and returns the accounts it listed events for.
func polled(t *testing.T, e *purchaseEnv) map[string]bool {
	t.Helper()
	a := e.app
	before := len(e.stripe.Requests())
	p, err := a.NewPoller(app.PollerOptions{InProcess: true})
	require.NoError(t, err)
	_, err = p.Run(t.Context(), poller.Window{})
	require.NoError(t, err)
	listed := map[string]bool{}
	for _, r := range e.stripe.Requests()[before:] {
		if r.Path == "/v1/events" {
			listed[r.StripeAccount] = true
		}
	}
	return listed
}

// TestAccountsV2EventsKeepThePolledAccounts: a connected account created
// with Accounts v2 (which sends only thin events) starts being polled; its
// configuration updates keep it; once closed, it is polled until its last
// events are in, then no more, even though the ledger knows it.
func TestAccountsV2EventsKeepThePolledAccounts(t *testing.T) {
	fake, sink := stripetest.New(t, stripetest.Options{}), newActionSink(t)
	e := startThinApp(t, fake, sink, nil)
	const acct = "acct_1SkT7pQ9RKHgCVdK" // the fixtures' Accounts v2 account
	assert.False(t, polled(t, e)[acct], "unknown before its event")

	base := time.Now().Add(-time.Minute)
	created := stripetest.Thin{Fixture: "v2.core.account.created", Created: base}.Build(t)
	updated := stripetest.Thin{Fixture: "v2.core.account[configuration.merchant].updated", Created: base.Add(time.Second)}.Build(t)
	closed := stripetest.Thin{Fixture: "v2.core.account.closed", Created: base.Add(2 * time.Second)}.Build(t)
	for _, n := range [][]byte{created, updated, closed} {
		fake.AddV2(n, "")
	}
	status, ans := e.deliver(t, created)
	require.Equal(t, http.StatusOK, status, ans)
	rec := e.waitHydrated(t, ans["event_id"].(string))
	assert.Equal(t, "hydrated", rec["hydration"])
	assert.Equal(t, acct, rec["related_object"])
	assert.True(t, polled(t, e)[acct], "an Accounts v2 account is polled once created")

	// The close arrives before the (older) update: the update does not
	// reopen it.
	status, ans = e.deliver(t, closed)
	require.Equal(t, http.StatusOK, status, ans)
	e.waitHydrated(t, ans["event_id"].(string))
	status, ans = e.deliver(t, updated)
	require.Equal(t, http.StatusOK, status, ans)
	e.waitHydrated(t, ans["event_id"].(string))
	assert.True(t, polled(t, e)[acct], "a closed account is still polled until its last events are in")

	// The ledger knows the account too (an event of it was processed).
	ev := stripetest.Event{Fixture: "payment_intent.succeeded", Account: stripetest.Ptr(acct)}.Build(t)
	status, ans = e.deliver(t, ev)
	require.Equal(t, http.StatusOK, status, ans)
	e.app.Thin.Registry.ClosedGrace = 0 // its last events are in
	assert.False(t, polled(t, e)[acct], "a closed account is no longer polled")
	var state string
	require.NoError(t, e.app.Pool.QueryRow(t.Context(), `SELECT status FROM connected_accounts WHERE account = $1`, acct).Scan(&state))
	assert.Equal(t, "closed", state)
}

// TestOtherV2EventsAreRecordedUnhandled: a v2 type the service has no
// handler for is processed with no effect, marked unhandled.
func TestOtherV2EventsAreRecordedUnhandled(t *testing.T) {
	fake, sink := stripetest.New(t, stripetest.Options{}), newActionSink(t)
	e := startThinApp(t, fake, sink, nil)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(stripetest.Thin{Fixture: "v2.core.account.created"}.Build(t), &doc))
	doc["type"] = "v2.money_management.outbound_payment.posted"
	doc["related_object"] = map[string]any{"id": "obp_test_61RJFv", "type": "v2.money_management.outbound_payment",
		"url": "/v2/money_management/outbound_payments/obp_test_61RJFv"}
	body, err := json.Marshal(doc)
	require.NoError(t, err)
	fake.AddV2(body, "")
	status, ans := e.deliver(t, body)
	require.Equal(t, http.StatusOK, status, ans)
	rec := e.waitHydrated(t, ans["event_id"].(string))
	assert.Equal(t, "unhandled", rec["hydration"])
	assert.Empty(t, rec["snapshot_event"])
}

// TestHealthEventRedrivesItsObject: Stripe failed to generate the event of
// a PaymentIntent's success on a connected account; the resolved health
// event, in Stripe's shape (the object in data.impact.related_object, the
// account in data.impact.context, data.severity; the notification itself
// names no object), is delivered signed, and the service fetches the object
// on that account and drives the purchase to fulfilled, once. The record
// keeps the severity and the metrics count it.
func TestHealthEventRedrivesItsObject(t *testing.T) {
	fake, sink := stripetest.New(t, stripetest.Options{}), newActionSink(t)
	e := startThinApp(t, fake, sink, nil)
	for i, c := range []struct {
		name, context, severity string
	}{
		{"a platform notification", "", "critical"},
		{"a notification on the account", merchant, "non_critical"},
	} {
		t.Run(c.name, func(t *testing.T) {
			id, account, pi := e.legacyPurchase(t)
			obj := fake.Object(pi)
			require.NotNil(t, obj)
			obj["status"] = "succeeded"
			fake.Put(merchant, obj)

			healthID := stripetest.NewThinID()
			health := stripetest.Thin{Fixture: "v2.core.health.event_generation_failure.resolved", ID: healthID,
				Context: stripetest.Ptr(c.context)}.Build(t)
			fake.AddV2Data(health, "", stripetest.HealthResolved{Context: merchant, ObjectID: pi, Severity: c.severity}.Data())
			status, ans := e.deliver(t, health)
			require.Equal(t, http.StatusOK, status, ans)
			rec := e.waitHydrated(t, healthID)
			assert.Equal(t, "hydrated", rec["hydration"])
			assert.Equal(t, c.severity, rec["severity"])
			assert.Empty(t, rec["last_error"])
			got := e.get(t, "/v1/purchases/"+id)
			assert.Equal(t, "fulfilled", got["status"])
			acts := waitActions(t, sink, i+1)
			assert.Equal(t, id, *acts[i].PurchaseID)
			assert.Equal(t, account, acts[i].Account)
			var fetched int
			for _, r := range fake.Requests() {
				if r.Method == http.MethodGet && r.Path == "/v1/payment_intents/"+pi {
					fetched++
					assert.Equal(t, merchant, r.StripeAccount, "fetched on the account data.impact.context names")
				}
			}
			assert.Equal(t, 1, fetched, "the named object is fetched once")
			assert.Contains(t, metricLines(t, e.url, "stripe_payments_thin_health_events_total"),
				`stripe_payments_thin_health_events_total{severity="`+c.severity+`"} 1`)
		})
	}
}

// TestThinSweepTakesInUndeliveredThinEvents: thin events Stripe listed on
// the Events API v2 and never delivered (a destination down) are found by
// the sweep — on the platform (an Accounts v2 account created) and then on
// that account (a v1 thin event) — and processed as if delivered; a second
// sweep takes nothing.
func TestThinSweepTakesInUndeliveredThinEvents(t *testing.T) {
	fake, sink := stripetest.New(t, stripetest.Options{}), newActionSink(t)
	e := startThinApp(t, fake, sink, nil)
	const acct = "acct_1SkT7pQ9RKHgCVdK"
	created := stripetest.Thin{Fixture: "v2.core.account.created", Created: time.Now().Add(-time.Hour)}.Build(t)
	fake.AddV2(created, "")
	snapID := stripetest.NewID()
	fake.Add(acct, stripetest.Event{Fixture: "customer.subscription.updated", ID: snapID, Account: stripetest.Ptr(acct)}.Build(t))
	subThin := stripetest.Thin{Fixture: "v1.customer.subscription.updated", Context: stripetest.Ptr(acct)}.Build(t)
	fake.AddV2(subThin, snapID)
	var createdID, subID string
	for raw, dst := range map[string]*string{string(created): &createdID, string(subThin): &subID} {
		var doc map[string]any
		require.NoError(t, json.Unmarshal([]byte(raw), &doc))
		*dst = doc["id"].(string)
	}

	rep, err := e.app.Thin.Sweeper.Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Taken, "the platform's account event (the account is not known yet)")
	e.waitHydrated(t, createdID)
	rep, err = e.app.Thin.Sweeper.Run(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 2, rep.Accounts, "the platform and the new account")
	assert.Equal(t, 1, rep.Taken, "the account's own thin event")
	rec := e.waitHydrated(t, subID)
	assert.Equal(t, "poller", rec["source"])
	assert.Equal(t, snapID, rec["snapshot_event"])
	var listedWithContext bool
	for _, r := range fake.Requests() {
		if r.Path == "/v2/core/events" && r.StripeContext == acct {
			listedWithContext = true
		}
	}
	assert.True(t, listedWithContext, "the account's events are listed with its Stripe-Context")
	rep, err = e.app.Thin.Sweeper.Run(t.Context())
	require.NoError(t, err)
	assert.Zero(t, rep.Taken, "nothing left to take")
}

// TestEventBridgeThinDetailIsRecordedAndHydrated: a thin event arriving as
// an EventBridge detail goes through the same entry point as the webhook:
// recorded (source eventbridge, payload_kind thin), its message deleted,
// then hydrated into its snapshot event, which fulfils the purchase.
func TestEventBridgeThinDetailIsRecordedAndHydrated(t *testing.T) {
	client := testenv.SQS(t)
	q := testenv.CreateQueue(t, client, 1*time.Second, 2)
	fake, sink := stripetest.New(t, stripetest.Options{}), newActionSink(t)
	e := startThinApp(t, fake, sink, map[string]string{"EVENTBRIDGE_QUEUE_URL": q.URL, "SQS_ENDPOINT": testenv.SQSEndpoint(t)})
	id, account, pi := e.legacyPurchase(t)
	c := newPaidChange(t, fake, pi, id, account)

	sendMessage(t, client, q.URL, testenv.EventBridgeEvent(t, testenv.StripeSource, c.thin))
	rec := e.waitHydrated(t, c.thinID)
	assert.Equal(t, "eventbridge", rec["source"])
	assert.Equal(t, "thin", rec["payload_kind"])
	assert.Equal(t, c.snapshotID, rec["snapshot_event"])
	assert.Equal(t, "fulfilled", e.get(t, "/v1/purchases/"+id)["status"])
	require.Eventually(t, func() bool { return queueEmpty(t, client, q.URL) }, 10*time.Second, 50*time.Millisecond, "the message is deleted")
	waitActions(t, sink, 1)
}

// TestOneChangeAcrossWebhookAndEventBridgeAppliesOnce: an operator runs a
// webhook destination and an EventBridge destination side by side (or moves
// from one to the other), so one change reaches the service through both
// intakes: the same snapshot event twice, or its snapshot through one and
// its thin event through the other. Replica a takes the webhook, replica b
// consumes the queue; in either order and at once: one ledger entry under
// the snapshot's id, one fulfilment, one action id.
func TestOneChangeAcrossWebhookAndEventBridgeAppliesOnce(t *testing.T) {
	client := testenv.SQS(t)
	q := testenv.CreateQueue(t, client, 2*time.Second, 5)
	fake, sink := stripetest.New(t, stripetest.Options{}), newActionSink(t)
	a := startThinApp(t, fake, sink, nil)
	env := map[string]string{"EVENTBRIDGE_QUEUE_URL": q.URL, "SQS_ENDPOINT": testenv.SQSEndpoint(t)}
	for k, v := range a.app.Env {
		env[k] = v
	}
	startThinApp(t, fake, sink, env) // replica b: its consumer takes the queue

	type via struct {
		thin bool // the thin event, else the snapshot
	}
	var ids []string
	n := 0
	for _, pair := range []struct {
		name             string
		webhook, bridged via
	}{
		{"snapshot by both", via{}, via{}},
		{"snapshot by webhook, thin by EventBridge", via{}, via{thin: true}},
		{"thin by webhook, snapshot by EventBridge", via{thin: true}, via{}},
	} {
		for _, order := range []string{"webhook first", "EventBridge first", "at once"} {
			name := pair.name + ", " + order
			id, account, pi := a.legacyPurchase(t)
			ids = append(ids, id)
			c := newPaidChange(t, fake, pi, id, account)
			body := func(v via) []byte {
				if v.thin {
					return c.thin
				}
				return c.snapshot
			}
			// done waits until what one delivery brings is processed.
			done := func(v via) {
				if v.thin {
					a.waitHydrated(t, c.thinID)
					return
				}
				waitFor(t, name+": snapshot processed", func() bool {
					rec := a.event(t, c.snapshotID)
					return rec != nil && rec["status"] == "processed"
				})
			}
			webhook := func() {
				status, ans := a.deliver(t, body(pair.webhook))
				assert.Equal(t, http.StatusOK, status, "%s: %v", name, ans)
			}
			bridged := func() {
				sendMessage(t, client, q.URL, testenv.EventBridgeEvent(t, testenv.StripeSource, body(pair.bridged)))
			}
			switch order {
			case "webhook first":
				webhook()
				done(pair.webhook)
				bridged()
			case "EventBridge first":
				bridged()
				done(pair.bridged)
				webhook()
			default:
				var wg sync.WaitGroup
				wg.Go(webhook)
				wg.Go(bridged)
				wg.Wait()
			}
			done(pair.webhook)
			done(pair.bridged)
			require.Eventually(t, func() bool { return queueEmpty(t, client, q.URL) }, 20*time.Second, 50*time.Millisecond,
				"%s: the message is deleted", name)
			var claims, thinClaims int
			require.NoError(t, a.app.Pool.QueryRow(t.Context(),
				`SELECT count(*) FILTER (WHERE event_id = $1), count(*) FILTER (WHERE event_id = $2) FROM processed_events`,
				c.snapshotID, c.thinID).Scan(&claims, &thinClaims))
			assert.Equal(t, 1, claims, "%s: one ledger entry under the snapshot's id", name)
			assert.Zero(t, thinClaims, name)
			if pair.webhook.thin || pair.bridged.thin {
				assert.Equal(t, c.snapshotID, a.event(t, c.thinID)["snapshot_event"], name)
			}
			src := a.event(t, c.snapshotID)["source"]
			assert.Contains(t, []any{"webhook", "eventbridge", "replay"}, src, name)
			assert.Equal(t, "fulfilled", a.get(t, "/v1/purchases/"+id)["status"], name)
			n++
			waitActions(t, sink, n)
		}
	}
	time.Sleep(500 * time.Millisecond) // a second action would be on its way
	acts := received(t, sink)
	require.Len(t, acts, len(ids), "one action per change")
	seen := map[string]bool{}
	actionIDs := map[string]bool{}
	for _, act := range acts {
		assert.False(t, seen[*act.PurchaseID], "purchase %s fulfilled twice", *act.PurchaseID)
		seen[*act.PurchaseID] = true
		assert.False(t, actionIDs[act.ID.String()], "action id %s sent twice", act.ID)
		actionIDs[act.ID.String()] = true
	}
	for _, id := range ids {
		assert.True(t, seen[id], "purchase %s fulfilled", id)
	}
}

// TestAHangingHydrationHoldsNoOtherNotification: Stripe does not answer one
// hydration (it will time out after 20 s); a notification delivered while
// it hangs is hydrated at once, not after it.
func TestAHangingHydrationHoldsNoOtherNotification(t *testing.T) {
	fake, sink := stripetest.New(t, stripetest.Options{}), newActionSink(t)
	e := startThinApp(t, fake, sink, nil)
	id, account, pi := e.legacyPurchase(t)
	c := newPaidChange(t, fake, pi, id, account)
	id2, account2, pi2 := e.legacyPurchase(t)
	c2 := newPaidChange(t, fake, pi2, id2, account2)
	path := "/v2/core/events/" + c.thinID
	fake.Hang(http.MethodGet, path, 1)

	status, ans := e.deliver(t, c.thin)
	require.Equal(t, http.StatusOK, status, ans)
	waitFor(t, "the hanging hydration in flight", func() bool {
		for _, r := range fake.Requests() {
			if r.Path == path {
				return true
			}
		}
		return false
	})
	start := time.Now()
	status, ans = e.deliver(t, c2.thin)
	require.Equal(t, http.StatusOK, status, ans)
	e.waitHydrated(t, c2.thinID)
	assert.Less(t, time.Since(start), 15*time.Second, "hydrated beside the hanging one, not after its timeout")
	assert.Equal(t, "received", e.event(t, c.thinID)["status"], "the first still hangs")
	assert.Equal(t, "fulfilled", e.get(t, "/v1/purchases/"+id2)["status"])
}

// TestThinNotificationDisagreeingWithStripesCopyIsRefused: what the service
// applies comes from Stripe's copy of the event (GET /v2/core/events/{id}),
// never from the notification. A notification whose type, created, context
// or related object differs from that copy is recorded failed with the
// difference named and applies nothing: not the copy's change, not what
// the notification claims (the case that re-types a PaymentIntent's
// success as a health event dated 2099 naming another PaymentIntent would
// have re-driven that one, dated 2099). Stripe's own notification of the
// event, delivered after, is hydrated and applied from the copy.
func TestThinNotificationDisagreeingWithStripesCopyIsRefused(t *testing.T) {
	fake, sink := stripetest.New(t, stripetest.Options{}), newActionSink(t)
	e := startThinApp(t, fake, sink, nil)
	const otherAccount = "acct_1Qz9XkQ9RKHgCVdK"
	cases := []struct {
		name   string
		forge  func(doc map[string]any, otherPI string)
		naming []string // what last_error names
	}{
		{"re-typed as a health event dated 2099 naming another PaymentIntent", func(doc map[string]any, otherPI string) {
			doc["type"] = "v2.core.health.event_generation_failure.resolved"
			doc["created"] = "2099-01-01T00:00:00.000Z"
			doc["related_object"] = map[string]any{"id": otherPI, "type": "payment_intent", "url": "/v1/payment_intents/" + otherPI}
		}, []string{"type", "created", "related_object"}},
		{"created", func(doc map[string]any, _ string) { doc["created"] = "2099-01-01T00:00:00.000Z" }, []string{"created"}},
		{"context", func(doc map[string]any, _ string) { doc["context"] = otherAccount }, []string{"context"}},
		{"related object", func(doc map[string]any, otherPI string) {
			doc["related_object"] = map[string]any{"id": otherPI, "type": "payment_intent", "url": "/v1/payment_intents/" + otherPI}
		}, []string{"related_object"}},
	}
	fulfilled := 0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id, account, pi := e.legacyPurchase(t)
			otherID, _, otherPI := e.legacyPurchase(t)
			other := fake.Object(otherPI)
			require.NotNil(t, other)
			other["status"] = "succeeded" // a re-drive of it would fulfil its purchase
			fake.Put(merchant, other)
			change := newPaidChange(t, fake, pi, id, account)
			var doc map[string]any
			require.NoError(t, json.Unmarshal(change.thin, &doc))
			c.forge(doc, otherPI)
			forged, err := json.Marshal(doc)
			require.NoError(t, err)
			// Stripe's copy, wherever the forged context sends the request.
			fake.Answer(http.MethodGet, "/v2/core/events/"+change.thinID, http.StatusOK,
				stripetest.V2Copy(change.thin, change.snapshotID, nil), 1)

			status, ans := e.deliver(t, forged)
			require.Equal(t, http.StatusOK, status, ans)
			var rec map[string]any
			waitFor(t, "the forged notification recorded failed", func() bool {
				rec = e.event(t, change.thinID)
				return rec != nil && rec["status"] == "failed"
			})
			assert.Equal(t, "refused", rec["hydration"])
			assert.Contains(t, rec["last_error"], "Stripe's copy")
			for _, field := range c.naming {
				assert.Contains(t, rec["last_error"], field)
			}
			assert.Empty(t, rec["snapshot_event"])
			assert.Nil(t, e.event(t, change.snapshotID), "the snapshot event is not applied")
			for _, r := range fake.Requests() {
				assert.NotEqual(t, "/v1/events/"+change.snapshotID, r.Path, "the snapshot event is not even fetched")
				assert.NotEqual(t, "/v1/payment_intents/"+otherPI, r.Path, "the other PaymentIntent is not re-driven")
			}
			assert.NotEqual(t, "fulfilled", e.get(t, "/v1/purchases/"+id)["status"])
			assert.NotEqual(t, "fulfilled", e.get(t, "/v1/purchases/"+otherID)["status"])
			assert.Len(t, received(t, sink), fulfilled, "no action")
			var queued int
			require.NoError(t, e.app.Pool.QueryRow(t.Context(), `SELECT count(*) FROM thin_hydrations WHERE event_id = $1`,
				change.thinID).Scan(&queued))
			assert.Zero(t, queued, "not retried: Stripe's copy will say the same")
			listed := func() (n int) {
				require.NoError(t, e.app.Pool.QueryRow(t.Context(),
					`SELECT count(*) FROM ops_event_problems WHERE event_id = $1 AND outcome = 'failed'`, change.thinID).Scan(&n))
				return n
			}
			assert.Equal(t, 1, listed(), "on the operators' failed list")

			// Stripe's own notification of the event.
			status, ans = e.deliver(t, change.thin)
			require.Equal(t, http.StatusOK, status, ans)
			rec = e.waitHydrated(t, change.thinID)
			assert.Equal(t, "hydrated", rec["hydration"])
			assert.Equal(t, change.snapshotID, rec["snapshot_event"])
			assert.Equal(t, "v1.payment_intent.succeeded", rec["type"])
			assert.Equal(t, merchant, rec["stripe_account"])
			assert.Equal(t, pi, rec["related_object"])
			assert.NotEqual(t, "2099", rec["date"].(string)[:4], "dated as Stripe's copy")
			assert.Empty(t, rec["last_error"])
			assert.Zero(t, listed(), "off the failed list once hydrated")
			assert.Equal(t, "fulfilled", e.get(t, "/v1/purchases/"+id)["status"])
			assert.NotEqual(t, "fulfilled", e.get(t, "/v1/purchases/"+otherID)["status"])
			fulfilled++
			waitActions(t, sink, fulfilled)
		})
	}
	assert.Contains(t, metricLines(t, e.url, "stripe_payments_thin_events_hydrated_total"),
		`stripe_payments_thin_events_hydrated_total{result="refused"} 4`)
}

// metricLines is the exposition's sample lines of the metric name.
func metricLines(t *testing.T, url, name string) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(metricsText(t, url), "\n") {
		if strings.HasPrefix(l, name+"{") || strings.HasPrefix(l, name+" ") {
			out = append(out, l)
		}
	}
	return out
}
