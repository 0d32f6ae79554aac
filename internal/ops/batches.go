package ops

import (
	"errors"
	"net/http"
	"regexp"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/batchrun"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// Batch collection in the console (docs/design.md §8 "Batch collection"): a form
// (accounts and/or a time range of the ERROR periods), a dry run shown
// before the batch is confirmed, the batch's progress, recent batches.

var batchIDRe = regexp.MustCompile(`^bat_[0-9a-f]{24}$`)

type batchesData struct {
	Accounts, Since, Until string
	// Preview is the dry run shown before the batch is confirmed.
	Preview []billing.BatchCandidate
	Charge  int // of Preview, the subscriptions the batch would charge
	Recent  []batchrun.Batch
}

func (c *Console) registerBatches(g *echo.Group) {
	if c.d.Batches == nil {
		return
	}
	g.GET("/batches", c.batchesPage, c.auth)
	g.POST("/batches", c.batchStart, c.auth)
	g.GET("/batches/:id", c.batchPage, c.auth)
}

func (c *Console) showBatches(ec echo.Context, status int, d batchesData, errMsg string) error {
	recent, err := c.d.Batches.Recent(ctxOf(ec), 10)
	if err != nil {
		return c.unavailable(ec, "list the batches", err)
	}
	d.Recent = recent
	return c.render(ec, status, "batches", view{Title: "Batch collection", Nav: "billing", Error: errMsg, Data: d})
}

func (c *Console) batchesPage(ec echo.Context) error {
	return c.showBatches(ec, http.StatusOK, batchesData{Accounts: ec.QueryParam("account")}, "")
}

// readBatchForm reads the form's selection: accounts separated by spaces,
// commas or new lines; dates YYYY-MM-DD.
func readBatchForm(ec echo.Context) (batchesData, billing.BatchSelection, string) {
	d := batchesData{Accounts: strings.TrimSpace(ec.FormValue("accounts")), Since: strings.TrimSpace(ec.FormValue("since")),
		Until: strings.TrimSpace(ec.FormValue("until"))}
	var sel billing.BatchSelection
	for _, a := range strings.FieldsFunc(d.Accounts, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\r' || r == '\t' }) {
		if !billingIDPattern.MatchString(a) {
			return d, sel, "An account id is letters, digits and _ . : - (at most 128)."
		}
		sel.AccountIDs = append(sel.AccountIDs, a)
	}
	for _, f := range []struct {
		raw, name string
		dst       *dates.Date
	}{{d.Since, "From", &sel.Since}, {d.Until, "Until", &sel.Until}} {
		if f.raw == "" {
			continue
		}
		v, err := dates.Parse(f.raw)
		if err != nil {
			return d, sel, f.name + " is a date (YYYY-MM-DD)."
		}
		*f.dst = v
	}
	if err := sel.Validate(); err != nil {
		return d, sel, "Refused: " + reason(err) + "."
	}
	return d, sel, ""
}

// batchStart is the two steps of a batch: without confirm, a dry run shown
// on the page; with confirm, the batch starts.
func (c *Console) batchStart(ec echo.Context) error {
	d, sel, msg := readBatchForm(ec)
	if msg != "" {
		return c.showBatches(ec, http.StatusBadRequest, d, msg+" Nothing was charged.")
	}
	ctx := ctxOf(ec)
	if ec.FormValue("confirm") != "yes" {
		cands, err := c.d.Batches.DryRun(ctx, sel)
		if errors.Is(err, apperr.ErrInvalid) {
			return c.showBatches(ec, statusOf(err), d, selectionMessage(err)+" Nothing was charged.")
		}
		if err != nil {
			return c.unavailable(ec, "run the dry run", err)
		}
		d.Preview = cands
		for _, c := range cands {
			if c.Skip == "" {
				d.Charge++
			}
		}
		return c.showBatches(ec, http.StatusOK, d, "")
	}
	b, err := c.d.Batches.Start(ctx, sel, ConsoleActor)
	if errors.Is(err, apperr.ErrInvalid) {
		return c.showBatches(ec, statusOf(err), d, selectionMessage(err)+" Nothing was started.")
	}
	if err != nil {
		return c.unavailable(ec, "start the batch", err)
	}
	c.d.Log.Info("console batch collection", "batch", b.ID, "matched", b.Matched)
	if c.d.BatchNudge != nil {
		c.d.BatchNudge()
	}
	return ec.Redirect(http.StatusSeeOther, Prefix+"/batches/"+b.ID)
}

// selectionMessage is why a selection was refused.
func selectionMessage(err error) string { return apperr.From(err).Message }

func (c *Console) batchPage(ec echo.Context) error {
	id := ec.Param("id")
	if !batchIDRe.MatchString(id) {
		return c.fail(ec, http.StatusBadRequest, "That is not a batch id.")
	}
	b, err := c.d.Batches.Get(ctxOf(ec), id)
	if errors.Is(err, apperr.ErrNotFound) {
		return c.refused(ec, err, "No batch "+id+".")
	}
	if err != nil {
		return c.unavailable(ec, "read the batch", err)
	}
	if b.Status == batchrun.StatusRunning {
		ec.Response().Header().Set("Refresh", "2")
	}
	return c.render(ec, http.StatusOK, "batch", view{Title: "Batch " + id, Nav: "billing", Data: b})
}
