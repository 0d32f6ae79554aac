package ops

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/trigger"
	"github.com/stripe-payments/stripe-payments/internal/opsdata"
)

// Billing ids: accounts are the merchant's ids (any short token), and
// subscriptions the billing core's.
var billingIDPattern = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

// searchBy are the ways the billing page finds subscriptions.
var searchBy = []struct{ Value, Label string }{
	{"account", "Account id"}, {"subscription", "Subscription id"}, {"customer", "Stripe customer"}, {"email", "Email"},
}

var (
	customerPattern = regexp.MustCompile(`^[A-Za-z0-9_]{1,255}$`)
	emailPattern    = regexp.MustCompile(`^[^\s@]{1,64}@[^\s@]{1,190}$`)
)

type billingData struct {
	By, Q    string
	SearchBy []struct{ Value, Label string }
	Runs     []opsdata.Run
	// Found: the subscriptions the search found (Searched: it ran).
	Found    []billing.Subscription
	Searched bool
}

// billingSearch opens an account, or finds subscriptions by id, Stripe
// customer or email in any account (through the billing core's lookups).
func (c *Console) billingSearch(ec echo.Context) error {
	ctx := ctxOf(ec)
	d := billingData{SearchBy: searchBy, By: ec.QueryParam("by"), Q: strings.TrimSpace(ec.QueryParam("q"))}
	if acct := strings.TrimSpace(ec.QueryParam("account")); acct != "" { // the older form's field
		d.By, d.Q = "account", acct
	}
	if d.By == "" {
		d.By = "account"
	}
	runs, err := c.d.Runs.Last(ctx, 5)
	if err != nil {
		return c.unavailable(ec, "read the billing runs", err)
	}
	d.Runs = runs
	v := view{Title: "Billing", Nav: "billing", Data: &d}
	if d.Q == "" {
		return c.render(ec, http.StatusOK, "billing", v)
	}
	var by billing.LookupBy
	switch d.By {
	case "account":
		if !billingIDPattern.MatchString(d.Q) {
			v.Error = "An account id is letters, digits and _ . : - (at most 128)."
			return c.render(ec, http.StatusBadRequest, "billing", v)
		}
		return ec.Redirect(http.StatusSeeOther, Prefix+"/billing/"+url.PathEscape(d.Q))
	case "subscription":
		if !billingIDPattern.MatchString(d.Q) {
			v.Error = "A subscription id is letters, digits and _ . : - (at most 128)."
			return c.render(ec, http.StatusBadRequest, "billing", v)
		}
		by = billing.BySubscription
	case "customer":
		if !customerPattern.MatchString(d.Q) {
			v.Error = "A Stripe customer id looks like cus_… (letters, digits and _)."
			return c.render(ec, http.StatusBadRequest, "billing", v)
		}
		by = billing.ByCustomer
	case "email":
		if !emailPattern.MatchString(d.Q) {
			v.Error = "That is not an email address."
			return c.render(ec, http.StatusBadRequest, "billing", v)
		}
		by = billing.ByEmail
	default:
		v.Error = "Search by account, subscription, customer or email."
		return c.render(ec, http.StatusBadRequest, "billing", v)
	}
	found, err := c.d.Billing.FindSubscriptions(ctx, by, d.Q, PageSize)
	if err != nil {
		return c.unavailable(ec, "search the subscriptions", err)
	}
	if by == billing.BySubscription && len(found) == 1 {
		return ec.Redirect(http.StatusSeeOther, subPath(found[0]))
	}
	d.Found, d.Searched = found, true
	return c.render(ec, http.StatusOK, "billing", v)
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
	// InFlight: the account's attempts whose outcome is unknown, by
	// subscription id (a pointer, so that a subscription without one finds
	// nil, which a template's with skips: a zero struct would not be).
	InFlight map[string]*inFlight
	Unknown  []inFlight
	// Unpaid: each subscription's unpaid periods (ERROR, STALE), so a
	// subscription that has not paid for months does not read as a plain
	// ACTIVE.
	Unpaid map[string]*unpaid
	// Triggers: the platform's latest triggers for the account and what
	// each did (docs/design.md §8).
	Triggers []trigger.Record
}

// TriggerLister lists an account's platform triggers, newest first
// (trigger.Store).
type TriggerLister interface {
	ForAccount(ctx context.Context, account string, n int) ([]trigger.Record, error)
}

