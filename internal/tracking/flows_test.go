package tracking_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/tracking"
)

type eventFn func(x ids) stripetest.Event

func piEv(fixture string, meta bool, invoice func(x ids) any) eventFn {
	return func(x ids) stripetest.Event {
		obj := map[string]any{"id": x.pi, "metadata": map[string]any{}}
		if meta {
			obj["metadata"] = x.metadata()
		}
		if invoice != nil {
			obj["invoice"] = invoice(x)
		}
		return stripetest.Event{Fixture: fixture, Object: obj}
	}
}

func subEv(fixture, status string, meta bool) eventFn {
	return func(x ids) stripetest.Event {
		obj := map[string]any{"id": x.sub, "status": status, "metadata": map[string]any{}}
		if meta {
			obj["metadata"] = x.metadata()
		}
		return stripetest.Event{Fixture: fixture, Object: obj}
	}
}

func schedEv() eventFn {
	return func(x ids) stripetest.Event {
		return stripetest.Event{Fixture: "subscription_schedule.canceled", Object: map[string]any{"subscription": x.sub}}
	}
}

func invEv(fixture string, recurring, meta bool) eventFn {
	return func(x ids) stripetest.Event {
		obj := map[string]any{"id": x.inv, "payment_intent": x.pi, "subscription": nil, "metadata": map[string]any{}}
		if recurring {
			obj["subscription"] = x.sub
		}
		if meta {
			obj["metadata"] = x.metadata()
		}
		return stripetest.Event{Fixture: fixture, Object: obj}
	}
}

// invoiceObject is the invoice the fake Stripe answers for GET /v1/invoices/{id}.
func invoiceObject(x ids, recurring bool) map[string]any {
	inv := map[string]any{"id": x.inv, "object": "invoice", "status": "paid", "paid": true, "payment_intent": x.pi,
		"customer": "cus_PfYl2mB3cD4eF5", "subscription": nil, "metadata": x.metadata(), "livemode": false}
	if recurring {
		inv["subscription"] = x.sub
		inv["metadata"] = map[string]any{}
	}
	return inv
}

var (
	bareInvoice     = func(x ids) any { return x.inv }
	expandedRecurrs = func(x ids) any { return invoiceObject(x, true) }

	piSucceeded = piEv("payment_intent.succeeded", true, nil)
	piFailed    = piEv("payment_intent.payment_failed", true, nil)
	piNoMeta    = piEv("payment_intent.succeeded", false, nil)

	subActive   = subEv("customer.subscription.created", "active", true)
	subUpdActv  = subEv("customer.subscription.updated", "active", true)
	subCanceled = subEv("customer.subscription.updated", "canceled", true)
	subDeleted  = subEv("customer.subscription.deleted", "canceled", true)
	subExpired  = subEv("customer.subscription.updated", "incomplete_expired", true)
	subUnpaid   = subEv("customer.subscription.updated", "unpaid", true)
	subPastDue  = subEv("customer.subscription.updated", "past_due", true)
	subIncompl  = subEv("customer.subscription.created", "incomplete", true)
)

type step struct {
	event eventFn
	at    int  // seconds after the case's base time
	again int  // > 0: redeliver the event of step again-1 (same event id)
	fails bool // the delivery must fail (and be retried later)
	want  stripeevent.Outcome
}

