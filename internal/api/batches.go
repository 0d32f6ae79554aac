package api

import (
	"context"
	"net/http"
	"regexp"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/batchrun"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// BatchService is what the batch collection routes drive (batchrun.Store,
// with Nudge waking the background runner).
type BatchService interface {
	DryRun(ctx context.Context, sel billing.BatchSelection) ([]billing.BatchCandidate, error)
	Start(ctx context.Context, sel billing.BatchSelection, actor string) (batchrun.Batch, error)
	Get(ctx context.Context, id string) (batchrun.Batch, error)
}

// Batches are the batch collection routes' dependencies.
type Batches struct {
	Service BatchService
	// Nudge wakes the runner after a start (nil: it finds the batch on its
	// next poll).
	Nudge func()
}

// BatchRequest is the body of POST /internal/v1/billing/batches (docs/design.md §4).
// DryRun is required, true or false: a batch charges money (up to 5000
// subscriptions), so a missing or null dry_run must never mean "charge".
type BatchRequest struct {
	AccountIDs []string `json:"account_ids"`
	Since      string   `json:"since"`
	Until      string   `json:"until"`
	DryRun     *bool    `json:"dry_run"`
}

// BatchCandidateJSON is one subscription a dry run lists.
type BatchCandidateJSON struct {
	AccountID      string `json:"account_id"`
	SubscriptionID string `json:"subscription_id"`
	SKU            string `json:"sku"`
	BillingDate    string `json:"billing_date"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	DeclineCode    string `json:"decline_code,omitempty"`
	NotRetried     bool   `json:"not_retried"`
	// Would is charge, or skip_in_flight (an attempt is in flight).
	Would string `json:"would"`
}

// BatchItemJSON is one item of a batch and what the batch did with it.
type BatchItemJSON struct {
	AccountID      string `json:"account_id"`
	SubscriptionID string `json:"subscription_id"`
	BillingDate    string `json:"billing_date"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	Outcome        string `json:"outcome"` // "pending" until done
	PaymentIntent  string `json:"payment_intent,omitempty"`
	DeclineCode    string `json:"decline_code,omitempty"`
	Error          string `json:"error,omitempty"`
}

// BatchJSON is a batch's progress (docs/design.md §4).
type BatchJSON struct {
	ID         string             `json:"id"`
	Status     string             `json:"status"`
	Matched    int                `json:"matched"`
	Done       int                `json:"done"`
	Paid       int                `json:"paid"`
	Processing int                `json:"processing"`
	Declined   int                `json:"declined"`
	Skipped    int                `json:"skipped"`
	Failed     int                `json:"failed"`
	Selection  batchrun.Selection `json:"selection"`
	CreatedBy  string             `json:"created_by"`
	CreatedAt  string             `json:"created_at"`
	FinishedAt *string            `json:"finished_at"`
	Items      []BatchItemJSON    `json:"items"`
}

// BatchToJSON renders a batch.
func BatchToJSON(b batchrun.Batch) BatchJSON {
	out := BatchJSON{ID: b.ID, Status: b.Status, Matched: b.Matched, Done: b.Done, Paid: b.Paid, Processing: b.Processing,
		Declined: b.Declined, Skipped: b.Skipped, Failed: b.Failed, Selection: b.Selection, CreatedBy: b.CreatedBy,
		CreatedAt: b.CreatedAt.UTC().Format(time.RFC3339Nano), Items: []BatchItemJSON{}}
	if out.Selection.AccountIDs == nil {
		out.Selection.AccountIDs = []string{}
	}
	if !b.FinishedAt.IsZero() {
		s := b.FinishedAt.UTC().Format(time.RFC3339Nano)
		out.FinishedAt = &s
	}
	for _, it := range b.Items {
		o := it.Outcome
		if o == "" {
			o = "pending"
		}
		out.Items = append(out.Items, BatchItemJSON{AccountID: it.AccountID, SubscriptionID: it.SubscriptionID,
			BillingDate: it.BillingDate, Amount: it.Amount, Currency: it.Currency, Outcome: o,
			PaymentIntent: it.PaymentIntent, DeclineCode: it.DeclineCode, Error: it.Error})
	}
	return out
}

// CandidatesToJSON renders a dry run's list.
func CandidatesToJSON(cs []billing.BatchCandidate) []BatchCandidateJSON {
	out := make([]BatchCandidateJSON, 0, len(cs))
	for _, c := range cs {
		would := "charge"
		if c.Skip != "" {
			would = "skip_" + c.Skip
		}
		out = append(out, BatchCandidateJSON{AccountID: c.AccountID, SubscriptionID: c.SubscriptionID, SKU: c.SKU,
			BillingDate: c.BillingDate.String(), Amount: c.Amount, Currency: c.Currency, DeclineCode: c.DeclineCode,
			NotRetried: c.NotRetried, Would: would})
	}
	return out
}

var batchIDPattern = regexp.MustCompile(`^bat_[0-9a-f]{24}$`)

// ParseBatchRequest validates a batch request as the API and the console
// take it.
func ParseBatchRequest(in BatchRequest) (billing.BatchSelection, error) {
	sel := billing.BatchSelection{AccountIDs: in.AccountIDs}
	for _, tc := range []struct {
		name, raw string
		dst       *dates.Date
	}{{"since", in.Since, &sel.Since}, {"until", in.Until, &sel.Until}} {
		if tc.raw == "" {
			continue
		}
		d, err := dates.Parse(tc.raw)
		if err != nil {
			return sel, apperr.Invalid("%s must be a date (YYYY-MM-DD)", tc.name)
		}
		*tc.dst = d
	}
	if err := sel.Validate(); err != nil {
		return sel, apperr.Ensure(err, apperr.CodeUnavailable, "billing is unavailable")
	}
	return sel, nil
}

type batchRoutes struct{ b Batches }

func registerBatches(g router, b *Batches) {
	if b == nil || b.Service == nil {
		return
	}
	br := batchRoutes{b: *b}
	g.POST("/billing/batches", br.create)
	g.GET("/billing/batches/:id", br.get)
}

func (h batchRoutes) create(c echo.Context) error {
	var req BatchRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.DryRun == nil {
		return apperr.Invalid("dry_run is required, true or false: true lists what a batch would charge and changes nothing; false starts the batch and charges")
	}
	sel, err := ParseBatchRequest(req)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if *req.DryRun {
		cs, err := h.b.Service.DryRun(ctx, sel)
		if err != nil {
			return apperr.Ensure(err, apperr.CodeUnavailable, "could not read or start the batch")
		}
		return c.JSON(http.StatusOK, map[string]any{"dry_run": true, "matched": len(cs), "data": CandidatesToJSON(cs)})
	}
	b, err := h.b.Service.Start(ctx, sel, APIActor)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "could not read or start the batch")
	}
	if h.b.Nudge != nil {
		h.b.Nudge()
	}
	return c.JSON(http.StatusAccepted, BatchToJSON(b))
}

func (h batchRoutes) get(c echo.Context) error {
	if _, err := requestParams(c); err != nil {
		return err
	}
	id := c.Param("id")
	if !batchIDPattern.MatchString(id) {
		return apperr.Invalid("id: a batch id (bat_ and 24 hex digits)")
	}
	b, err := h.b.Service.Get(c.Request().Context(), id)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "could not read or start the batch")
	}
	return c.JSON(http.StatusOK, BatchToJSON(b))
}