// accountTriggers is how many of an account's triggers its page shows.
const accountTriggers = 20

// unpaid counts a subscription's periods left unpaid, by status.
type unpaid struct {
	Error, Stale int
	Oldest       string // the oldest unpaid period's billing date
}

// inFlight is a collection attempt without a recorded outcome, as the
// console shows it: every change of its subscription is refused (409)
// until the next collection asks Stripe what became of it.
type inFlight struct {
	SubscriptionID string
	BillingDate    string
	Attempt        int
	Since          time.Time
	Key            string
	Href           string
}

func inFlightOf(p billing.Period) inFlight {
	return inFlight{SubscriptionID: p.SubscriptionID, BillingDate: p.BillingDate.String(), Attempt: p.Attempts + 1,
		Since: p.InFlightAt, Key: p.InFlightKey,
		Href: Prefix + "/billing/" + url.PathEscape(p.AccountID) + "/" + url.PathEscape(p.SubscriptionID)}
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
	if errors.Is(err, apperr.ErrInvalid) { // a cursor the listing did not issue
		return c.refused(ec, err, "That page link is not valid; open the account again.")
	}
	if err != nil {
		return c.unavailable(ec, "read the account's billing", err)
	}
	d.Subscriptions = subs.Items
	watch, err := c.d.Billing.PeriodsToWatch(ctx, d.Account)
	if err != nil {
		return c.unavailable(ec, "read the account's attempts in flight and unpaid periods", err)
	}
	d.InFlight = map[string]*inFlight{}
	for _, p := range watch.InFlight {
		f := inFlightOf(p)
		d.InFlight[p.SubscriptionID] = &f
		d.Unknown = append(d.Unknown, f)
	}
	d.Unpaid = map[string]*unpaid{}
	for _, p := range watch.Unpaid {
		u := d.Unpaid[p.SubscriptionID]
		if u == nil {
			u = &unpaid{}
			d.Unpaid[p.SubscriptionID] = u
		}
		if p.Status == billing.Stale {
			u.Stale++
		} else {
			u.Error++
		}
		if date := p.BillingDate.String(); u.Oldest == "" || date < u.Oldest {
			u.Oldest = date
		}
	}
	if subs.NextCursor != "" {
		d.NextSubs = Prefix + "/billing/" + url.PathEscape(d.Account) + "?" + url.Values{"subs": {subs.NextCursor}}.Encode()
	}
	if c.d.Triggers != nil {
		if d.Triggers, err = c.d.Triggers.ForAccount(ctx, d.Account, accountTriggers); err != nil {
			return c.unavailable(ec, "read the account's platform triggers", err)
		}
	}
	return c.render(ec, http.StatusOK, "account", view{Title: "Account " + d.Account, Nav: "billing", Data: d})
}

type subscriptionData struct {
	Sub     billing.Subscription
	Periods []billing.Period // a page, newest first
	// MorePeriods links the next (older) page of periods, FirstPeriods the
	// newest ("": none).
	MorePeriods  string
	FirstPeriods string
	History      []historyEntry
	Newer        string // link to the page of newer history ("": this is the newest)
	Older        string // link to the page of older history
	Waivable     []billing.Period
	// Unpaid: a period is in ERROR, so pay now has something to charge.
	Unpaid bool
	// InFlight: attempts whose outcome is unknown; while there is one,
	// every action is refused, so none is offered.
	InFlight []inFlight
}

// historyEntry is a history entry with what changed, in words.
type historyEntry struct {
	billing.HistoryEntry
	Change string
}

