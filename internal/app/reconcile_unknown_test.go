package app_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// Attempts whose outcome is unknown (docs/design.md §8 "Failures", §11): a
// charge that got no trustworthy answer leaves its period with the
// attempt in flight; the reconciliation asks Stripe for its PaymentIntent
// and settles the period as a collection run would, never charging.

// inFlightEnv is a subscription on a test clock whose first charge got
// no answer: its period has an attempt in flight.
type inFlightEnv struct {
	*purchaseEnv
	fake    *stripetest.Stripe
	clockID string
	subID   string
	payDay  time.Time
}

const inFlightAccount = "acc-unknown"

// chargeWithoutAnswer subscribes on a test clock and advances it to the
// pay day, where Stripe answers the charge as behave says.
func chargeWithoutAnswer(t *testing.T, behave stripetest.Behavior) *inFlightEnv {
	t.Helper()
	fake := stripetest.New(t, stripetest.Options{})
	fake.Decide = func(stripetest.PI) stripetest.Behavior { return behave }
	e := &inFlightEnv{purchaseEnv: startReconcileApp(t, fake, nil), fake: fake}
	base := e.url + "/internal/v1"
	day := time.Now().UTC().AddDate(0, 0, -3)
	status, clock := send(t, http.MethodPost, base+"/test_clocks", map[string]any{"frozen_time": day.Format("2006-01-02") + "T12:00:00Z"})
	require.Equal(t, http.StatusCreated, status, clock)
	e.clockID = clock["id"].(string)
	e.payDay = day.AddDate(0, 0, 2)
	status, sub := send(t, http.MethodPost, base+"/accounts/"+inFlightAccount+"/subscriptions", map[string]any{
		"sku": "gold", "email": "u@example.com", "payment_day": e.payDay.Day(), "amount": 1500, "currency": "usd",
		"term": "MONTHLY", "customer": "cus_unknown", "payment_method": "pm_card_visa", "stripe_account": merchant,
		"test_clock": e.clockID})
	require.Equal(t, http.StatusCreated, status, sub)
	e.subID = sub["subscription_id"].(string)
	e.advance(t, e.payDay)
	p := e.period(t)
	require.NotEmpty(t, p.InFlightKey, "the charge got no answer: its attempt is in flight")
	require.Equal(t, billing.Scheduled, p.Status)
	return e
}

// advance moves the test clock to day and waits for the advance's end (a
// day whose charge got no answer stops it).
func (e *inFlightEnv) advance(t *testing.T, day time.Time) map[string]any {
	t.Helper()
	base := e.url + "/internal/v1/test_clocks/" + e.clockID
	status, body := send(t, http.MethodPost, base+"/advance", map[string]any{"frozen_time": day.Format("2006-01-02") + "T12:00:00Z"})
	require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, status, body)
	var c map[string]any
	require.Eventually(t, func() bool {
		_, c = get(t, base, token)
		return c["status"] != "advancing"
	}, 2*time.Minute, 50*time.Millisecond)
	return c
}

func (e *inFlightEnv) period(t *testing.T) billing.Period {
	t.Helper()
	p, err := e.app.BillingStore.GetPeriod(t.Context(), inFlightAccount, e.subID, dates.In(e.payDay, time.UTC))
	require.NoError(t, err)
	return p
}

// sentAgo makes the attempt in flight one sent ago: the runs wait a few
// minutes before they ask about an attempt, and Stripe's idempotency
// window is a day, longer than a test.
func (e *inFlightEnv) sentAgo(t *testing.T, ago time.Duration) {
	t.Helper()
	p := e.period(t)
	p.InFlightSent = time.Now().Add(-ago)
	tx := billing.NewTx("test:sent-earlier", time.Now())
	tx.PutPeriod(&p, true)
	require.NoError(t, e.app.BillingStore.Commit(t.Context(), tx))
}

func (e *inFlightEnv) receipts(t *testing.T) []any {
	t.Helper()
	_, r := get(t, e.url+"/internal/v1/accounts/"+inFlightAccount+"/receipts", token)
	return r["data"].([]any)
}

