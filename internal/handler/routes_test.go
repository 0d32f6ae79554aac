package handler_test

import (
	"context"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/feedqueue"
	"github.com/stripe-payments/stripe-payments/internal/handler"
	"github.com/stripe-payments/stripe-payments/internal/tracking"
)

// probeTracking records which tracking step each event type reaches.
type probeTracking struct{ reached map[string][]string }

func (p *probeTracking) note(step string, ev *stripe.Event) error {
	p.reached[step] = append(p.reached[step], string(ev.Type))
	return nil
}

func (p *probeTracking) ExpandInvoice(_ context.Context, ev *stripe.Event) error {
	return p.note("ExpandInvoice", ev)
}
func (p *probeTracking) PaymentIntentSucceeded(_ context.Context, _ handler.Tx, ev *stripe.Event) error {
	return p.note("PaymentIntentSucceeded", ev)
}
func (p *probeTracking) PaymentIntentFailed(_ context.Context, _ handler.Tx, ev *stripe.Event) error {
	return p.note("PaymentIntentFailed", ev)
}
func (p *probeTracking) InvoicePaid(_ context.Context, _ handler.Tx, ev *stripe.Event) error {
	return p.note("InvoicePaid", ev)
}
func (p *probeTracking) InvoicePaymentFailed(_ context.Context, _ handler.Tx, ev *stripe.Event) error {
	return p.note("InvoicePaymentFailed", ev)
}
func (p *probeTracking) SubscriptionChanged(_ context.Context, _ handler.Tx, ev *stripe.Event) error {
	return p.note("SubscriptionChanged", ev)
}
func (p *probeTracking) ScheduleCanceled(_ context.Context, _ handler.Tx, ev *stripe.Event) error {
	return p.note("ScheduleCanceled", ev)
}

func routeTypes(r handler.Routes) []string {
	out := make([]string, len(r))
	for i, route := range r {
		out[i] = route.Type
	}
	return out
}

// TestRouteTableAgreesWithItsComponents fails when the route table and the
// steps the components register disagree: the billing feed must get exactly
// the event types billing reads (billing.FeedEventTypes, what its feed
// decodes), every tracking step must be reached by some event type, the
// table must be one the handler runs (Routes.Check), and the handler must run
// exactly the table it is given.
func TestRouteTableAgreesWithItsComponents(t *testing.T) {
	ctx := context.Background()
	table := handler.NewRoutes(tracking.NewFlows(tracking.FlowsConfig{}), feedqueue.Enqueue)
	require.NoError(t, table.Check())

	probe := &probeTracking{reached: map[string][]string{}}
	var fed []string
	feed := func(_ context.Context, _ handler.Tx, ev *stripe.Event) error {
		fed = append(fed, string(ev.Type))
		return nil
	}
	probed := handler.NewRoutes(probe, feed)
	require.Equal(t, routeTypes(table), routeTypes(probed), "the probed table is the real one")
	for _, route := range probed {
		ev := &stripe.Event{Type: stripe.EventType(route.Type)}
		if route.Prepare != nil {
			require.NoError(t, route.Prepare(ctx, ev))
		}
		for _, apply := range route.Apply {
			require.NoError(t, apply(ctx, nil, ev))
		}
	}

	sort.Strings(fed)
	want := append([]string(nil), billing.FeedEventTypes...)
	sort.Strings(want)
	assert.Equal(t, want, fed, "the billing feed is routed exactly the types billing reads, once each")

	for _, step := range []string{"ExpandInvoice", "PaymentIntentSucceeded", "PaymentIntentFailed", "InvoicePaid",
		"InvoicePaymentFailed", "SubscriptionChanged", "ScheduleCanceled"} {
		assert.NotEmpty(t, probe.reached[step], "tracking step %s is reached by no event type", step)
	}
	for _, typ := range probe.reached["ExpandInvoice"] {
		assert.Contains(t, []string{"payment_intent.succeeded", "payment_intent.payment_failed"}, typ,
			"the invoice lookup is for PaymentIntent events only")
	}

	h := handler.New(handler.Config{}, nil, nil, nil, handler.WithRoutes(table))
	assert.Equal(t, routeTypes(table), routeTypes(h.Routes()), "the handler runs the table it is given")
}

// TestRoutesCheck: a table the handler cannot run is refused, naming why.
func TestRoutesCheck(t *testing.T) {
	noop := func(context.Context, handler.Tx, *stripe.Event) error { return nil }
	for name, tc := range map[string]struct {
		routes handler.Routes
		want   string
	}{
		"no type":     {handler.Routes{{Apply: []handler.Applier{noop}}}, "no event type"},
		"twice":       {handler.Routes{{Type: "a", Apply: []handler.Applier{noop}}, {Type: "a", Apply: []handler.Applier{noop}}}, "given twice"},
		"no applier":  {handler.Routes{{Type: "a"}}, "no applier"},
		"nil applier": {handler.Routes{{Type: "a", Apply: []handler.Applier{noop, nil}}}, "applier 1 is nil"},
	} {
		t.Run(name, func(t *testing.T) {
			assert.ErrorContains(t, tc.routes.Check(), tc.want)
			assert.Panics(t, func() { handler.New(handler.Config{}, nil, nil, nil, handler.WithRoutes(tc.routes)) })
		})
	}
	t.Run("With adds a step in plain sight", func(t *testing.T) {
		base := handler.Routes{{Type: "a", Apply: []handler.Applier{noop}}}
		more := base.With("a", noop).With("b", noop)
		assert.Len(t, base[0].Apply, 1, "the table it started from is unchanged")
		assert.Len(t, more[0].Apply, 2)
		assert.Equal(t, []string{"a", "b"}, routeTypes(more))
		assert.NoError(t, more.Check())
	})
}