func (c *Console) billingSubscription(ec echo.Context) error {
	ids, ok := c.billingIDs(ec, "account", "sub")
	if !ok {
		return c.fail(ec, http.StatusBadRequest, "Not an account or subscription id.")
	}
	page := 0
	if p := ec.QueryParam("page"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return c.fail(ec, http.StatusBadRequest, "That page link is not valid; open the subscription again.")
		}
		page = n
	}
	ctx := ctxOf(ec)
	sub, err := c.d.Billing.GetSubscription(ctx, ids[0], ids[1])
	if isNotFound(err) {
		return c.refused(ec, err, "No subscription "+ids[1]+" on account "+ids[0]+".")
	}
	if err != nil {
		return c.unavailable(ec, "read the subscription", err)
	}
	d := subscriptionData{Sub: sub}
	// The periods a page at a time, newest first, like every list here: a
	// subscription billed for years has hundreds.
	periodsCursor := ec.QueryParam("periods")
	periods, err := c.d.Billing.PeriodsPage(ctx, ids[0], ids[1], PageSize, periodsCursor)
	if errors.Is(err, apperr.ErrInvalid) {
		return c.fail(ec, http.StatusBadRequest, "That page link is not valid; open the subscription again.")
	}
	if err != nil {
		return c.unavailable(ec, "read the periods", err)
	}
	d.Periods = periods.Items
	if periods.NextCursor != "" {
		d.MorePeriods = subPath(sub) + "?" + url.Values{"periods": {periods.NextCursor}}.Encode() + "#per-h"
	}
	if periodsCursor != "" {
		d.FirstPeriods = subPath(sub) + "#per-h"
	}
	// What the actions need, whatever page is shown: the periods still
	// open (waive, pay now) and the attempts in flight (every action
	// refused), at most a page of them.
	open, err := c.d.Billing.OpenPeriods(ctx, ids[0], ids[1], PageSize)
	if err != nil {
		return c.unavailable(ec, "read the periods", err)
	}
	slices.Reverse(open) // newest first, as the periods
	for _, p := range open {
		if p.InFlightKey != "" {
			d.InFlight = append(d.InFlight, inFlightOf(p))
		}
		if p.Status == billing.Scheduled || p.Status == billing.Error {
			d.Waivable = append(d.Waivable, p)
		}
		d.Unpaid = d.Unpaid || p.Status == billing.Error
	}
	hist, err := c.d.Billing.HistoryNewestFirst(ctx, ids[0], ids[1])
	if err != nil {
		return c.unavailable(ec, "read the history", err)
	}
	// Newest first, a page at a time: "Older history" leads to older
	// entries, "Newer history" back.
	from := page * PageSize
	if from > len(hist) {
		from = len(hist)
	}
	to := min(from+PageSize, len(hist))
	for _, e := range hist[from:to] {
		d.History = append(d.History, historyEntry{HistoryEntry: e, Change: describeChange(e, sub.Currency)})
	}
	if to < len(hist) {
		d.Older = subPath(sub) + "?" + url.Values{"page": {strconv.Itoa(page + 1)}}.Encode() + "#hist-h"
	}
	if page > 0 {
		d.Newer = subPath(sub) + "?" + url.Values{"page": {strconv.Itoa(page - 1)}}.Encode() + "#hist-h"
	}
	return c.render(ec, http.StatusOK, "subscription", view{Title: "Subscription " + sub.SubscriptionID, Nav: "billing", Notice: noticeOf(ec), Data: d})
}

