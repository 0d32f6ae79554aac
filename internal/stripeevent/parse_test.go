package stripeevent_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripeid"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
)

// stripeGoParse is the oracle: stripe-go's own decoder of an event, with the
// checks Parse documents, and the subscription rule read from the generic
// map (the implementation Parse replaced for speed).
func stripeGoParse(payload []byte) (*stripe.Event, string, bool) {
	var ev stripe.Event
	if err := json.Unmarshal(payload, &ev); err != nil {
		return nil, "", false
	}
	if ev.Object != "event" || !stripeid.Valid(ev.ID, "evt_") || ev.Created <= 0 || ev.Created > stripeevent.MaxCreated ||
		ev.Data == nil || ev.Data.Object == nil || (ev.Account != "" && !stripeid.Valid(ev.Account, "acct_")) {
		return nil, "", false
	}
	obj := ev.Data.Object
	valid := func(v any) string {
		if id, ok := v.(string); ok && stripeid.Valid(id, "sub_") {
			return id
		}
		return ""
	}
	if obj["object"] == "subscription" {
		return &ev, valid(obj["id"]), true
	}
	switch ref := obj["subscription"].(type) {
	case string:
		return &ev, valid(ref), true
	case map[string]any:
		return &ev, valid(ref["id"]), true
	}
	if parent, ok := obj["parent"].(map[string]any); ok {
		if details, ok := parent["subscription_details"].(map[string]any); ok {
			return &ev, valid(details["subscription"]), true
		}
	}
	return &ev, "", true
}

func seeds(t testing.TB) [][]byte {
	out := [][]byte{
		[]byte(`{"id":"evt_1","object":"event","type":"x","created":1,"data":{"object":{"subscription":{"id":"sub_1"}}}}`),
		[]byte(`{"id":"evt_1","object":"event","type":"x","created":1,"data":{"object":{"subscription":"sub_2"}}}`),
		[]byte(`{"id":"evt_1","object":"event","type":"x","created":1,"data":{"object":{"subscription":null,"parent":{"subscription_details":{"subscription":"sub_3"}}}}}`),
		[]byte(`{"id":"evt_1","object":"event","type":"x","created":1,"data":{"object":{"subscription":7,"parent":{"subscription_details":{"subscription":"sub_4"}}}}}`),
		[]byte(`{"id":"evt_1","object":"event","type":"x","created":1,"data":{"object":{"object":"subscription","id":"sub_5","subscription":"sub_6"}}}`),
		[]byte(`{"id":"evt_1","object":"event","type":"x","created":1,"data":{"object":{"object":"subscription","id":"sub_a/b"}}}`),
		[]byte(`{"id":"evt_1","object":"event","type":"x","created":1,"data":{"object":{"subscription":{"no":"id"}}}}`),
		[]byte(`{"id":"evt_1","object":"event","type":"x","created":1,"data":{"object":null}}`),
		[]byte(`{"id":"evt_1","object":"event","type":"x","created":1,"data":{"object":[]}}`),
		[]byte(`{"id":"evt_1","object":"event","type":"x","created":1,"data":{"object": {} }}`),
		[]byte(`{"id":"evt_1","object":"event","type":"x","created":1,"data":{}}`),
		[]byte(`{"id":"evt_1","object":"event","type":"x","created":1,"data":{"object":{},"previous_attributes":{"email":"a@b"}}}`),
		[]byte(`{"id":"evt_1","object":"event","type":"x","created":1,"request":{"id":"req_1","idempotency_key":"k"},"data":{"object":{}}}`),
		[]byte(`{"id":"evt_1","object":"event","type":"x","created":-5,"data":{"object":{}}}`),
		[]byte(`{"id":"evt_1","object":"charge","type":"x","created":1,"data":{"object":{}}}`),
		[]byte(`{"id":"evt_1","object":"event","type":"x","account":"acct_1","created":1,"livemode":true,"pending_webhooks":2,"api_version":"2023-10-16","data":{"object":{"id":"cus_1"}}}`),
		[]byte(`[]`),
		// a subscription id written with escapes: no "sub_" in the bytes
		[]byte(`{"id":"evt_1","object":"event","type":"x","created":1,"data":{"object":{"subscription":"\u0073ub_1MowQVLkdIwHu7ixeRlqHVzs"}}}`),
		[]byte(`{"id":"evt_1","object":"event","type":"x","created":1,"data":{"object":{"\u0073ubscription":"sub_1MowQVLkdIwHu7ixeRlqHVzs"}}}`),
		[]byte(`{"id":"evt_1","object":"event","type":"x","created":1,"data":{"object":{"subscription":"su\u0062_1MowQVLkdIwHu7ixeRlqHVzs","parent":{}}}}`),
	}
	for _, name := range stripetest.FixtureNames() {
		out = append(out, stripetest.Fixture(t, name))
	}
	return out
}