// TestFlows drives every arrow of the diagrams and every "already processed"
// note through the real handler, against real Postgres and DynamoDB.
func TestFlows(t *testing.T) {
	tests := []struct {
		name  string
		kind  tracking.Kind
		bare  bool // the purchase API has not stored its payment/subscription yet
		setup func(e *flowEnv, x ids)
		steps []step
		want  state
	}{
		// Legacy purchase.
		{name: "legacy: succeeded -> payment paid, purchase fulfilled", kind: tracking.KindLegacy,
			steps: []step{{event: piSucceeded}},
			want:  state{fulfilled: true, payment: "paid", fulfils: 1}},
		{name: "legacy: payment_failed -> payment failed", kind: tracking.KindLegacy,
			steps: []step{{event: piFailed}},
			want:  state{payment: "failed"}},
		{name: "legacy: succeeded redelivered -> event already handled", kind: tracking.KindLegacy,
			steps: []step{{event: piSucceeded}, {again: 1, want: stripeevent.Duplicate}},
			want:  state{fulfilled: true, payment: "paid", fulfils: 1}},
		{name: "legacy: succeeded, then invoice-less second success event -> already paid and fulfilled", kind: tracking.KindLegacy,
			steps: []step{{event: piSucceeded}, {event: piSucceeded, at: 1}},
			want:  state{fulfilled: true, payment: "paid", fulfils: 1}},
		{name: "legacy: the payment row alone finds the purchase", kind: tracking.KindLegacy,
			steps: []step{{event: piNoMeta}},
			want:  state{fulfilled: true, payment: "paid", fulfils: 1}},
		{name: "legacy: failure after success -> stays paid", kind: tracking.KindLegacy,
			steps: []step{{event: piSucceeded}, {event: piFailed, at: 5}},
			want:  state{fulfilled: true, payment: "paid", fulfils: 1}},
		{name: "legacy: older failure delivered after success -> stale, stays paid", kind: tracking.KindLegacy,
			steps: []step{{event: piSucceeded, at: 5}, {event: piFailed}},
			want:  state{fulfilled: true, payment: "paid", fulfils: 1}},
		{name: "legacy: success after a failed attempt (buyer retried with another card) -> paid, fulfilled", kind: tracking.KindLegacy,
			steps: []step{{event: piFailed}, {event: piSucceeded, at: 5}},
			want:  state{fulfilled: true, payment: "paid", fulfils: 1}},
		{name: "legacy: failed, succeeded, then failure redelivered late -> stays paid", kind: tracking.KindLegacy,
			steps: []step{{event: piFailed}, {event: piSucceeded, at: 5}, {again: 1, want: stripeevent.Duplicate}},
			want:  state{fulfilled: true, payment: "paid", fulfils: 1}},
		{name: "legacy: event overtakes the API's payment write -> payment created from metadata", kind: tracking.KindLegacy, bare: true,
			steps: []step{{event: piSucceeded}},
			want:  state{fulfilled: true, payment: "paid", fulfils: 1}},
		{name: "untracked payment intent -> recorded, no effect", kind: tracking.KindLegacy, bare: true,
			steps: []step{{event: piNoMeta}},
			want:  state{}},

		// One-off product purchase.
		{name: "one-off: succeeded, invoice looked up in Stripe: non-recurring -> fulfilled", kind: tracking.KindOneOff,
			setup: func(e *flowEnv, x ids) { e.stripe.Put(acct, invoiceObject(x, false)) },
			steps: []step{{event: piEv("payment_intent.succeeded", false, bareInvoice)}},
			want:  state{fulfilled: true, payment: "paid", fulfils: 1}},
		{name: "one-off: invoice lookup finds the purchase before the API stored the payment", kind: tracking.KindOneOff, bare: true,
			setup: func(e *flowEnv, x ids) { e.stripe.Put(acct, invoiceObject(x, false)) },
			steps: []step{{event: piEv("payment_intent.succeeded", false, bareInvoice)}},
			want:  state{fulfilled: true, payment: "paid", fulfils: 1}},
		{name: "one-off: Stripe lookup fails -> event fails, retried -> fulfilled once", kind: tracking.KindOneOff,
			setup: func(e *flowEnv, x ids) {
				e.stripe.Put(acct, invoiceObject(x, false))
				e.stripe.Fail(http.MethodGet, "/v1/invoices/"+x.inv, 500, "api_error", "", "boom", 2)
			},
			steps: []step{{event: piEv("payment_intent.succeeded", false, bareInvoice), fails: true}, {again: 1}},
			want:  state{fulfilled: true, payment: "paid", fulfils: 1}},
		{name: "one-off: payment of a subscription invoice (from Stripe) -> recurring, no effect", kind: tracking.KindRecurring,
			setup: func(e *flowEnv, x ids) { e.stripe.Put(acct, invoiceObject(x, true)) },
			steps: []step{{event: piEv("payment_intent.succeeded", false, bareInvoice)}},
			want:  state{subscription: "new"}},
		{name: "one-off: payment of a subscription invoice (expanded in payload) -> recurring, no effect", kind: tracking.KindRecurring,
			steps: []step{{event: piEv("payment_intent.succeeded", false, expandedRecurrs)}},
			want:  state{subscription: "new"}},
		{name: "one-off: invoice.paid -> fulfilled; then payment_intent.succeeded -> already", kind: tracking.KindOneOff,
			setup: func(e *flowEnv, x ids) { e.stripe.Put(acct, invoiceObject(x, false)) },
			steps: []step{{event: invEv("invoice.paid", false, true)}, {event: piEv("payment_intent.succeeded", false, bareInvoice)}},
			want:  state{fulfilled: true, payment: "paid", fulfils: 1}},
		{name: "one-off: invoice.payment_failed -> payment failed", kind: tracking.KindOneOff,
			steps: []step{{event: invEv("invoice.payment_failed", false, true)}},
			want:  state{payment: "failed"}},
		{name: "recurring: invoice.paid of the subscription -> no payment effect", kind: tracking.KindRecurring,
			steps: []step{{event: invEv("invoice.paid", true, false)}},
			want:  state{subscription: "new"}},

		// Subscription activated.
		{name: "subscription: created (active) on new -> active, fulfilled", kind: tracking.KindRecurring,
			steps: []step{{event: subActive}},
			want:  state{fulfilled: true, subscription: "active", fulfils: 1}},
		{name: "subscription: updated (active) on new -> active, fulfilled", kind: tracking.KindRecurring,
			steps: []step{{event: subIncompl}, {event: subUpdActv, at: 1}},
			want:  state{fulfilled: true, subscription: "active", fulfils: 1}},
		{name: "subscription: already received an activation event", kind: tracking.KindRecurring,
			steps: []step{{event: subActive}, {again: 1, want: stripeevent.Duplicate}, {event: subUpdActv, at: 1}},
			want:  state{fulfilled: true, subscription: "active", fulfils: 1}},
		{name: "subscription: already received a termination event -> activation does nothing", kind: tracking.KindRecurring,
			steps: []step{{event: subActive}, {event: subDeleted, at: 10}, {event: subUpdActv, at: 20}},
			want:  state{fulfilled: true, subscription: "terminated", fulfils: 1, unsubscribes: 1}},
		{name: "subscription: activation event before the API stored the subscription", kind: tracking.KindRecurring, bare: true,
			steps: []step{{event: subActive}},
			want:  state{fulfilled: true, subscription: "active", fulfils: 1}},

		// Subscription terminated.
		{name: "subscription: updated (canceled) on active -> terminated, unsubscribe", kind: tracking.KindRecurring,
			steps: []step{{event: subActive}, {event: subCanceled, at: 10}},
			want:  state{fulfilled: true, subscription: "terminated", fulfils: 1, unsubscribes: 1}},
		{name: "subscription: deleted on active -> terminated, unsubscribe", kind: tracking.KindRecurring,
			steps: []step{{event: subActive}, {event: subDeleted, at: 10}},
			want:  state{fulfilled: true, subscription: "terminated", fulfils: 1, unsubscribes: 1}},
		{name: "subscription: schedule canceled on active -> terminated, unsubscribe", kind: tracking.KindRecurring,
			steps: []step{{event: subActive}, {event: schedEv(), at: 10}},
			want:  state{fulfilled: true, subscription: "terminated", fulfils: 1, unsubscribes: 1}},
		{name: "subscription: unpaid on active -> terminated, unsubscribe", kind: tracking.KindRecurring,
			steps: []step{{event: subActive}, {event: subUnpaid, at: 10}},
			want:  state{fulfilled: true, subscription: "terminated", fulfils: 1, unsubscribes: 1}},
		{name: "subscription: past_due on active -> no transition", kind: tracking.KindRecurring,
			steps: []step{{event: subActive}, {event: subPastDue, at: 10}},
			want:  state{fulfilled: true, subscription: "active", fulfils: 1}},
		{name: "subscription: first payment failed (incomplete_expired) on new -> terminated, no action", kind: tracking.KindRecurring,
			steps: []step{{event: subIncompl}, {event: subExpired, at: 10}},
			want:  state{subscription: "terminated"}},
		{name: "subscription: already terminated -> nothing more", kind: tracking.KindRecurring,
			steps: []step{{event: subActive}, {event: subCanceled, at: 10}, {event: subDeleted, at: 11}, {event: schedEv(), at: 12}},
			want:  state{fulfilled: true, subscription: "terminated", fulfils: 1, unsubscribes: 1}},
		{name: "subscription: termination of an untracked subscription -> no effect", kind: tracking.KindRecurring, bare: true,
			steps: []step{{event: schedEv()}, {event: subEv("customer.subscription.deleted", "canceled", false)}},
			want:  state{}},

		// Order.
		{name: "order: termination delivered before an older activation -> terminated, never fulfilled", kind: tracking.KindRecurring,
			steps: []step{{event: subDeleted, at: 10}, {event: subActive}},
			want:  state{subscription: "terminated"}},
		{name: "order: same-second activation then termination -> forward to terminated", kind: tracking.KindRecurring,
			steps: []step{{event: subActive}, {event: subDeleted}},
			want:  state{fulfilled: true, subscription: "terminated", fulfils: 1, unsubscribes: 1}},
		{name: "order: an older unpaid never undoes a newer active", kind: tracking.KindRecurring,
			steps: []step{{event: subActive}, {event: subUpdActv, at: 20}, {event: subUnpaid, at: 10}},
			want:  state{fulfilled: true, subscription: "active", fulfils: 1}},
		{name: "order: an older incomplete never undoes a newer active", kind: tracking.KindRecurring,
			steps: []step{{event: subUpdActv, at: 10}, {event: subIncompl}},
			want:  state{fulfilled: true, subscription: "active", fulfils: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newFlowEnv(t)
			x := e.purchase(t, tc.kind, tc.bare)
			if tc.setup != nil {
				tc.setup(e, x)
			}
			base := time.Now().Add(-time.Hour).Truncate(time.Second)
			built := make([]stripetest.Event, len(tc.steps))
			for i, s := range tc.steps {
				if s.again > 0 {
					built[i] = built[s.again-1]
				} else {
					built[i] = s.event(x)
					built[i].ID = stripetest.NewID()
					built[i].Created = base.Add(time.Duration(s.at) * time.Second)
				}
				outcome, err := e.deliver(t, built[i])
				if s.fails {
					require.Error(t, err, "step %d", i)
					assert.Equal(t, stripeevent.Failed, outcome)
					continue
				}
				require.NoError(t, err, "step %d", i)
				want := s.want
				if want == "" {
					want = stripeevent.Applied
				}
				assert.Equal(t, want, outcome, "step %d", i)
			}
			assert.Equal(t, tc.want, e.state(t, x))
		})
	}
}

