package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// BillingService is the part of the billing core the API uses.
type BillingService interface {
	CreateSubscription(ctx context.Context, account string, in billing.CreateInput) (billing.Subscription, error)
	UpdateSubscription(ctx context.Context, account, sub string, ch billing.Change) (billing.Subscription, error)
	GetSubscription(ctx context.Context, account, sub string) (billing.Subscription, error)
	ListSubscriptions(ctx context.Context, account string, limit int32, cursor string) (billing.Page[billing.Subscription], error)
	ListReceipts(ctx context.Context, account string, limit int32, cursor string) (billing.Page[billing.Receipt], error)
	ListHistory(ctx context.Context, account, sub string, limit int32, cursor string) (billing.Page[billing.HistoryEntry], error)
	Pay(ctx context.Context, account, sub string) (billing.Subscription, billing.Period, error)
	ErasePersonalData(ctx context.Context, account, sub string) (billing.Erasure, error)
	Reactivate(ctx context.Context, account, sub string, r billing.Reactivation) (billing.Subscription, error)
}

// registerBilling mounts the billing routes of docs/design.md §4 on g.
func registerBilling(g router, svc BillingService) {
	h := billingRoutes{svc: svc}
	g.POST("/accounts/:account_id/subscriptions", h.create)
	g.GET("/accounts/:account_id/subscriptions", h.listSubscriptions)
	g.GET("/accounts/:account_id/subscriptions/:subscription_id", h.getSubscription)
	g.PATCH("/accounts/:account_id/subscriptions/:subscription_id", h.update)
	g.POST("/accounts/:account_id/subscriptions/:subscription_id/pay", h.pay)
	g.POST("/accounts/:account_id/subscriptions/:subscription_id/reactivate", h.reactivate)
	g.GET("/accounts/:account_id/subscriptions/:subscription_id/history", h.history)
	g.GET("/accounts/:account_id/receipts", h.receipts)
	g.DELETE("/accounts/:account_id/subscriptions/:subscription_id/personal-data", h.erase)
}

type billingRoutes struct {
	svc BillingService
}

// subscriptionPath reads the account and subscription ids of a
// .../accounts/{account_id}/subscriptions/{subscription_id} route.
func subscriptionPath(c echo.Context) (account, subscription string, err error) {
	if account, err = pathID(c, "account_id"); err != nil {
		return "", "", err
	}
	if subscription, err = pathID(c, "subscription_id"); err != nil {
		return "", "", err
	}
	return account, subscription, nil
}

func pathID(c echo.Context, name string) (string, error) {
	v := c.Param(name)
	if !billing.ValidID(v) {
		return "", apperr.Invalid("invalid %s", name)
	}
	return v, nil
}

// listParams reads limit (default 100, 1–1000) and cursor, refusing any
// other query parameter.
func listParams(c echo.Context) (int32, string, error) {
	q, err := queryParams(c.QueryParams(), "limit", "cursor")
	if err != nil {
		return 0, "", err
	}
	return pageOf(q, func(cursor string) (string, error) {
		if cursor == "" || len(cursor) > 2048 {
			return "", apperr.Invalid("invalid cursor")
		}
		return cursor, nil
	})
}

// listPage answers one page of a billing list: limit and cursor from the
// query (listParams), the page from list, each item rendered by render.
func listPage[T, J any](c echo.Context, list func(ctx context.Context, limit int32, cursor string) (billing.Page[T], error), render func(T) J) error {
	limit, cursor, err := listParams(c)
	if err != nil {
		return err
	}
	page, err := list(c.Request().Context(), limit, cursor)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "billing is unavailable")
	}
	return c.JSON(http.StatusOK, listOf(page.Items, page.NextCursor, render))
}

// decodeBody decodes a JSON object strictly: no unknown fields, no
// trailing data, at most 64 KiB.
func decodeBody(c echo.Context, v any) error {
	if len(c.QueryParams()) > 0 {
		return apperr.Invalid("no query parameters are accepted")
	}
	raw, err := io.ReadAll(io.LimitReader(c.Request().Body, 64<<10+1))
	if err != nil {
		return apperr.Wrap(err, apperr.CodeInvalidParameter, "could not read the body")
	}
	if len(raw) > 64<<10 {
		return apperr.New(apperr.CodePayloadTooLarge, "the body is over 64 KiB")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return apperr.Invalid("invalid JSON body: %s", jsonProblem(err))
	}
	if dec.More() {
		return apperr.Invalid("invalid JSON body: trailing data")
	}
	// Go's decoder matches field names case-insensitively ("AMOUNT" set
	// amount) and keeps the last of a repeated one: names must be exact.
	if err := exactFields(raw, v); err != nil {
		return apperr.Invalid("invalid JSON body: %s", err.Error())
	}
	return nil
}

