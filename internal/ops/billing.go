package ops

import (
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// Billing ids: accounts are the merchant's ids (any short token), and
// subscriptions the billing core's.
var billingIDPattern = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

func (c *Console) billingSearch(ec echo.Context) error {
	if acct := strings.TrimSpace(ec.QueryParam("account")); acct != "" {
		if !billingIDPattern.MatchString(acct) {
			return c.render(ec, http.StatusBadRequest, "billing", view{Title: "Billing", Nav: "billing", Error: "An account id is letters, digits and _ . : - (at most 128)."})
		}
		return ec.Redirect(http.StatusSeeOther, Prefix+"/billing/"+url.PathEscape(acct))
	}
	runs, err := c.d.Runs.Last(ctxOf(ec), 5)
	if err != nil {
		return c.unavailable(ec, "read the billing runs", err)
	}
	return c.render(ec, http.StatusOK, "billing", view{Title: "Billing", Nav: "billing", Data: runs})
}

func (c *Console) billingIDs(ec echo.Context, names ...string) ([]string, bool) {
	var out []string
	for _, n := range names {
		v := ec.Param(n)
		if !billingIDPattern.MatchString(v) {
			return nil, false
		}
		out = append(out, v)
	}
	return out, true
}

type accountData struct {
	Account       string
	Subscriptions []billing.Subscription
	Receipts      []billing.Receipt
	NextSubs      string
	NextReceipts  string
}

func (c *Console) billingAccount(ec echo.Context) error {
	ids, ok := c.billingIDs(ec, "account")
	if !ok {
		return c.fail(ec, http.StatusBadRequest, "Not an account id.")
	}
	ctx := ctxOf(ec)
	d := accountData{Account: ids[0]}
	subs, err := c.d.Billing.ListSubscriptions(ctx, d.Account, PageSize, ec.QueryParam("subs"))
	if err == nil {
		var receipts billing.Page[billing.Receipt]
		receipts, err = c.d.Billing.ListReceipts(ctx, d.Account, PageSize, ec.QueryParam("receipts"))
		d.Receipts = receipts.Items
		if receipts.NextCursor != "" {
			d.NextReceipts = Prefix + "/billing/" + url.PathEscape(d.Account) + "?" + url.Values{"receipts": {receipts.NextCursor}}.Encode()
		}
	}
	if errors.Is(err, billing.ErrInvalidCursor) {
		return c.fail(ec, http.StatusBadRequest, "That page link is not valid; open the account again.")
	}
	if err != nil {
		return c.unavailable(ec, "read the account's billing", err)
	}
	d.Subscriptions = subs.Items
	if subs.NextCursor != "" {
		d.NextSubs = Prefix + "/billing/" + url.PathEscape(d.Account) + "?" + url.Values{"subs": {subs.NextCursor}}.Encode()
	}
	return c.render(ec, http.StatusOK, "account", view{Title: "Account " + d.Account, Nav: "billing", Data: d})
}

type subscriptionData struct {
	Sub      billing.Subscription
	Periods  []billing.Period
	History  []billing.HistoryEntry
	Next     string
	Waivable []billing.Period
	// Unpaid: a period is in ERROR, so pay now has something to charge.
	Unpaid bool
}

func (c *Console) billingSubscription(ec echo.Context) error {
	ids, ok := c.billingIDs(ec, "account", "sub")
	if !ok {
		return c.fail(ec, http.StatusBadRequest, "Not an account or subscription id.")
	}
	ctx := ctxOf(ec)
	sub, err := c.d.Billing.GetSubscription(ctx, ids[0], ids[1])
	if isNotFound(err) {
		return c.fail(ec, http.StatusNotFound, "No subscription "+ids[1]+" on account "+ids[0]+".")
	}
	if err != nil {
		return c.unavailable(ec, "read the subscription", err)
	}
	d := subscriptionData{Sub: sub}
	if d.Periods, err = c.d.Billing.Store().ListPeriods(ctx, ids[0], ids[1]); err != nil {
		return c.unavailable(ec, "read the periods", err)
	}
	sort.Slice(d.Periods, func(i, j int) bool { return d.Periods[i].BillingDate.After(d.Periods[j].BillingDate) })
	for _, p := range d.Periods {
		if p.Status == billing.Scheduled || p.Status == billing.Error {
			d.Waivable = append(d.Waivable, p)
		}
		d.Unpaid = d.Unpaid || p.Status == billing.Error
	}
	hist, err := c.d.Billing.ListHistory(ctx, ids[0], ids[1], PageSize, ec.QueryParam("cursor"))
	if errors.Is(err, billing.ErrInvalidCursor) {
		return c.fail(ec, http.StatusBadRequest, "That page link is not valid; open the subscription again.")
	}
	if err != nil {
		return c.unavailable(ec, "read the history", err)
	}
	d.History = hist.Items
	// The store pages history by period; the timeline reads in time order.
	sort.SliceStable(d.History, func(i, j int) bool { return d.History[i].LastRunDate.Before(d.History[j].LastRunDate) })
	if hist.NextCursor != "" {
		d.Next = subPath(sub) + "?" + url.Values{"cursor": {hist.NextCursor}}.Encode()
	}
	return c.render(ec, http.StatusOK, "subscription", view{Title: "Subscription " + sub.SubscriptionID, Nav: "billing", Notice: noticeOf(ec), Data: d})
}

func subPath(s billing.Subscription) string {
	return Prefix + "/billing/" + url.PathEscape(s.AccountID) + "/" + url.PathEscape(s.SubscriptionID)
}

// action is one change an operator asks for, read from a query or a form.
type action struct {
	Name        string
	Months      int
	BillingDate string
}

func readAction(get func(string) string) (action, string) {
	a := action{Name: get("action")}
	switch a.Name {
	case "pause":
		m, err := strconv.Atoi(get("months"))
		if err != nil || m < 1 || m > 24 {
			return a, "Pause for 1 to 24 months."
		}
		a.Months = m
	case "resume", "cancel", "pay":
	case "waive":
		if _, err := dates.Parse(get("billing_date")); err != nil {
			return a, "Choose the period to waive."
		}
		a.BillingDate = get("billing_date")
	default:
		return a, "Unknown action."
	}
	return a, ""
}

// Describe says what the action does, for the confirmation page.
func (a action) Describe() string {
	switch a.Name {
	case "pause":
		return "Pause billing for " + strconv.Itoa(a.Months) + " month(s): the periods in the window are skipped, then billing resumes by itself."
	case "resume":
		return "Resume billing now: the next period is scheduled from today."
	case "cancel":
		return "Cancel the subscription: no period is charged again. This cannot be undone."
	case "waive":
		return "Waive the period of " + a.BillingDate + ": it is forgiven and never charged."
	case "pay":
		return "Pay now: charge the oldest unpaid (ERROR) period at once on the saved payment method, as a manual repayment."
	}
	return ""
}

type confirmData struct {
	Sub    billing.Subscription
	Action action
}

// billingConfirm asks before a change: every billing action is a GET to this
// page, then a POST of its form.
func (c *Console) billingConfirm(ec echo.Context) error {
	ids, ok := c.billingIDs(ec, "account", "sub")
	if !ok {
		return c.fail(ec, http.StatusBadRequest, "Not an account or subscription id.")
	}
	a, msg := readAction(ec.QueryParam)
	if msg != "" {
		return c.fail(ec, http.StatusBadRequest, msg)
	}
	sub, err := c.d.Billing.GetSubscription(ctxOf(ec), ids[0], ids[1])
	if isNotFound(err) {
		return c.fail(ec, http.StatusNotFound, "No subscription "+ids[1]+" on account "+ids[0]+".")
	}
	if err != nil {
		return c.unavailable(ec, "read the subscription", err)
	}
	return c.render(ec, http.StatusOK, "confirm", view{Title: "Confirm " + a.Name, Nav: "billing", Data: confirmData{Sub: sub, Action: a}})
}

func (c *Console) billingAction(ec echo.Context) error {
	ids, ok := c.billingIDs(ec, "account", "sub")
	if !ok {
		return c.fail(ec, http.StatusBadRequest, "Not an account or subscription id.")
	}
	a, msg := readAction(ec.Request().PostFormValue)
	if msg != "" {
		return c.fail(ec, http.StatusBadRequest, msg+" Nothing was changed.")
	}
	var (
		sub billing.Subscription
		err error
	)
	if a.Name == "pay" {
		var p billing.Period
		sub, p, err = c.d.Billing.Pay(ctxOf(ec), ids[0], ids[1])
		if err == nil {
			c.d.Log.Info("console pay now", "account_id", ids[0], "subscription_id", ids[1], "billing_date", p.BillingDate.String(), "status", string(p.Status))
			return ec.Redirect(http.StatusSeeOther, subPath(sub)+"?"+url.Values{"done": {"pay"}, "status": {string(p.Status)}}.Encode())
		}
	} else {
		ch := billing.Change{Action: a.Name, Months: a.Months, Cause: "ops:" + randomID()[:8]}
		if a.Name == "waive" {
			ch.BillingDate = dates.MustParse(a.BillingDate)
		}
		sub, err = c.d.Billing.UpdateSubscription(ctxOf(ec), ids[0], ids[1], ch)
	}
	switch {
	case errors.Is(err, billing.ErrNothingToPay):
		return c.fail(ec, http.StatusConflict, "Nothing to pay: no period of this subscription is in ERROR. Nothing was charged.")
	case errors.Is(err, billing.ErrAttemptInFlight):
		return c.fail(ec, http.StatusConflict, "A payment attempt of this subscription has no recorded outcome yet; the collection job settles it first. Nothing was charged.")
	case err == nil:
		c.d.Log.Info("console billing change", "account_id", ids[0], "subscription_id", ids[1], "action", a.Name)
		return ec.Redirect(http.StatusSeeOther, subPath(sub)+"?done="+a.Name)
	case isNotFound(err):
		return c.fail(ec, http.StatusNotFound, "No such subscription or period; nothing was changed.")
	case errors.Is(err, billing.ErrInvalid):
		return c.fail(ec, http.StatusConflict, "Refused: "+strings.TrimPrefix(err.Error(), billing.ErrInvalid.Error()+": ")+". Nothing was changed.")
	case errors.Is(err, billing.ErrLocked), errors.Is(err, billing.ErrConflict):
		return c.fail(ec, http.StatusConflict, "The account is being billed right now, or changed meanwhile; nothing was changed. Try again in a minute.")
	default:
		return c.unavailable(ec, "change the subscription", err)
	}
}
