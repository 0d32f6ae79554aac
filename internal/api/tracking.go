package api

import (
	"context"
	"net/http"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/stripeid"
	"github.com/stripe-payments/stripe-payments/internal/tracking"
)

// TrackingReader is the part of the tracking store the internal API reads.
type TrackingReader interface {
	GetPurchase(ctx context.Context, id uuid.UUID) (tracking.Purchase, error)
	GetPayment(ctx context.Context, id string) (tracking.Payment, error)
	GetSubscription(ctx context.Context, id string) (tracking.Subscription, error)
}

// StateRow is the JSON shape of a payment or a subscription.
type StateRow struct {
	ID               string  `json:"id"`
	Status           string  `json:"status"`
	Purchase         string  `json:"purchase"`
	Account          string  `json:"account"`
	StripeAccount    string  `json:"stripe_account"`
	Created          string  `json:"created"`
	LastUpdated      string  `json:"last_updated"`
	LastEventID      string  `json:"last_event_id,omitempty"`
	LastEventCreated *string `json:"last_event_created"`
}

type trackingRoutes struct {
	store TrackingReader
}

// registerTracking mounts the internal read routes of the tracking tables
// (docs/design.md §4) on the internal group.
func registerTracking(g router, store TrackingReader) {
	if store == nil {
		return
	}
	r := trackingRoutes{store: store}
	g.GET("/purchases/:id", r.purchase)
	g.GET("/payments/:id", r.payment)
	g.GET("/subscriptions/:id", r.subscription)
}

func (r trackingRoutes) purchase(c echo.Context) error {
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return apperr.Invalid("purchase id must be a UUID")
	}
	p, err := r.store.GetPurchase(c.Request().Context(), id)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "could not read purchase")
	}
	return c.JSON(http.StatusOK, PurchaseJSON(p))
}

func (r trackingRoutes) payment(c echo.Context) error {
	id := c.Param("id")
	if !stripeid.Valid(id, "pi_") {
		return apperr.Invalid("payment id must be a PaymentIntent id (pi_...)")
	}
	p, err := r.store.GetPayment(c.Request().Context(), id)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "could not read payment")
	}
	out := StateRow{ID: p.ID, Status: string(p.Status), Purchase: p.Purchase.String(), Account: p.Account.String(),
		StripeAccount: p.StripeAccount, Created: ts(p.Created), LastUpdated: ts(p.LastUpdated), LastEventID: p.LastEventID}
	if p.LastEventCreated != nil {
		s := ts(*p.LastEventCreated)
		out.LastEventCreated = &s
	}
	return c.JSON(http.StatusOK, out)
}

func (r trackingRoutes) subscription(c echo.Context) error {
	id := c.Param("id")
	if !stripeid.Valid(id, "sub_") {
		return apperr.Invalid("subscription id must be a Stripe subscription id (sub_...)")
	}
	s, err := r.store.GetSubscription(c.Request().Context(), id)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "could not read subscription")
	}
	out := StateRow{ID: s.ID, Status: string(s.Status), Purchase: s.Purchase.String(), Account: s.Account.String(),
		StripeAccount: s.StripeAccount, Created: ts(s.Created), LastUpdated: ts(s.LastUpdated), LastEventID: s.LastEventID}
	if s.LastEventCreated != nil {
		v := ts(*s.LastEventCreated)
		out.LastEventCreated = &v
	}
	return c.JSON(http.StatusOK, out)
}
