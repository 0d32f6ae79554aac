package ops

import (
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/reconcile"
)

// Reconciliation in the console (docs/design.md §11): start a run (a dry
// run unless the operator unticks it), each run's counts and findings —
// per object, what the service held, what Stripe holds, what was done.

type reconcilesData struct {
	Since  string
	Kinds  []string
	Recent []reconcile.Run
}

type reconcileData struct {
	Run      reconcile.Run
	Findings []reconcile.Finding
	More     bool // more findings than shown (the API lists them all)
}

// findingsShown bounds one run's page.
const findingsShown = 500

func (c *Console) registerReconciliations(g *echo.Group) {
	if c.d.Reconciliations == nil {
		return
	}
	g.GET("/reconciliations", c.reconcilesPage, c.auth)
	g.POST("/reconciliations", c.reconcileStart, c.auth)
	g.GET("/reconciliations/:id", c.reconcilePage, c.auth)
}

func (c *Console) showReconciles(ec echo.Context, status int, d reconcilesData, errMsg string) error {
	recent, err := c.d.Reconciliations.Recent(ctxOf(ec), 20)
	if err != nil {
		return c.unavailable(ec, "list the reconciliations", err)
	}
	d.Recent = recent
	if d.Kinds == nil {
		d.Kinds = reconcile.AllKinds
	}
	return c.render(ec, status, "reconciliations", view{Title: "Reconciliation", Nav: "reconciliations", Error: errMsg, Data: d})
}

func (c *Console) reconcilesPage(ec echo.Context) error {
	return c.showReconciles(ec, http.StatusOK, reconcilesData{}, "")
}

// reconcileStart starts a run from the form: a dry run unless "heal" is
// ticked.
func (c *Console) reconcileStart(ec echo.Context) error {
	form, err := ec.FormParams()
	if err != nil {
		return c.fail(ec, http.StatusBadRequest, "The form could not be read.")
	}
	d := reconcilesData{Since: strings.TrimSpace(form.Get("since")), Kinds: form["kind"]}
	req := reconcile.Request{DryRun: form.Get("heal") != "yes", Kinds: d.Kinds}
	if len(req.Kinds) == 0 {
		return c.showReconciles(ec, http.StatusBadRequest, d, "Tick at least one kind of object. Nothing was started.")
	}
	if req.Since, err = reconcile.ParseSince(d.Since); err != nil {
		return c.showReconciles(ec, http.StatusBadRequest, d, reason(err)+". Nothing was started.")
	}
	run, err := c.d.Reconciliations.Start(ctxOf(ec), req, ConsoleActor)
	if errors.Is(err, apperr.ErrInvalid) {
		return c.showReconciles(ec, statusOf(err), d, reason(err)+". Nothing was started.")
	}
	if err != nil {
		return c.unavailable(ec, "start the reconciliation", err)
	}
	c.d.Log.Info("console reconciliation", "reconciliation", run.ID, "dry_run", run.DryRun, "matched", run.Matched)
	if c.d.ReconcileNudge != nil {
		c.d.ReconcileNudge()
	}
	return ec.Redirect(http.StatusSeeOther, Prefix+"/reconciliations/"+run.ID)
}

func (c *Console) reconcilePage(ec echo.Context) error {
	id := ec.Param("id")
	if !reconcile.IDPattern.MatchString(id) {
		return c.fail(ec, http.StatusBadRequest, "That is not a reconciliation id.")
	}
	ctx := ctxOf(ec)
	run, err := c.d.Reconciliations.Get(ctx, id)
	if errors.Is(err, apperr.ErrNotFound) {
		return c.refused(ec, err, "No reconciliation "+id+".")
	}
	if err != nil {
		return c.unavailable(ec, "read the reconciliation", err)
	}
	findings, next, err := c.d.Reconciliations.Findings(ctx, id, 0, findingsShown)
	if err != nil {
		return c.unavailable(ec, "list the findings", err)
	}
	if run.Status == reconcile.StatusRunning {
		ec.Response().Header().Set("Refresh", "2")
	}
	return c.render(ec, http.StatusOK, "reconciliation", view{Title: "Reconciliation " + id, Nav: "reconciliations",
		Data: reconcileData{Run: run, Findings: findings, More: next > 0}})
}
