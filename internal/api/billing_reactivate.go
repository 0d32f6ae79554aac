package api

import (
	"bytes"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
)

// reactivateRequest is POST …/reactivate's optional body (docs/design.md §4).
type reactivateRequest struct {
	PaymentMethod *string `json:"payment_method"`
	Amount        *int64  `json:"amount"`
	SKU           *string `json:"sku"`
}

// reactivate starts a CANCELLED subscription again (docs/design.md §8
// "Reactivation"): 200 with the subscription, 409 when it is not
// cancelled, 400 for bad input (nothing changes).
func (h billingRoutes) reactivate(c echo.Context) error {
	account, subID, err := subscriptionPath(c)
	if err != nil {
		return err
	}
	var req reactivateRequest
	raw, err := io.ReadAll(io.LimitReader(c.Request().Body, 64<<10+1))
	if err != nil {
		return apperr.Wrap(err, apperr.CodeInvalidParameter, "could not read the body")
	}
	c.Request().Body = io.NopCloser(bytes.NewReader(raw))
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := decodeJSONBody(c, &req); err != nil {
			return err
		}
	} else if len(c.QueryParams()) > 0 {
		return apperr.Invalid("no query parameters are accepted")
	}
	sub, err := h.svc.Reactivate(c.Request().Context(), account, subID,
		billing.Reactivation{PaymentMethod: req.PaymentMethod, Amount: req.Amount, SKU: req.SKU})
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "billing is unavailable")
	}
	return c.JSON(http.StatusOK, SubscriptionJSON(sub))
}
