package api

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/trigger"
)

// TriggerService is what the trigger routes drive (trigger.Intake): the
// same intake the BILLING_TRIGGERS_QUEUE_URL consumer records through.
type TriggerService interface {
	Accept(ctx context.Context, t trigger.Trigger, source, messageID string) (trigger.Record, bool, error)
	Get(ctx context.Context, id string) (trigger.Record, error)
}

// TriggerPeriodJSON is what a trigger did with one unpaid period.
type TriggerPeriodJSON struct {
	SubscriptionID string `json:"subscription_id"`
	BillingDate    string `json:"billing_date"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	Outcome        string `json:"outcome"`
	Attempt        int    `json:"attempt,omitempty"`
	PaymentIntent  string `json:"payment_intent,omitempty"`
	DeclineCode    string `json:"decline_code,omitempty"`
	Error          string `json:"error,omitempty"`
}

// TriggerJSON is a trigger and what it did (docs/design.md §4, §8).
type TriggerJSON struct {
	ID         string `json:"id"`
	AccountID  string `json:"account_id"`
	Kind       string `json:"kind"`
	OccurredAt string `json:"occurred_at"`
	Reference  string `json:"reference"`
	Source     string `json:"source"`
	// Status is pending until the processor collected it, then done.
	Status  string `json:"status"`
	Outcome string `json:"outcome,omitempty"`
	Process string `json:"process"`
	// Today is the day it acted on (a test clock's for an account on one).
	Today       string              `json:"today,omitempty"`
	Attempts    int                 `json:"attempts"`
	Periods     []TriggerPeriodJSON `json:"periods"`
	Duplicates  int                 `json:"duplicates"`
	Error       string              `json:"error,omitempty"`
	ReceivedAt  string              `json:"received_at"`
	ProcessedAt *string             `json:"processed_at"`
	// Duplicate: this request's reference was recorded already (a POST's
	// answer only): it did nothing.
	Duplicate bool `json:"duplicate,omitempty"`
}

// TriggerToJSON renders a trigger.
func TriggerToJSON(r trigger.Record) TriggerJSON {
	out := TriggerJSON{ID: r.ID, AccountID: r.Trigger.AccountID, Kind: string(r.Trigger.Kind),
		OccurredAt: r.Trigger.OccurredAt.UTC().Format(time.RFC3339), Reference: r.Trigger.Reference, Source: r.Source,
		Status: r.Status, Outcome: r.Outcome, Process: string(r.Process), Today: r.Today, Attempts: r.Attempts,
		Periods: []TriggerPeriodJSON{}, Duplicates: r.Duplicates, Error: r.Error,
		ReceivedAt: r.CreatedAt.UTC().Format(time.RFC3339Nano)}
	if !r.ProcessedAt.IsZero() {
		s := r.ProcessedAt.UTC().Format(time.RFC3339Nano)
		out.ProcessedAt = &s
	}
	for _, p := range r.Periods {
		out.Periods = append(out.Periods, TriggerPeriodJSON{SubscriptionID: p.SubscriptionID, BillingDate: p.BillingDate,
			Amount: p.Amount, Currency: p.Currency, Outcome: p.Outcome, Attempt: p.AttemptNo, PaymentIntent: p.PaymentIntent,
			DeclineCode: p.DeclineCode, Error: p.Error})
	}
	return out
}

type triggerRoutes struct{ s TriggerService }

func registerTriggers(g router, s TriggerService) {
	if s == nil {
		return
	}
	tr := triggerRoutes{s: s}
	g.POST("/billing/triggers", tr.create)
	g.GET("/billing/triggers/:id", tr.get)
}

func (h triggerRoutes) create(c echo.Context) error {
	var req trigger.Request
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	t, err := trigger.Parse(req)
	if err != nil {
		return err
	}
	rec, dup, err := h.s.Accept(c.Request().Context(), t, trigger.SourceAPI, "")
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "could not record the trigger")
	}
	out := TriggerToJSON(rec)
	out.Duplicate = dup
	return c.JSON(http.StatusAccepted, out)
}

func (h triggerRoutes) get(c echo.Context) error {
	if _, err := requestParams(c); err != nil {
		return err
	}
	id := c.Param("id")
	if !trigger.ValidID(id) {
		return apperr.Invalid("id: a trigger id (trg_ and 24 hex digits)")
	}
	r, err := h.s.Get(c.Request().Context(), id)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "could not read the trigger")
	}
	return c.JSON(http.StatusOK, TriggerToJSON(r))
}