// FuzzParseAgreesWithStripeGo: whatever body Parse gets, it accepts exactly
// what stripe-go's decoder (with the documented checks) accepts, with the
// same fields, the object's raw JSON, and the same subscription.
func FuzzParseAgreesWithStripeGo(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		want, wantSub, ok := stripeGoParse(payload)
		got, err := stripeevent.Parse(payload)
		if !ok {
			// Parse may refuse more (its type pattern), never accept less
			// than the oracle refuses.
			require.Error(t, err, "stripe-go refuses %q", payload)
			return
		}
		if err != nil {
			require.NotRegexp(t, `^[A-Za-z0-9_.]{1,255}$`, string(want.Type), "refused a valid event: %v", err)
			return
		}
		assert.Equal(t, want.ID, got.ID)
		assert.Equal(t, want.Type, got.Type)
		assert.Equal(t, want.Account, got.Account)
		assert.Equal(t, want.APIVersion, got.APIVersion)
		assert.Equal(t, want.Created, got.Created)
		assert.Equal(t, want.Livemode, got.Livemode)
		assert.Equal(t, want.PendingWebhooks, got.PendingWebhooks)
		assert.Equal(t, want.Request, got.Request)
		assert.Equal(t, want.Data.PreviousAttributes, got.Data.PreviousAttributes)
		assert.Equal(t, wantSub, stripeevent.SubscriptionID(got), "subscription of %s", payload)
		obj, err := stripeevent.Object(got)
		require.NoError(t, err)
		assert.Equal(t, want.Data.Object, obj)
		var raw map[string]any
		require.NoError(t, json.Unmarshal(got.Data.Raw, &raw))
		assert.Equal(t, want.Data.Object, raw)
	})
}

func TestObjectIsDecodedOnceAndShared(t *testing.T) {
	ev, err := stripeevent.Parse([]byte(`{"id":"evt_1","object":"event","type":"x","created":1,"data":{"object":{"id":"pi_1"}}}`))
	require.NoError(t, err)
	assert.Nil(t, ev.Data.Object, "Parse leaves the map to Object")
	obj, err := stripeevent.Object(ev)
	require.NoError(t, err)
	obj["prepared"] = true
	again, err := stripeevent.Object(ev)
	require.NoError(t, err)
	assert.Equal(t, true, again["prepared"], "a preparer's change is seen by the appliers")
}

// BenchmarkSubscriptionID: the subscription of a customer event
// (none) and of a subscription's event, as every record of an ingest asks.
//
//	go test ./internal/stripeevent -run '^$' -bench SubscriptionID
func BenchmarkSubscriptionID(b *testing.B) {
	for _, fixture := range []string{"customer.created", "payment_intent.succeeded", "customer.subscription.updated"} {
		ev, err := stripeevent.Parse(stripetest.Fixture(b, fixture))
		require.NoError(b, err)
		b.Run(fixture, func(b *testing.B) {
			for range b.N {
				stripeevent.SubscriptionID(ev)
			}
		})
	}
}
