package api

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/reconcile"
)

// ReconcileService is what the reconciliation routes drive
// (reconcile.Store).
type ReconcileService interface {
	Start(ctx context.Context, r reconcile.Request, actor string) (reconcile.Run, error)
	Get(ctx context.Context, id string) (reconcile.Run, error)
	Findings(ctx context.Context, id string, after, limit int) ([]reconcile.Finding, int, error)
}

// Reconciliations are the reconciliation routes' dependencies.
type Reconciliations struct {
	Service ReconcileService
	// Nudge wakes the runner after a start (nil: it finds the run on its
	// next poll).
	Nudge func()
}

type reconcileRequest struct {
	// DryRun is required: a run that is not dry changes state and
	// triggers fulfilments and unsubscribes.
	DryRun *strictBool `json:"dry_run"`
	Since  string      `json:"since"`
	Kinds  []string    `json:"kinds"`
}

// ReconciliationJSON is a run and its counts (docs/design.md §4).
type ReconciliationJSON struct {
	ID         string   `json:"id"`
	Status     string   `json:"status"`
	DryRun     bool     `json:"dry_run"`
	Since      string   `json:"since"`
	Kinds      []string `json:"kinds"`
	Matched    int      `json:"matched"`
	Checked    int      `json:"checked"`
	Drifted    int      `json:"drifted"`
	Healed     int      `json:"healed"`
	Failed     int      `json:"failed"`
	CreatedBy  string   `json:"created_by"`
	CreatedAt  string   `json:"created_at"`
	FinishedAt *string  `json:"finished_at"`
}

// ReconciliationToJSON renders a run.
func ReconciliationToJSON(r reconcile.Run) ReconciliationJSON {
	out := ReconciliationJSON{ID: r.ID, Status: r.Status, DryRun: r.DryRun, Since: r.Since.UTC().Format(time.RFC3339),
		Kinds: r.Kinds, Matched: r.Matched, Checked: r.Checked, Drifted: r.Drifted, Healed: r.Healed, Failed: r.Failed,
		CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt.UTC().Format(time.RFC3339Nano)}
	if !r.FinishedAt.IsZero() {
		s := r.FinishedAt.UTC().Format(time.RFC3339Nano)
		out.FinishedAt = &s
	}
	return out
}

// FindingJSON is one difference a run found.
type FindingJSON struct {
	Object        string  `json:"object"`
	Kind          string  `json:"kind"`
	StripeAccount string  `json:"stripe_account"`
	Local         string  `json:"local"`
	Stripe        string  `json:"stripe"`
	Action        string  `json:"action"`
	Error         *string `json:"error"`
	At            string  `json:"at"`
}

// FindingToJSON renders a finding.
func FindingToJSON(f reconcile.Finding) FindingJSON {
	out := FindingJSON{Object: f.Object, Kind: f.Kind, StripeAccount: f.StripeAccount, Local: f.Local, Stripe: f.Stripe,
		Action: f.Action, At: f.At.UTC().Format(time.RFC3339Nano)}
	if f.Error != "" {
		out.Error = &f.Error
	}
	return out
}

type reconcileRoutes struct{ r Reconciliations }

func registerReconciliations(g router, r *Reconciliations) {
	if r == nil || r.Service == nil {
		return
	}
	rr := reconcileRoutes{r: *r}
	g.POST("/reconciliations", rr.create)
	g.GET("/reconciliations/:id", rr.get)
	g.GET("/reconciliations/:id/findings", rr.findings)
}

func (h reconcileRoutes) create(c echo.Context) error {
	var req reconcileRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.DryRun == nil {
		return apperr.Invalid("dry_run: required, true or false (a run that is not dry heals what it finds)")
	}
	since, err := reconcile.ParseSince(req.Since)
	if err != nil {
		return err
	}
	run, err := h.r.Service.Start(c.Request().Context(), reconcile.Request{DryRun: bool(*req.DryRun), Since: since, Kinds: req.Kinds}, APIActor)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "could not start the reconciliation")
	}
	if h.r.Nudge != nil {
		h.r.Nudge()
	}
	return c.JSON(http.StatusAccepted, map[string]any{"id": run.ID, "status": run.Status, "matched": run.Matched})
}

func reconcilePath(c echo.Context, params ...string) (map[string]string, string, error) {
	q, err := requestParams(c, params...)
	if err != nil {
		return nil, "", err
	}
	id := c.Param("id")
	if !reconcile.IDPattern.MatchString(id) {
		return nil, "", apperr.Invalid("id: a reconciliation id (rec_ and 24 hex digits)")
	}
	return q, id, nil
}

func (h reconcileRoutes) get(c echo.Context) error {
	_, id, err := reconcilePath(c)
	if err != nil {
		return err
	}
	run, err := h.r.Service.Get(c.Request().Context(), id)
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "could not read reconciliation %s", id)
	}
	return c.JSON(http.StatusOK, ReconciliationToJSON(run))
}

func (h reconcileRoutes) findings(c echo.Context) error {
	q, id, err := reconcilePath(c, "limit", "cursor")
	if err != nil {
		return err
	}
	limit, after, err := pageOf(q, decodeOffsetCursor)
	if err != nil {
		return err
	}
	list, next, err := h.r.Service.Findings(c.Request().Context(), id, after, int(limit))
	if err != nil {
		return apperr.Ensure(err, apperr.CodeUnavailable, "could not list the findings of %s", id)
	}
	cursor := ""
	if next > 0 {
		cursor = encodeOffsetCursor(next)
	}
	return c.JSON(http.StatusOK, listOf(list, cursor, FindingToJSON))
}
