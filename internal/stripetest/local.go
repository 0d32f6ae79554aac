package stripetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// The routes the local Stripe (cmd/stripe-local) needs beyond the tests'
// calls: connected accounts, customers, the client's confirm of a
// PaymentIntent (as Stripe.js would), and, with TestCards, payments that
// follow Stripe's test payment method ids (testcards.go).

// localRoute answers req when it is one of these routes; f.mu is held.
func (f *Stripe) localRoute(req Request) (reply, bool) {
	parts := strings.Split(strings.Trim(req.Path, "/"), "/")
	if len(parts) < 2 || parts[0] != "v1" {
		return reply{}, false
	}
	now := f.now().Unix()
	acct, form := req.StripeAccount, req.Form
	post, get := req.Method == http.MethodPost, req.Method == http.MethodGet
	switch {
	case post && len(parts) == 2 && parts[1] == "accounts":
		if acct != "" {
			return reply{400, errBody("invalid_request_error", "", "Connected accounts cannot create accounts: send this request without Stripe-Account.", nil)}, true
		}
		typ := form.Get("type")
		if typ == "" {
			typ = "custom"
		}
		return f.store("account", "", Account(newID("acct_"), typ, form.Get("email"), now)), true
	case get && len(parts) == 3 && parts[1] == "accounts":
		obj, ok := f.get("", parts[2])
		if !ok || obj["object"] != "account" {
			return notFound(parts[2]), true
		}
		if f.deauthorized[parts[2]] { // DashboardChange: the account disconnected the platform
			return reply{403, errBody("invalid_request_error", "account_invalid", "The provided key does not have access to account '"+
				parts[2]+"' (or that account does not exist). Application access may have been revoked.", nil)}, true
		}
		return f.json(obj), true
	case post && len(parts) == 2 && parts[1] == "customers":
		cus := map[string]any{"id": newID("cus_"), "object": "customer", "email": nilIfEmpty(form.Get("email")),
			"name": nilIfEmpty(form.Get("name")), "metadata": metadata(form), "created": now, "livemode": false,
			"invoice_settings": map[string]any{"default_payment_method": nilIfEmpty(form.Get("invoice_settings[default_payment_method]"))}}
		return f.store("customer", acct, cus), true
	case get && len(parts) == 3 && parts[1] == "customers":
		obj, ok := f.get(acct, parts[2])
		if !ok || obj["object"] != "customer" {
			return notFound(parts[2]), true
		}
		return f.json(obj), true
	case post && len(parts) == 4 && parts[1] == "payment_intents" && parts[3] == "confirm":
		return f.confirm(acct, parts[2], form.Get("payment_method")), true
	case f.TestCards && post && len(parts) == 4 && parts[1] == "invoices" && parts[3] == "pay":
		return f.payInvoice(acct, parts[2], form.Get("payment_method"))
	case f.TestCards && post && len(parts) == 2 && parts[1] == "subscriptions":
		if o := TestPaymentMethod(form.Get("default_payment_method")); o.Behavior == Decline {
			return cardErrorReply(o.Error, nil), true // error_if_incomplete: nothing is created
		}
	}
	return reply{}, false
}