// TestOneOffLookupUsesTheConnectedAccount checks the Stripe call of the
// "look up invoice" step: GET on the event's connected account, no
// idempotency key needed for a read, no call again for a redelivery, and no
// call when the payload has no invoice.
func TestOneOffLookupUsesTheConnectedAccount(t *testing.T) {
	e := newFlowEnv(t)
	x := e.purchase(t, tracking.KindOneOff, false)
	e.stripe.Put(acct, invoiceObject(x, false))
	ev := piEv("payment_intent.succeeded", false, bareInvoice)(x)
	ev.ID = stripetest.NewID()
	_, err := e.deliver(t, ev)
	require.NoError(t, err)
	outcome, err := e.deliver(t, ev)
	require.NoError(t, err)
	assert.Equal(t, stripeevent.Duplicate, outcome)
	reqs := e.stripe.Requests()
	require.Len(t, reqs, 1, "a redelivery of an applied event asks Stripe nothing")
	assert.Equal(t, http.MethodGet, reqs[0].Method)
	assert.Equal(t, "/v1/invoices/"+x.inv, reqs[0].Path)
	assert.Equal(t, acct, reqs[0].StripeAccount)

	y := e.purchase(t, tracking.KindLegacy, false)
	_, err = e.deliver(t, piSucceeded(y))
	require.NoError(t, err)
	assert.Len(t, e.stripe.Requests(), 1, "a payment without an invoice needs no lookup")
}