// describeChange says in words what a history entry changed, from the
// cause the billing core records (updated_event) and the period's status.
func describeChange(e billing.HistoryEntry, currency string) string {
	ev := e.UpdatedEvent
	switch {
	case ev == "created":
		return "scheduled (subscription created)"
	case ev == "paused":
		return "paused"
	case ev == "resumed":
		return "resumed"
	case ev == "pause-skipped":
		return "skipped (paused)"
	case ev == "cancelled":
		return "cancelled"
	case ev == "waived":
		return "waived"
	case ev == "amount-changed":
		return "amount changed to " + money(e.Amount, currency)
	case ev == "payment-method-changed":
		return "payment method changed"
	case strings.HasPrefix(ev, "rule-changed-to-"):
		return "rule changed: period moved to " + strings.TrimPrefix(ev, "rule-changed-to-")
	case strings.HasPrefix(ev, "rule-changed"):
		return "rule changed"
	case strings.HasPrefix(ev, "charge-date-moved-to-"):
		return "charge date moved to " + strings.TrimPrefix(ev, "charge-date-moved-to-")
	case strings.HasPrefix(ev, "plan-changed") || strings.HasPrefix(ev, "sku-changed"):
		return "plan changed"
	case ev == billing.UpdatedEventReactivated:
		return "reactivated"
	case ev == billing.UpdatedEventDuplicateRefunded:
		return "duplicate charge refunded"
	case ev == "attempt-lost":
		return "attempt lost (Stripe never made it)"
	case ev == billing.ErasureEvent:
		return "personal data erased"
	case ev == billing.UpdatedEventLatePayment, strings.HasPrefix(ev, "late-success"): // the latter: rows before 2026-11-28
		return "paid (late success)"
	}
	switch e.Status {
	case billing.Completed:
		return "paid"
	case billing.ACHSent:
		return "submitted (bank debit processing)"
	case billing.Error:
		if strings.HasPrefix(e.Error, "not retried: ") {
			code, _, _ := strings.Cut(strings.TrimPrefix(e.Error, "not retried: "), " ")
			return "declined, not retried: " + code
		}
		if e.Attempts > 0 {
			return "declined (attempt " + strconv.Itoa(e.Attempts) + ")"
		}
		return "failed"
	case billing.Refunded:
		return "refunded"
	case billing.Stale:
		return "stale: no longer collected"
	}
	if ev != "" {
		return strings.ReplaceAll(ev, "-", " ")
	}
	return strings.ToLower(string(e.Status))
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
		return c.refused(ec, err, "No subscription "+ids[1]+" on account "+ids[0]+".")
	}
	if err != nil {
		return c.unavailable(ec, "read the subscription", err)
	}
	if f, err := c.firstInFlight(ec, sub); err != nil {
		return c.unavailable(ec, "read the periods", err)
	} else if f != nil {
		return c.fail(ec, http.StatusConflict, refusedInFlight(*f))
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
		return c.refused(ec, err, "Nothing to pay: no period of this subscription is in ERROR. Nothing was charged.")
	case errors.Is(err, billing.ErrAttemptInFlight):
		if f := c.inFlightNow(ec, ids[0], ids[1]); f != nil {
			return c.refused(ec, err, refusedInFlight(*f))
		}
		return c.refused(ec, err, "A payment attempt of this subscription has no recorded outcome yet; the collection job settles it first. Nothing was charged.")
	case err == nil:
		c.d.Log.Info("console billing change", "account_id", ids[0], "subscription_id", ids[1], "action", a.Name)
		return ec.Redirect(http.StatusSeeOther, subPath(sub)+"?done="+a.Name)
	case isNotFound(err):
		return c.refused(ec, err, "No such subscription or period; nothing was changed.")
	case errors.Is(err, apperr.ErrInvalid):
		// 409, not statusOf's 400: the console's form offers only valid
		// values, so what billing refuses here is the subscription's state
		// (the page was older than the change).
		return c.fail(ec, http.StatusConflict, "Refused: "+reason(err)+". Nothing was changed.")
	case errors.Is(err, billing.ErrConflict) && c.inFlightNow(ec, ids[0], ids[1]) != nil:
		return c.refused(ec, err, refusedInFlight(*c.inFlightNow(ec, ids[0], ids[1])))
	case errors.Is(err, billing.ErrLocked), errors.Is(err, billing.ErrConflict):
		return c.refused(ec, err, "The account is being billed right now, or changed meanwhile; nothing was changed. Try again in a minute.")
	default:
		return c.unavailable(ec, "change the subscription", err)
	}
}

func money(amount int64, currency string) string {
	return strings.TrimSpace(fmt.Sprintf("%d.%02d %s", amount/100, amount%100, strings.ToUpper(currency)))
}

// firstInFlight is sub's attempt whose outcome is unknown, if any.
func (c *Console) firstInFlight(ec echo.Context, sub billing.Subscription) (*inFlight, error) {
	periods, err := c.d.Billing.OpenPeriods(ctxOf(ec), sub.AccountID, sub.SubscriptionID, PageSize)
	if err != nil {
		return nil, err
	}
	for _, p := range periods {
		if p.InFlightKey != "" {
			f := inFlightOf(p)
			return &f, nil
		}
	}
	return nil, nil
}

// inFlightNow is firstInFlight for a refused change (nil when it cannot be
// read: the generic message stands).
func (c *Console) inFlightNow(ec echo.Context, account, subID string) *inFlight {
	f, err := c.firstInFlight(ec, billing.Subscription{AccountID: account, SubscriptionID: subID})
	if err != nil {
		return nil
	}
	return f
}

// refusedInFlight says why a change is refused while an attempt is in
// flight.
func refusedInFlight(f inFlight) string {
	return fmt.Sprintf("Refused: attempt %d on the period of %s has an unknown outcome (since %s, idempotency key %s). "+
		"The next collection asks Stripe first; until then no change is made. Nothing was changed.",
		f.Attempt, f.BillingDate, f.Since.UTC().Format("2006-01-02 15:04:05 UTC"), f.Key)
}
