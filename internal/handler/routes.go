package handler

import (
	"context"
	"errors"
	"fmt"

	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/pgtx"
)

// The route table: what the service does with each Stripe event type.
// Everything the handler runs for an event is in NewRoutes, in order; a type
// that is not in the table is recorded and processed with no effect.
//
// Reading one event's way, e.g. payment_intent.succeeded: the webhook
// verifies and parses it (package webhook), Handle queues it, its route's
// Prepare runs first, outside any transaction (Tracking.ExpandInvoice: an
// invoice the payload only names is fetched from Stripe), then the batch's
// ledger transaction claims the event id and runs its route's appliers in
// order (Tracking.PaymentIntentSucceeded: payment paid, purchase fulfilled,
// its action in the outbox; then the billing feed: a billing-core charge's
// event goes to the outbox topic "billing"), the transaction commits, and
// the event's record is written processed.

// Tx is the transaction appliers write through: statements only, the
// ledger owns its end (see package pgtx).
type Tx = pgtx.Tx

// Applier applies one event type's state transitions inside the ledger's
// transaction. It must only write through tx, and must not call slow
// external services: the transaction may hold a whole batch of events.
type Applier func(ctx context.Context, tx Tx, ev *stripe.Event) error

// Preparer runs before the ledger transaction opens, for work that must not
// hold a database transaction open, such as asking Stripe for what the
// payload lacks. It may enrich ev (e.g. expand a reference in ev.Data) for the
// appliers. It runs again on every delivery that reaches processing, so it must
// be side-effect free; an error fails the delivery, which is retried.
type Preparer func(ctx context.Context, ev *stripe.Event) error

// Tracking is the Postgres state machines of package tracking (purchases,
// payments, subscriptions), step by step as the table names them.
type Tracking interface {
	ExpandInvoice(ctx context.Context, ev *stripe.Event) error
	PaymentIntentSucceeded(ctx context.Context, tx Tx, ev *stripe.Event) error
	PaymentIntentFailed(ctx context.Context, tx Tx, ev *stripe.Event) error
	InvoicePaid(ctx context.Context, tx Tx, ev *stripe.Event) error
	InvoicePaymentFailed(ctx context.Context, tx Tx, ev *stripe.Event) error
	SubscriptionChanged(ctx context.Context, tx Tx, ev *stripe.Event) error
	ScheduleCanceled(ctx context.Context, tx Tx, ev *stripe.Event) error
}

// NewRoutes is the service's route table. billingFeed is feedqueue.Enqueue (internal/billing/feedqueue):
// it enqueues the event for the recurring billing core when the
// PaymentIntent is one of its charges, and does nothing otherwise. A nil
// billingFeed leaves it out (the tracking flows' own tests).
func NewRoutes(t Tracking, billingFeed Applier) Routes {
	return Routes{
		{Type: "payment_intent.processing", Apply: []Applier{billingFeed}},
		{Type: "payment_intent.succeeded", Prepare: t.ExpandInvoice, Apply: []Applier{t.PaymentIntentSucceeded, billingFeed}},
		{Type: "payment_intent.payment_failed", Prepare: t.ExpandInvoice, Apply: []Applier{t.PaymentIntentFailed, billingFeed}},
		{Type: "charge.refunded", Apply: []Applier{billingFeed}},
		{Type: "invoice.paid", Apply: []Applier{t.InvoicePaid}},
		{Type: "invoice.payment_failed", Apply: []Applier{t.InvoicePaymentFailed}},
		{Type: "customer.subscription.created", Apply: []Applier{t.SubscriptionChanged}},
		{Type: "customer.subscription.updated", Apply: []Applier{t.SubscriptionChanged}},
		{Type: "customer.subscription.deleted", Apply: []Applier{t.SubscriptionChanged}},
		{Type: "subscription_schedule.canceled", Apply: []Applier{t.ScheduleCanceled}},
	}.withoutNil()
}

// Route is what runs for one event type.
type Route struct {
	Type string
	// Prepare, when set, runs before the batch's transaction.
	Prepare Preparer
	// Apply run in this order in the ledger transaction that claims the
	// event; the first error fails the event (nothing of it is committed).
	Apply []Applier
}

// Routes is a route table, one route per event type.
type Routes []Route

// Check reports a table the handler cannot run as written: a route without
// a type or without appliers, a nil step, a type given twice.
func (r Routes) Check() error {
	seen := map[string]bool{}
	var errs []error
	for i, route := range r {
		switch {
		case route.Type == "":
			errs = append(errs, fmt.Errorf("route %d has no event type", i))
		case seen[route.Type]:
			errs = append(errs, fmt.Errorf("route %s is given twice", route.Type))
		case len(route.Apply) == 0:
			errs = append(errs, fmt.Errorf("route %s has no applier", route.Type))
		}
		seen[route.Type] = true
		for j, a := range route.Apply {
			if a == nil {
				errs = append(errs, fmt.Errorf("route %s: applier %d is nil", route.Type, j))
			}
		}
	}
	return errors.Join(errs...)
}

// With returns a copy of r in which a runs after the appliers eventType
// already has (a route of its own when it has none): a test adds a step to
// the service's table this way, in plain sight.
func (r Routes) With(eventType string, a Applier) Routes {
	out := make(Routes, len(r), len(r)+1)
	copy(out, r)
	for i := range out {
		if out[i].Type == eventType {
			out[i].Apply = append(append([]Applier(nil), out[i].Apply...), a)
			return out
		}
	}
	return append(out, Route{Type: eventType, Apply: []Applier{a}})
}

// withoutNil drops nil appliers, and the routes they leave with none.
func (r Routes) withoutNil() Routes {
	out := make(Routes, 0, len(r))
	for _, route := range r {
		var apply []Applier
		for _, a := range route.Apply {
			if a != nil {
				apply = append(apply, a)
			}
		}
		if len(apply) > 0 {
			route.Apply = apply
			out = append(out, route)
		}
	}
	return out
}

// byType indexes a checked table.
func (r Routes) byType() map[string]Route {
	m := make(map[string]Route, len(r))
	for _, route := range r {
		m[route.Type] = route
	}
	return m
}

// apply runs the route's appliers in order.
func (route Route) apply(ctx context.Context, tx Tx, ev *stripe.Event) error {
	for _, a := range route.Apply {
		if err := a(ctx, tx, ev); err != nil {
			return err
		}
	}
	return nil
}