// TestConcurrentDeliveries: 20 deliveries at once of the same event, and of
// different events about the same payment or subscription, apply one effect
// each and leave the newest state.
func TestConcurrentDeliveries(t *testing.T) {
	const n = 20
	run := func(t *testing.T, e *flowEnv, evs []stripetest.Event) {
		t.Helper()
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, len(evs))
		for i := range evs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = e.deliver(t, evs[i])
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "delivery %d", i)
		}
	}
	t.Run("same payment event 20 times", func(t *testing.T) {
		e := newFlowEnv(t)
		x := e.purchase(t, tracking.KindLegacy, false)
		ev := piSucceeded(x)
		ev.ID = stripetest.NewID()
		evs := make([]stripetest.Event, n)
		for i := range evs {
			evs[i] = ev
		}
		run(t, e, evs)
		assert.Equal(t, state{fulfilled: true, payment: "paid", fulfils: 1}, e.state(t, x))
	})
	t.Run("20 different success and failure events for one payment", func(t *testing.T) {
		e := newFlowEnv(t)
		x := e.purchase(t, tracking.KindOneOff, false)
		e.stripe.Put(acct, invoiceObject(x, false))
		base := time.Now().Add(-time.Hour).Truncate(time.Second)
		var evs []stripetest.Event
		for i := range n {
			var ev stripetest.Event
			switch i % 4 {
			case 0:
				ev = piEv("payment_intent.succeeded", false, bareInvoice)(x)
			case 1:
				ev = invEv("invoice.paid", false, true)(x)
			case 2:
				ev = piEv("payment_intent.succeeded", true, nil)(x)
			default:
				ev = piFailed(x)
				ev.Created = base // older than every success
			}
			if ev.Created.IsZero() {
				ev.Created = base.Add(time.Duration(10+i) * time.Second)
			}
			ev.ID = stripetest.NewID()
			evs = append(evs, ev)
		}
		run(t, e, evs)
		s := e.state(t, x)
		assert.True(t, s.fulfilled)
		assert.Equal(t, 1, s.fulfils, "one fulfilment")
		// The failure is older than every success: whichever order they
		// ran in, a success that ran after it could not move failed ->
		// paid, so the payment is paid unless the failure ran first.
		assert.Contains(t, []tracking.PaymentStatus{"paid", "failed"}, s.payment)
	})
	t.Run("20 activation and termination events for one subscription", func(t *testing.T) {
		e := newFlowEnv(t)
		x := e.purchase(t, tracking.KindRecurring, false)
		base := time.Now().Add(-time.Hour).Truncate(time.Second)
		var evs []stripetest.Event
		for i := range n {
			var ev stripetest.Event
			switch i % 4 {
			case 0:
				ev = subActive(x)
			case 1:
				ev = subUpdActv(x)
			case 2:
				ev = subDeleted(x)
			default:
				ev = schedEv()(x)
			}
			ev.ID = stripetest.NewID()
			ev.Created = base.Add(time.Duration(i) * time.Second)
			evs = append(evs, ev)
		}
		run(t, e, evs)
		s := e.state(t, x)
		assert.Equal(t, tracking.SubscriptionStatus("terminated"), s.subscription, "the newest events terminate it")
		assert.LessOrEqual(t, s.fulfils, 1)
		assert.Equal(t, s.fulfils, s.unsubscribes, "an unsubscribe exactly when it was fulfilled")
		assert.Equal(t, s.fulfilled, s.fulfils == 1)
	})
	t.Run("same subscription event 20 times, then its termination 20 times", func(t *testing.T) {
		e := newFlowEnv(t)
		x := e.purchase(t, tracking.KindRecurring, false)
		for _, mk := range []eventFn{subActive, subDeleted} {
			ev := mk(x)
			ev.ID = stripetest.NewID()
			evs := make([]stripetest.Event, n)
			for i := range evs {
				evs[i] = ev
			}
			run(t, e, evs)
		}
		assert.Equal(t, state{fulfilled: true, subscription: "terminated", fulfils: 1, unsubscribes: 1}, e.state(t, x))
	})
}