// Account is a connected account as Stripe renders it.
func Account(id, typ, email string, created int64) map[string]any {
	return map[string]any{"id": id, "object": "account", "type": typ, "email": nilIfEmpty(email), "country": "US",
		"default_currency": "usd", "charges_enabled": true, "payouts_enabled": true, "details_submitted": true,
		"created": created, "livemode": false, "metadata": map[string]any{}}
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func cardErrorReply(ce CardError, pi map[string]any) reply {
	extra := map[string]any{"decline_code": ce.DeclineCode}
	if pi != nil {
		extra["payment_intent"] = pi
	}
	return reply{http.StatusPaymentRequired, errBody("card_error", ce.Code, ce.Message, extra)}
}

func lastPaymentError(ce CardError) map[string]any {
	return map[string]any{"type": "card_error", "code": ce.Code, "decline_code": ce.DeclineCode, "message": ce.Message}
}

// outcome is what paying with pm does: TestPaymentMethod with TestCards,
// else success.
func (f *Stripe) outcome(pm string) PaymentMethodOutcome {
	if !f.TestCards {
		return PaymentMethodOutcome{Behavior: Succeed}
	}
	return TestPaymentMethod(pm)
}

// confirm is POST /v1/payment_intents/{id}/confirm on an unconfirmed
// PaymentIntent (the purchase API's legacy one); f.mu is held.
func (f *Stripe) confirm(acct, id, pm string) reply {
	pi, ok := f.get(acct, id)
	if !ok || pi["object"] != "payment_intent" {
		return notFound(id)
	}
	if pm == "" {
		pm, _ = pi["payment_method"].(string)
	}
	if pm == "" {
		return reply{400, errBody("invalid_request_error", "payment_intent_unexpected_state",
			"You cannot confirm this PaymentIntent because it's missing a payment method.", nil)}
	}
	if st := pi["status"]; st != "requires_payment_method" && st != "requires_confirmation" {
		return reply{400, errBody("invalid_request_error", "payment_intent_unexpected_state",
			fmt.Sprintf("This PaymentIntent's status is %s, so it cannot be confirmed.", st), nil)}
	}
	f.paymentIntentPaid(pi, pm)
	if pi["status"] == "requires_payment_method" {
		return cardErrorReply(f.outcome(pm).Error, pi)
	}
	return f.json(pi)
}

// paymentIntentPaid applies paying with pm to a stored PaymentIntent;
// f.mu is held.
func (f *Stripe) paymentIntentPaid(pi map[string]any, pm string) {
	o := f.outcome(pm)
	pi["payment_method"] = pm
	pi["last_payment_error"] = nil
	switch o.Behavior {
	case Decline:
		pi["status"] = "requires_payment_method"
		pi["last_payment_error"] = lastPaymentError(o.Error)
	case Process:
		pi["status"] = "processing"
	default:
		pi["status"] = "succeeded"
		pi["latest_charge"] = "ch_" + strings.TrimPrefix(pi["id"].(string), "pi_")
	}
}

// payInvoice is POST /v1/invoices/{id}/pay with TestCards: a decline is a
// 402 and the invoice stays open; a bank debit leaves it open with its
// PaymentIntent processing; a success is the plain route's. f.mu is held.
func (f *Stripe) payInvoice(acct, id, pm string) (reply, bool) {
	inv, ok := f.get(acct, id)
	if !ok || inv["status"] != "open" {
		return reply{}, false
	}
	if pm == "" {
		pm, _ = inv["default_payment_method"].(string)
	}
	o := f.outcome(pm)
	if o.Behavior == Succeed {
		return reply{}, false
	}
	piID, _ := inv["payment_intent"].(string)
	pi := f.objects[piID]
	if pi != nil {
		f.paymentIntentPaid(pi, pm)
	}
	if o.Behavior == Decline {
		return cardErrorReply(o.Error, pi), true
	}
	return f.json(inv), true
}

// SettleObject ends a processing PaymentIntent the purchase API created
// (an invoice's, or a confirmed legacy one): succeeded (its invoice paid)
// or failed with ce. It returns the PaymentIntent and its invoice (nil if
// none).
func (f *Stripe) SettleObject(id string, ok bool, ce CardError) (pi, invoice map[string]any, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	obj := f.objects[id]
	if obj == nil || obj["object"] != "payment_intent" || obj["status"] != "processing" {
		return nil, nil, fmt.Errorf("%s is not a processing PaymentIntent", id)
	}
	if ok {
		obj["status"] = "succeeded"
		obj["latest_charge"] = "ch_" + strings.TrimPrefix(id, "pi_")
	} else {
		obj["status"] = "requires_payment_method"
		obj["last_payment_error"] = lastPaymentError(ce)
	}
	var inv map[string]any
	if invID, _ := obj["invoice"].(string); invID != "" {
		if inv = f.objects[invID]; inv != nil && ok {
			inv["status"], inv["paid"] = "paid", true
		}
	}
	return deepCopy(obj), deepCopy(inv), nil
}

// PaymentIntent returns a PaymentIntent of either kind (a confirmed charge
// or a purchase's) as Stripe renders it, with its account.
func (f *Stripe) PaymentIntent(id string) (obj map[string]any, account string, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, found := f.charges.pis[id]; found {
		return p.JSON(), p.Account, true
	}
	o, found := f.objects[id]
	if !found || o["object"] != "payment_intent" {
		return nil, "", false
	}
	return deepCopy(o), f.owner[id], true
}

func deepCopy(obj map[string]any) map[string]any {
	if obj == nil {
		return nil
	}
	b, _ := json.Marshal(obj)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}
