package reconcile

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
)

// compare finds a difference only where the live rules (docs/design.md §6)
// move state forward: never one that would undo a final state.
func TestCompareMovesOnlyForward(t *testing.T) {
	failed := &struct {
		Code        string `json:"code"`
		DeclineCode string `json:"decline_code"`
	}{Code: "card_declined", DeclineCode: "insufficient_funds"}
	for _, tc := range []struct {
		name      string
		kind      string
		local     localState
		status    string
		lastError bool
		want      string // event type; "" for no drift
	}{
		{"succeeded, payment new", KindPaymentIntent, localState{exists: true, kind: "legacy", payment: "new"}, "succeeded", false, "payment_intent.succeeded"},
		{"succeeded, payment failed", KindPaymentIntent, localState{exists: true, kind: "legacy", payment: "failed"}, "succeeded", false, "payment_intent.succeeded"},
		{"succeeded, paid not fulfilled", KindPaymentIntent, localState{exists: true, kind: "one_off", payment: "paid"}, "succeeded", false, "payment_intent.succeeded"},
		{"succeeded, paid and fulfilled", KindPaymentIntent, localState{exists: true, kind: "legacy", payment: "paid", fulfilled: true}, "succeeded", false, ""},
		{"failed, payment new", KindPaymentIntent, localState{exists: true, kind: "legacy", payment: "new"}, "requires_payment_method", true, "payment_intent.payment_failed"},
		{"failed, payment paid: never undone", KindPaymentIntent, localState{exists: true, kind: "legacy", payment: "paid", fulfilled: true}, "requires_payment_method", true, ""},
		{"failed, already failed", KindPaymentIntent, localState{exists: true, kind: "legacy", payment: "failed"}, "requires_payment_method", true, ""},
		{"not yet paid, no attempt", KindPaymentIntent, localState{exists: true, kind: "legacy", payment: "new"}, "requires_payment_method", false, ""},
		{"processing", KindPaymentIntent, localState{exists: true, kind: "legacy", payment: "new"}, "processing", false, ""},
		{"subscription active, tracked new", KindSubscription, localState{exists: true, subscription: "new"}, "active", false, "customer.subscription.updated"},
		{"subscription canceled, tracked active", KindSubscription, localState{exists: true, subscription: "active", fulfilled: true}, "canceled", false, "customer.subscription.deleted"},
		{"subscription unpaid, tracked active", KindSubscription, localState{exists: true, subscription: "active", fulfilled: true}, "unpaid", false, "customer.subscription.updated"},
		{"subscription active, tracked terminated: never reactivated", KindSubscription, localState{exists: true, subscription: "terminated"}, "active", false, ""},
		{"subscription past_due: no rule", KindSubscription, localState{exists: true, subscription: "active"}, "past_due", false, ""},
		{"subscription in sync", KindSubscription, localState{exists: true, subscription: "active"}, "active", false, ""},
		{"debit settled, period ACHSENT", KindBillingAttempt, localState{exists: true, period: "ACHSENT", transaction: "pi_1"}, "succeeded", false, "payment_intent.succeeded"},
		{"debit failed, period ACHSENT", KindBillingAttempt, localState{exists: true, period: "ACHSENT", transaction: "pi_1"}, "requires_payment_method", true, "payment_intent.payment_failed"},
		{"debit processing", KindBillingAttempt, localState{exists: true, period: "ACHSENT", transaction: "pi_1"}, "processing", false, ""},
		{"period settled since", KindBillingAttempt, localState{exists: true, period: "COMPLETED", transaction: "pi_1"}, "succeeded", false, ""},
		{"period on another attempt now", KindBillingAttempt, localState{exists: true, period: "ACHSENT", transaction: "pi_2"}, "succeeded", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := stripeObject{ID: "pi_1", Status: tc.status}
			if tc.lastError {
				obj.LastPaymentError = failed
			}
			d, found := compare(tc.kind, tc.local, obj)
			assert.Equal(t, tc.want != "", found)
			assert.Equal(t, tc.want, d.eventType)
		})
	}
}

// The snapshot is an event in Stripe's shape the handler parses; its id
// is the same for the same state (the ledger applies it once) and differs
// for another state.
func TestSnapshotIsStableForOneState(t *testing.T) {
	raw := json.RawMessage(`{"id":"pi_1","object":"payment_intent","status":"succeeded","livemode":false,"metadata":{}}`)
	obj := stripeObject{ID: "pi_1", Object: "payment_intent", Status: "succeeded"}
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	a, err := snapshot("acct_1", "payment_intent.succeeded", "2023-10-16", raw, obj, at)
	require.NoError(t, err)
	b, err := snapshot("acct_1", "payment_intent.succeeded", "2023-10-16", raw, obj, at.Add(time.Hour))
	require.NoError(t, err)
	ea, err := stripeevent.Parse(a)
	require.NoError(t, err)
	eb, err := stripeevent.Parse(b)
	require.NoError(t, err)
	assert.Equal(t, ea.ID, eb.ID, "a later run hands over the same event id")
	assert.Regexp(t, `^evt_reconcile_pi_1_[0-9a-f]{16}$`, ea.ID)
	assert.Equal(t, "acct_1", ea.Account)
	assert.EqualValues(t, "payment_intent.succeeded", ea.Type)
	assert.Equal(t, at.Unix(), ea.Created)
	assert.JSONEq(t, string(raw), string(ea.Data.Raw))

	failed := obj
	failed.Status = "requires_payment_method"
	assert.NotEqual(t, snapshotID("pi_1", "payment_intent.payment_failed", failed), ea.ID)

	platform, err := snapshot("", "payment_intent.succeeded", "2023-10-16", raw, obj, at)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(platform, &doc))
	assert.NotContains(t, doc, "account", "a platform object's event has no account, as Stripe sends it")
}
