package reconcile

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/stripe/stripe-go/v76"
)

// drift is a difference between the service and Stripe, and the event
// type whose snapshot heals it ("" when no rule of the handler can).
type drift struct {
	stripeState string
	eventType   string
}

// stripeObject is what the comparison reads of a PaymentIntent or a
// subscription.
type stripeObject struct {
	ID               string `json:"id"`
	Object           string `json:"object"`
	Status           string `json:"status"`
	Livemode         bool   `json:"livemode"`
	LastPaymentError *struct {
		Code        string `json:"code"`
		DeclineCode string `json:"decline_code"`
	} `json:"last_payment_error"`
}

// compare decides whether Stripe's object (raw) differs from what the
// service holds, by the handler's own rules: only a difference the event
// Stripe would have sent can move forward is one (a processing
// PaymentIntent, or a past_due subscription, is nothing the service acts
// on). found is false when the two agree.
func compare(kind string, l localState, obj stripeObject) (d drift, found bool) {
	switch kind {
	case KindPaymentIntent:
		d.stripeState = "payment_intent " + obj.Status
		switch {
		case obj.Status == string(stripe.PaymentIntentStatusSucceeded):
			if l.payment != "paid" || (!l.fulfilled && l.kind != "recurring") {
				d.eventType = "payment_intent.succeeded"
				return d, true
			}
		case obj.Status == string(stripe.PaymentIntentStatusRequiresPaymentMethod) && obj.LastPaymentError != nil:
			d.stripeState += " (last payment failed: " + obj.LastPaymentError.Code + ")"
			if l.payment == "" || l.payment == "new" {
				d.eventType = "payment_intent.payment_failed"
				return d, true
			}
		}
	case KindBillingAttempt:
		// A bank debit settles succeeded, or fails (requires_payment_method
		// with its error, or canceled), as payment_intent.succeeded or
		// .payment_failed would have said; processing is still in flight.
		d.stripeState = "payment_intent " + obj.Status
		if !l.exists || l.period != "ACHSENT" || l.transaction != obj.ID {
			return d, false // settled since, or another attempt's now
		}
		switch {
		case obj.Status == string(stripe.PaymentIntentStatusSucceeded):
			d.eventType = "payment_intent.succeeded"
			return d, true
		case obj.LastPaymentError != nil && (obj.Status == string(stripe.PaymentIntentStatusRequiresPaymentMethod) ||
			obj.Status == string(stripe.PaymentIntentStatusCanceled)):
			d.stripeState += " (payment failed: " + obj.LastPaymentError.Code + ")"
			d.eventType = "payment_intent.payment_failed"
			return d, true
		}
	case KindSubscription:
		d.stripeState = "subscription " + obj.Status
		var target string
		switch stripe.SubscriptionStatus(obj.Status) {
		case stripe.SubscriptionStatusActive:
			target = "active"
		case stripe.SubscriptionStatusCanceled, stripe.SubscriptionStatusIncompleteExpired, stripe.SubscriptionStatusUnpaid:
			target = "terminated"
		}
		if target == "" || l.subscription == target || l.subscription == "terminated" {
			return d, false
		}
		d.eventType = "customer.subscription.updated"
		if obj.Status == string(stripe.SubscriptionStatusCanceled) {
			d.eventType = "customer.subscription.deleted"
		}
		return d, true
	}
	return d, false
}

// snapshotID is the snapshot event's id: evt_reconcile_<object>_<hash of
// the state it carries>. The same state of the same object always has the
// same id, so the handler's ledger applies it once however many runs (or
// replicas, or a restart half-way) hand it over.
func snapshotID(objectID, eventType string, obj stripeObject) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s|%s|%s", eventType, obj.ID, obj.Status)
	if obj.LastPaymentError != nil {
		fmt.Fprintf(h, "|%s|%s", obj.LastPaymentError.Code, obj.LastPaymentError.DeclineCode)
	}
	return "evt_reconcile_" + objectID + "_" + hex.EncodeToString(h.Sum(nil))[:16]
}

// snapshot builds the event Stripe would have sent for obj now, in
// Stripe's shape, on account. It is dated now: it says what Stripe holds
// at this moment, so it is newer than every event the service applied,
// and an older event arriving later never undoes it.
func snapshot(account, eventType, apiVersion string, raw json.RawMessage, obj stripeObject, now time.Time) ([]byte, error) {
	ev := map[string]any{
		"id":               snapshotID(obj.ID, eventType, obj),
		"object":           "event",
		"api_version":      apiVersion,
		"created":          now.Unix(),
		"type":             eventType,
		"livemode":         obj.Livemode,
		"pending_webhooks": 0,
		"request":          map[string]any{"id": nil, "idempotency_key": nil},
		"data":             map[string]any{"object": raw},
	}
	if account != "" { // "": the platform's own object, as Stripe sends it
		ev["account"] = account
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", obj.ID, err)
	}
	return b, nil
}