// TestActionPayload checks the action JSON of docs/design.md §6.
func TestActionPayload(t *testing.T) {
	e := newFlowEnv(t)
	x := e.purchase(t, tracking.KindRecurring, false)
	for _, ev := range []eventFn{subActive, subDeleted} {
		b := ev(x)
		b.Created = time.Now().Add(time.Duration(len(e.actions(t))) * time.Second)
		_, err := e.deliver(t, b)
		require.NoError(t, err)
	}
	acts := e.actions(t)
	require.Len(t, acts, 2)
	for i, typ := range []string{"purchase.fulfilled", "subscription.terminated"} {
		a := acts[i]
		assert.Equal(t, typ, a.Type)
		assert.Equal(t, x.account.String(), a.Account)
		assert.Equal(t, acct, a.StripeAccount)
		assert.Equal(t, x.purchase.String(), *a.PurchaseID)
		assert.Equal(t, x.sub, *a.SubscriptionID)
		_, err := time.Parse(time.RFC3339, a.Created)
		assert.NoError(t, err, fmt.Sprint(a.Created))
	}
}

// TestUnusablePayloadsAreRejected: payloads that decode as events but whose
// object the flows cannot use (found by FuzzFlows) are answered and recorded
// as rejected with no effect, instead of failing on every delivery forever;
// an invoice reference given as {"id": ...} without "object" is looked up
// like a bare id, never mistaken for an expanded non-recurring invoice.
func TestUnusablePayloadsAreRejected(t *testing.T) {
	e := newFlowEnv(t)
	x := e.purchase(t, tracking.KindLegacy, false)
	y := e.purchase(t, tracking.KindRecurring, false)
	for name, ev := range map[string]stripetest.Event{
		"metadata of the wrong type": {Fixture: "payment_intent.succeeded", Object: map[string]any{"id": x.pi, "metadata": map[string]any{"purchase_id": 5}}},
		"payment intent id that is not one": {Fixture: "payment_intent.succeeded",
			Object: map[string]any{"id": "not_a_pi", "metadata": x.metadata()}},
		"invoice id with a path in it": {Fixture: "payment_intent.succeeded",
			Object: map[string]any{"id": x.pi, "invoice": "in_1/../../customers/cus_1", "metadata": x.metadata()}},
		"subscription id that is not one": {Fixture: "customer.subscription.deleted",
			Object: map[string]any{"id": "sub", "status": "canceled", "metadata": y.metadata()}},
		"invoice naming a bad payment intent": {Fixture: "invoice.paid",
			Object: map[string]any{"id": x.inv, "payment_intent": "pi_\u0000", "subscription": nil, "metadata": x.metadata()}},
	} {
		t.Run(name, func(t *testing.T) {
			outcome, err := e.deliver(t, ev)
			require.NoError(t, err)
			assert.Equal(t, stripeevent.Rejected, outcome)
		})
	}
	assert.Equal(t, state{payment: tracking.PaymentNew}, e.state(t, x), "nothing changed")
	assert.Equal(t, state{subscription: tracking.SubscriptionNew}, e.state(t, y))
	assert.Empty(t, e.stripe.Requests(), "no Stripe call with an id that is not one")

	z := e.purchase(t, tracking.KindOneOff, false)
	e.stripe.Put(acct, invoiceObject(z, false))
	outcome, err := e.deliver(t, piEv("payment_intent.succeeded", false, func(z ids) any { return map[string]any{"id": z.inv} })(z))
	require.NoError(t, err)
	assert.Equal(t, stripeevent.Applied, outcome)
	assert.Equal(t, state{fulfilled: true, payment: tracking.PaymentPaid, fulfils: 1}, e.state(t, z))
	require.Len(t, e.stripe.Requests(), 1)
	assert.Equal(t, "/v1/invoices/"+z.inv, e.stripe.Requests()[0].Path)
}
