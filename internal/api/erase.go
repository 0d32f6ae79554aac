package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
)

// ErasureResult is the answer of DELETE .../personal-data.
type ErasureResult struct {
	AccountID      string `json:"account_id"`
	SubscriptionID string `json:"subscription_id"`
	// Erased: what held the email and no longer does.
	Erased struct {
		Subscription   bool `json:"subscription"`
		Periods        int  `json:"periods"`
		HistoryEntries int  `json:"history_entries"`
		QueuedEmails   int  `json:"queued_emails"`
	} `json:"erased"`
}

// erase removes the subscriber's personal fields (the email) from the
// subscription, its periods and its history entries, and appends one
// history entry recording the erasure (docs/retention.md).
func (h billingRoutes) erase(c echo.Context) error {
	account, subID, err := subscriptionPath(c)
	if err != nil {
		return err
	}
	e, err := h.svc.ErasePersonalData(c.Request().Context(), account, subID)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "billing is unavailable")
	}
	res := ErasureResult{AccountID: account, SubscriptionID: subID}
	res.Erased.Subscription, res.Erased.Periods, res.Erased.HistoryEntries = e.Subscription, e.Periods, e.HistoryEntries
	res.Erased.QueuedEmails = e.QueuedEmails
	return c.JSON(http.StatusOK, res)
}