// decodeJSONBody is decodeBody for a request that must say its body is
// JSON (Content-Type application/json, parameters such as charset allowed).
func decodeJSONBody(c echo.Context, v any) error {
	ct := c.Request().Header.Get(echo.HeaderContentType)
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != echo.MIMEApplicationJSON {
		return apperr.Invalid("Content-Type: application/json is required (got %q)", ct)
	}
	return decodeBody(c, v)
}

type createRequest struct {
	SubscriptionID string  `json:"subscription_id"`
	SKU            string  `json:"sku"`
	Email          string  `json:"email"`
	PaymentDay     int     `json:"payment_day"`
	BillingWeek    int     `json:"billing_week"`
	Amount         int64   `json:"amount"`
	Currency       string  `json:"currency"`
	Term           *string `json:"term"` // absent: MONTHLY
	Customer       string  `json:"customer"`
	PaymentMethod  string  `json:"payment_method"`
	StripeAccount  string  `json:"stripe_account"`
	StartDate      string  `json:"start_date"`
	Timezone       string  `json:"timezone"`
	TestClock      string  `json:"test_clock"`
}

func (h billingRoutes) create(c echo.Context) error {
	account, err := pathID(c, "account_id")
	if err != nil {
		return err
	}
	var req createRequest
	if err := decodeJSONBody(c, &req); err != nil {
		return err
	}
	// Exactly MONTHLY or YEARLY ("" and "monthly" are refused); absent,
	// MONTHLY (docs/design.md §4 names no default; the API always had this one).
	term := dates.Monthly
	if req.Term != nil {
		if term = dates.Term(*req.Term); !term.Valid() {
			return apperr.Invalid("term: exactly MONTHLY or YEARLY")
		}
	}
	if !billing.SupportedCurrency(req.Currency) {
		return apperr.Invalid("currency: one of Stripe's supported currencies, as a lowercase ISO 4217 code (usd, eur, ...)")
	}
	start, err := dates.ParseOptional(req.StartDate)
	if err != nil {
		return apperr.Invalid("start_date: YYYY-MM-DD")
	}
	sub, err := h.svc.CreateSubscription(c.Request().Context(), account, billing.CreateInput{
		SubscriptionID: req.SubscriptionID, SKU: req.SKU, Email: req.Email, PaymentDay: req.PaymentDay,
		BillingWeek: req.BillingWeek, Amount: req.Amount, Currency: req.Currency, Term: term,
		Customer: req.Customer, PaymentMethod: req.PaymentMethod, StripeAccount: req.StripeAccount,
		StartDate: start, Timezone: req.Timezone, TestClock: req.TestClock,
	})
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "billing is unavailable")
	}
	return c.JSON(http.StatusCreated, SubscriptionJSON(sub))
}

// updateRequest is PATCH's body: one action, or field changes.
type updateRequest struct {
	Action          string  `json:"action"`
	Months          *int    `json:"months"`
	BillingDate     string  `json:"billing_date"`
	Amount          *int64  `json:"amount"`
	PaymentMethod   *string `json:"payment_method"`
	PaymentDay      *int    `json:"payment_day"`
	BillingWeek     *int    `json:"billing_week"`
	Term            *string `json:"term"`
	NextPaymentDate string  `json:"next_payment_date"`
	// SKU with Amount: a plan change (docs/design.md §8 "Plan change").
	SKU *string `json:"sku"`
}

func (h billingRoutes) update(c echo.Context) error {
	account, subID, err := subscriptionPath(c)
	if err != nil {
		return err
	}
	var req updateRequest
	if err := decodeJSONBody(c, &req); err != nil {
		return err
	}
	ch, err := req.change()
	if err != nil {
		return err
	}
	sub, err := h.svc.UpdateSubscription(c.Request().Context(), account, subID, ch)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "billing is unavailable")
	}
	return c.JSON(http.StatusOK, SubscriptionJSON(sub))
}

