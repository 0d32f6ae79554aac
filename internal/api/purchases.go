package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/purchase"
	"github.com/stripe-payments/stripe-payments/internal/tracking"
)

// PurchasePrefix is the purchase API's prefix (docs/design.md §4).
const PurchasePrefix = "/v1"

// PurchaseService is what the purchase routes use (purchase.Service).
type PurchaseService interface {
	Create(ctx context.Context, req purchase.Request, idempotencyKey string) (purchase.Result, error)
	Get(ctx context.Context, id uuid.UUID) (tracking.Purchase, error)
}

// Purchase is the JSON shape of a purchase.
type Purchase struct {
	ID                 string  `json:"id"`
	Status             string  `json:"status"` // new | fulfilled
	Kind               string  `json:"kind"`   // legacy | one_off | recurring
	Account            string  `json:"account"`
	StripeAccount      string  `json:"stripe_account"`
	Created            string  `json:"created"`
	LastUpdated        string  `json:"last_updated"`
	FulfilledAt        *string `json:"fulfilled_at"`
	Customer           string  `json:"customer,omitempty"`
	PaymentIntent      string  `json:"payment_intent,omitempty"`
	Invoice            string  `json:"invoice,omitempty"`
	Subscription       string  `json:"subscription,omitempty"`
	PaymentStatus      string  `json:"payment_status,omitempty"`
	SubscriptionStatus string  `json:"subscription_status,omitempty"`
	// ClientSecret of a legacy purchase's PaymentIntent, in the POST answer
	// only (it is never stored).
	ClientSecret string `json:"client_secret,omitempty"`
	// StripeStatus is what Stripe answered for the object it created, in
	// the POST answer only.
	StripeStatus string `json:"stripe_status,omitempty"`
}

func ts(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// PurchaseJSON renders a purchase.
func PurchaseJSON(p tracking.Purchase) Purchase {
	out := Purchase{
		ID: p.ID.String(), Status: p.Status(), Kind: string(p.Kind), Account: p.Account.String(),
		StripeAccount: p.StripeAccount, Created: ts(p.Created), LastUpdated: ts(p.LastUpdated),
		Customer: p.Customer, PaymentIntent: p.PaymentIntent, Invoice: p.Invoice, Subscription: p.Subscription,
		PaymentStatus: string(p.PaymentStatus), SubscriptionStatus: string(p.SubscriptionStatus),
	}
	if p.FulfilledAt != nil {
		s := ts(*p.FulfilledAt)
		out.FulfilledAt = &s
	}
	return out
}

type purchaseRoutes struct {
	svc PurchaseService
}

// registerPurchases mounts POST /v1/purchases and GET /v1/purchases/{id}
// behind the same bearer token as the internal API.
func registerPurchases(e *echo.Echo, auth echo.MiddlewareFunc, svc PurchaseService) {
	if svc == nil {
		return
	}
	r := purchaseRoutes{svc: svc}
	g := router{g: e.Group(PurchasePrefix), auth: auth}
	g.POST("/purchases", r.create)
	g.GET("/purchases/:id", r.get)
}

// create answers 201 with the purchase. A request carrying an
// Idempotency-Key that this account already used answers the same purchase
// (with Idempotent-Replayed: true) and creates nothing new at Stripe.
func (r purchaseRoutes) create(c echo.Context) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	var req purchase.Request
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return apperr.Invalid("invalid JSON body: %s", jsonProblem(err))
	}
	if dec.More() {
		return apperr.Invalid("invalid JSON body: trailing data")
	}
	res, err := r.svc.Create(c.Request().Context(), req, c.Request().Header.Get("Idempotency-Key"))
	if err != nil {
		return err
	}
	out := PurchaseJSON(res.Purchase)
	out.ClientSecret = res.ClientSecret
	out.StripeStatus = res.StripeStatus
	if res.Replayed {
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
	return c.JSON(http.StatusCreated, out)
}

func jsonProblem(err error) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return "malformed JSON"
	case errors.As(err, &typ):
		return "field " + typ.Field + " has the wrong type"
	case errors.Is(err, io.EOF):
		return "empty body"
	default:
		return err.Error() // e.g. json: unknown field "x"
	}
}

func (r purchaseRoutes) get(c echo.Context) error {
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return apperr.Invalid("purchase id must be a UUID")
	}
	p, err := r.svc.Get(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, PurchaseJSON(p))
}