func (e *inFlightEnv) completedActions(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, e.app.Pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox WHERE type = 'billing.payment_completed'`).Scan(&n))
	return n
}

// Stripe made the PaymentIntent (and charged) but answered 500, and saved
// that answer for the key: the period stays in flight. A dry run reports
// what Stripe says and changes nothing; a run settles the period
// COMPLETED with its receipt, once; a second run finds nothing.
func TestReconcileSettlesAnAttemptWhoseAnswerWasLost(t *testing.T) {
	e := chargeWithoutAnswer(t, stripetest.Acted500)
	pis := e.fake.PIs()
	require.Len(t, pis, 1)
	charged := pis[0]
	require.Equal(t, "succeeded", charged.Status)
	key := e.period(t).InFlightKey

	// Just sent: a collection may still be making it; nothing to compare.
	run, findings := e.reconcile(t, `{"dry_run": false, "kinds": ["billing_attempt"]}`)
	assert.Equal(t, count(1), counts(run), "an attempt younger than a few minutes is left alone")
	assert.Empty(t, findings)
	assert.Equal(t, key, e.period(t).InFlightKey)

	e.sentAgo(t, 10*time.Minute)
	run, findings = e.reconcile(t, `{"dry_run": true, "kinds": ["billing_attempt"]}`)
	assert.Equal(t, map[string]any{"checked": float64(1), "drifted": float64(1), "healed": float64(0), "failed": float64(0)}, counts(run))
	require.Len(t, findings, 1)
	f := findings[0]
	assert.Equal(t, key, f["object"])
	assert.Equal(t, "billing_attempt", f["kind"])
	assert.Equal(t, merchant, f["stripe_account"])
	assert.Contains(t, f["local"], "attempt 1 outcome unknown")
	assert.Equal(t, "payment_intent "+charged.ID+" succeeded", f["stripe"])
	assert.Contains(t, f["action"], "none (dry run)")
	assert.Nil(t, f["error"])
	p := e.period(t)
	assert.Equal(t, key, p.InFlightKey, "a dry run changes nothing")
	assert.Equal(t, billing.Scheduled, p.Status)
	assert.Empty(t, e.receipts(t))

	run, findings = e.reconcile(t, `{"dry_run": false, "kinds": ["billing_attempt"]}`)
	assert.Equal(t, map[string]any{"checked": float64(1), "drifted": float64(1), "healed": float64(1), "failed": float64(0)}, counts(run))
	require.Len(t, findings, 1)
	f = findings[0]
	assert.Equal(t, key, f["object"])
	assert.Contains(t, f["local"], "attempt 1 outcome unknown")
	assert.Equal(t, "payment_intent "+charged.ID+" succeeded", f["stripe"])
	assert.Equal(t, "settled as COMPLETED from "+charged.ID+", its receipt recorded", f["action"])
	assert.Nil(t, f["error"])
	p = e.period(t)
	assert.Equal(t, billing.Completed, p.Status)
	assert.Equal(t, charged.ID, p.TransactionID)
	assert.Empty(t, p.InFlightKey)
	require.Len(t, e.receipts(t), 1)
	assert.Equal(t, 1, e.completedActions(t))

	run, findings = e.reconcile(t, `{"dry_run": false, "kinds": ["billing_attempt"]}`)
	assert.Equal(t, count(0), counts(run), "nothing is in flight any more")
	assert.Empty(t, findings)
	assert.Len(t, e.fake.PIs(), 1, "the reconciliation never charges")
	assert.Len(t, e.receipts(t), 1)
	assert.Equal(t, 1, e.completedActions(t), "one billing.payment_completed action")
}

// Stripe answered 500 before it made anything: the attempt has no
// PaymentIntent. Within Stripe's idempotency window only a find settles
// it (the original request may still be running; the next collection run
// resends it with its key); past it the attempt is recorded as lost, not
// charged, and the next collection run makes a new one.
func TestReconcileAttemptStripeNeverMade(t *testing.T) {
	e := chargeWithoutAnswer(t, stripetest.Fail500)
	require.Empty(t, e.fake.PIs())
	key := e.period(t).InFlightKey

	e.sentAgo(t, time.Hour)
	run, findings := e.reconcile(t, `{"dry_run": false, "kinds": ["billing_attempt"]}`)
	assert.Equal(t, map[string]any{"checked": float64(1), "drifted": float64(1), "healed": float64(0), "failed": float64(0)}, counts(run))
	require.Len(t, findings, 1)
	assert.Equal(t, "no PaymentIntent of the attempt (yet)", findings[0]["stripe"])
	assert.Contains(t, findings[0]["action"], "still unknown")
	assert.Equal(t, key, e.period(t).InFlightKey, "still in flight")

	e.sentAgo(t, 2*24*time.Hour)
	run, findings = e.reconcile(t, `{"dry_run": true, "kinds": ["billing_attempt"]}`)
	assert.Equal(t, map[string]any{"checked": float64(1), "drifted": float64(1), "healed": float64(0), "failed": float64(0)}, counts(run))
	require.Len(t, findings, 1)
	assert.Equal(t, "none (dry run): would settle it as lost (not charged)", findings[0]["action"])
	assert.Equal(t, key, e.period(t).InFlightKey, "a dry run changes nothing")

	run, findings = e.reconcile(t, `{"dry_run": false, "kinds": ["billing_attempt"]}`)
	assert.Equal(t, map[string]any{"checked": float64(1), "drifted": float64(1), "healed": float64(1), "failed": float64(0)}, counts(run))
	require.Len(t, findings, 1)
	f := findings[0]
	assert.Equal(t, key, f["object"])
	assert.Contains(t, f["local"], "attempt 1 outcome unknown")
	assert.Equal(t, "no PaymentIntent of the attempt", f["stripe"])
	assert.Equal(t, "settled as lost (not charged): period SCHEDULED, attempt 1 recorded; the next collection run makes a new attempt", f["action"])
	p := e.period(t)
	assert.Empty(t, p.InFlightKey)
	assert.Equal(t, billing.Scheduled, p.Status)
	assert.Equal(t, 1, p.Attempts)
	assert.Contains(t, p.Error, "no PaymentIntent at Stripe")
	assert.Empty(t, e.fake.PIs(), "the reconciliation never charges")

	run, findings = e.reconcile(t, `{"dry_run": false, "kinds": ["billing_attempt"]}`)
	assert.Equal(t, count(0), counts(run))
	assert.Empty(t, findings)

	// The period is not forgotten: the next collection charges it, once.
	e.fake.Decide = func(stripetest.PI) stripetest.Behavior { return stripetest.Succeed }
	c := e.advance(t, e.payDay.AddDate(0, 0, 1))
	assert.Equal(t, "ready", c["status"], c)
	p = e.period(t)
	assert.Equal(t, billing.Completed, p.Status)
	require.Len(t, e.fake.PIs(), 1)
	assert.Equal(t, e.fake.PIs()[0].ID, p.TransactionID)
	assert.Len(t, e.receipts(t), 1)
}
