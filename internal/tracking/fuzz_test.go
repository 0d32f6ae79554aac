package tracking_test

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/handler"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
	"github.com/stripe-payments/stripe-payments/internal/tracking"
)

// Tracked objects of the fuzz database. The fixtures' metadata name the
// legacy and recurring purchases, so mutated fixtures reach every branch of
// the flows (found purchase, tracked payment or subscription, transitions).
var (
	fuzzAccount   = uuid.MustParse("0d9c8b7a-6f5e-4d3c-2b1a-0f9e8d7c6b5a")
	fuzzLegacy    = uuid.MustParse("5b8f3c2e-6a1d-4c6e-9f0a-1b2c3d4e5f60")
	fuzzRecurring = uuid.MustParse("7c1e2d3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f")
	fuzzOneOff    = uuid.MustParse("9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d")
)

const (
	fuzzLegacyPI  = "pi_3OqDcJ2eZvKYlo2C0ZxY1aBc"
	fuzzSub       = "sub_1OqDdJ2eZvKYlo2CxYzAbCdE"
	fuzzOneOffPI  = "pi_fuzzOneOff1"
	fuzzOneOffInv = "in_fuzzOneOff1"
)

// FuzzFlows drives the real preparers and appliers of every handled event
// type (the handler's dispatch) with arbitrary payloads, against a real
// Postgres database holding purchases the payloads can name. Each run's
// transaction is rolled back, so every input meets the same state.
//
// The property: no panic, and no error that would make a correctly signed
// event fail forever. The handler answers 503 to any error so that Stripe
// retries; an error that the payload alone determines (it does not decode,
// it names ids Stripe never issues, the database refuses what it carries)
// would be retried for three days and hold the poller's checkpoint for good.
// Such payloads must be reported as stripeevent.ErrUnprocessable, which the
// handler records as processed with no effect. The invoice lookup here
// never fails, and the database is up: any other error is a bug.
func FuzzFlows(f *testing.F) {
	pool := testenv.Postgres(f)
	ctx := context.Background()
	store := tracking.NewStore(pool)
	for _, p := range []struct {
		id   uuid.UUID
		kind tracking.Kind
	}{{fuzzLegacy, tracking.KindLegacy}, {fuzzRecurring, tracking.KindRecurring}, {fuzzOneOff, tracking.KindOneOff}} {
		if _, _, err := store.CreatePurchase(ctx, tracking.NewPurchase{ID: p.id, Account: fuzzAccount, StripeAccount: acct, Kind: p.kind}); err != nil {
			f.Fatal(err)
		}
	}
	for _, err := range []error{
		store.RecordPayment(ctx, fuzzLegacy, fuzzLegacyPI, ""),
		store.RecordSubscription(ctx, fuzzRecurring, fuzzSub),
		store.RecordPayment(ctx, fuzzOneOff, fuzzOneOffPI, fuzzOneOffInv),
	} {
		if err != nil {
			f.Fatal(err)
		}
	}

	// The invoice lookup answers like Stripe: the invoice asked for, part of
	// a subscription when its id says so, with the one-off purchase's
	// metadata.
	invoices := func(_ context.Context, _, id string) (json.RawMessage, error) {
		inv := map[string]any{"id": id, "object": "invoice", "subscription": nil, "paid": true,
			"metadata": map[string]string{"purchase_id": fuzzOneOff.String(), "account": fuzzAccount.String()}}
		if strings.Contains(id, "sub") {
			inv["subscription"] = fuzzSub
		}
		return json.Marshal(inv)
	}
	flows := tracking.NewFlows(tracking.FlowsConfig{Log: quiet, Invoices: invoices})
	// The routes the flows take in the handler's table (no billing feed).
	routes := map[string]handler.Route{}
	types := []string{}
	for _, r := range handler.NewRoutes(flows, nil) {
		routes[r.Type] = r
		types = append(types, r.Type)
	}
	sort.Strings(types)
	index := map[string]uint8{}
	for i, typ := range types {
		index[typ] = uint8(i)
	}

	for _, name := range stripetest.FixtureNames() {
		f.Add(index[name], stripetest.Fixture(f, name))
	}
	md := `"metadata":{"purchase_id":"` + fuzzOneOff.String() + `","account":"` + fuzzAccount.String() + `"}`
	envelope := func(typ, object string) []byte {
		return []byte(`{"id":"evt_fuzz1","object":"event","account":"` + acct + `","api_version":"2023-10-16","created":1709856000,` +
			`"livemode":false,"type":"` + typ + `","data":{"object":` + object + `}}`)
	}
	for _, s := range []struct{ typ, object string }{
		{"payment_intent.succeeded", `{"id":"` + fuzzOneOffPI + `","object":"payment_intent","invoice":"` + fuzzOneOffInv + `",` + md + `}`},
		{"payment_intent.succeeded", `{"id":"` + fuzzOneOffPI + `","object":"payment_intent","invoice":{"id":"` + fuzzOneOffInv + `"},` + md + `}`},
		{"payment_intent.succeeded", `{"id":"pi_new1","object":"payment_intent","invoice":"in_sub1",` + md + `}`},
		{"payment_intent.succeeded", `{"id":"not_a_pi","object":"payment_intent",` + md + `}`},
		{"payment_intent.payment_failed", `{"id":"pi_x","object":"payment_intent","metadata":{"purchase_id":5}}`},
		{"invoice.paid", `{"id":"` + fuzzOneOffInv + `","object":"invoice","payment_intent":"` + fuzzOneOffPI + `",` + md + `}`},
		{"invoice.payment_failed", `{"id":"in_2","object":"invoice","payment_intent":"pi_\u0000",` + md + `}`},
		{"customer.subscription.updated", `{"id":"sub_other","object":"subscription","status":"active","metadata":{"purchase_id":"` + fuzzRecurring.String() + `"}}`},
		{"customer.subscription.deleted", `{"id":"sub","object":"subscription","status":"canceled","metadata":{"purchase_id":"` + fuzzRecurring.String() + `"}}`},
		{"subscription_schedule.canceled", `{"id":"sub_sched_1","object":"subscription_schedule","subscription":"` + fuzzSub + `"}`},
	} {
		f.Add(index[s.typ], envelope(s.typ, s.object))
	}

	f.Fuzz(func(t *testing.T, kind uint8, payload []byte) {
		ev, err := stripeevent.Parse(payload)
		if err != nil {
			return // refused by the webhook with a 400: nothing recorded
		}
		typ := types[int(kind)%len(types)]
		ev.Type = stripe.EventType(typ)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		check := func(stage string, err error) {
			if err != nil && !errors.Is(err, stripeevent.ErrUnprocessable) {
				t.Fatalf("%s %s fails with an error that retrying cannot fix, so it would be retried forever: %v", typ, stage, err)
			}
		}
		if prepare := routes[typ].Prepare; prepare != nil {
			err := prepare(ctx, ev)
			check("preparer", err)
			if err != nil {
				return
			}
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatalf("begin: %v", err)
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		for _, apply := range routes[typ].Apply {
			if err := apply(ctx, tx, ev); err != nil {
				check("applier", err)
				return
			}
		}
	})
}