func (r updateRequest) change() (billing.Change, error) {
	bad := func(format string, args ...any) (billing.Change, error) {
		return billing.Change{}, apperr.Invalid(format, args...)
	}
	fields := r.Amount != nil || r.PaymentMethod != nil || r.PaymentDay != nil || r.BillingWeek != nil || r.Term != nil || r.NextPaymentDate != "" || r.SKU != nil
	ch := billing.Change{Action: r.Action, Amount: r.Amount, PaymentMethod: r.PaymentMethod, PaymentDay: r.PaymentDay, BillingWeek: r.BillingWeek, SKU: r.SKU}
	switch r.Action {
	case "":
		if !fields {
			return bad("give an action (pause, resume, cancel, waive) or fields to change (amount, payment_method, payment_day, billing_week, term, next_payment_date, sku with amount)")
		}
	case "pause", "resume", "cancel", "waive":
		if fields {
			return bad("an action cannot be combined with field changes")
		}
	default:
		return bad("action: one of pause, resume, cancel, waive")
	}
	if (r.Months != nil) != (r.Action == "pause") {
		return bad("months goes with, and only with, action pause")
	}
	if (r.BillingDate != "") != (r.Action == "waive") {
		return bad("billing_date goes with, and only with, action waive")
	}
	if r.PaymentDay != nil && r.BillingWeek != nil {
		return bad("payment_day and billing_week are exclusive")
	}
	if r.SKU != nil && r.Amount == nil {
		return bad("sku: a plan change gives the new plan's amount too (sku with amount)")
	}
	if r.Term != nil {
		term := dates.Term(*r.Term)
		if !term.Valid() {
			return bad("term: exactly MONTHLY or YEARLY")
		}
		ch.Term = &term
	}
	if r.Months != nil {
		ch.Months = *r.Months
	}
	var err error
	if ch.BillingDate, err = dates.ParseOptional(r.BillingDate); err != nil {
		return bad("billing_date: YYYY-MM-DD")
	}
	if ch.NextPaymentDate, err = dates.ParseOptional(r.NextPaymentDate); err != nil {
		return bad("next_payment_date: YYYY-MM-DD")
	}
	return ch, nil
}

func (h billingRoutes) getSubscription(c echo.Context) error {
	account, subID, err := subscriptionPath(c)
	if err != nil {
		return err
	}
	if len(c.QueryParams()) > 0 {
		return apperr.Invalid("no query parameters are accepted")
	}
	sub, err := h.svc.GetSubscription(c.Request().Context(), account, subID)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "billing is unavailable")
	}
	return c.JSON(http.StatusOK, SubscriptionJSON(sub))
}

func (h billingRoutes) listSubscriptions(c echo.Context) error {
	account, err := pathID(c, "account_id")
	if err != nil {
		return err
	}
	return listPage(c, func(ctx context.Context, limit int32, cursor string) (billing.Page[billing.Subscription], error) {
		return h.svc.ListSubscriptions(ctx, account, limit, cursor)
	}, SubscriptionJSON)
}

func (h billingRoutes) receipts(c echo.Context) error {
	account, err := pathID(c, "account_id")
	if err != nil {
		return err
	}
	return listPage(c, func(ctx context.Context, limit int32, cursor string) (billing.Page[billing.Receipt], error) {
		return h.svc.ListReceipts(ctx, account, limit, cursor)
	}, ReceiptJSON)
}

func (h billingRoutes) history(c echo.Context) error {
	account, subID, err := subscriptionPath(c)
	if err != nil {
		return err
	}
	return listPage(c, func(ctx context.Context, limit int32, cursor string) (billing.Page[billing.HistoryEntry], error) {
		return h.svc.ListHistory(ctx, account, subID, limit, cursor)
	}, HistoryJSON)
}

// PayResult is the answer of pay now: the period charged, as its history
// entry shows it, and the subscription afterwards.
type PayResult struct {
	BillingDate   string       `json:"billing_date"`
	BillingStatus string       `json:"billing_status"`
	Process       string       `json:"process"`
	TransactionID *string      `json:"transaction_id"`
	Error         *string      `json:"error"`
	Amount        int64        `json:"amount"`
	Attempts      int          `json:"attempts"`
	Subscription  Subscription `json:"subscription"`
}

// pay is POST …/subscriptions/{id}/pay: charge the oldest ERROR period now
// (process MANUAL_REPAYMENT). 200 with the period's outcome (COMPLETED,
// ACHSENT, or ERROR when declined); 409 when there is nothing to pay, an
// attempt is in flight, or a job holds the account.
func (h billingRoutes) pay(c echo.Context) error {
	account, subID, err := subscriptionPath(c)
	if err != nil {
		return err
	}
	if len(c.QueryParams()) > 0 {
		return apperr.Invalid("no query parameters are accepted")
	}
	if raw, _ := io.ReadAll(io.LimitReader(c.Request().Body, 1<<10)); len(bytes.TrimSpace(raw)) > 0 && string(bytes.TrimSpace(raw)) != "{}" {
		return apperr.Invalid("pay takes no body (or {})")
	}
	sub, p, err := h.svc.Pay(c.Request().Context(), account, subID)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "billing is unavailable")
	}
	return c.JSON(http.StatusOK, PayResult{
		BillingDate: p.BillingDate.String(), BillingStatus: string(p.Status), Process: string(p.Process),
		TransactionID: optString(p.TransactionID), Error: optString(p.Error), Amount: p.Amount, Attempts: p.Attempts,
		Subscription: SubscriptionJSON(sub),
	})
}
