package stripetest

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
)

// A declined charge leaves a PaymentIntent the customer can still pay
// on-session (requires_payment_method, requires_confirmation,
// requires_action). This file is the fake's side of it:
//
//   - POST /v1/payment_intents/{id}/confirm: the customer confirms it (as
//     Stripe.js does on a hosted page): it succeeds, or fails with
//     payment_intent_unexpected_state when it is cancelled or paid;
//   - POST /v1/payment_intents/{id}/cancel: the service cancels it, or is
//     refused with payment_intent_unexpected_state (the PaymentIntent in
//     the error) when it is no longer payable;
//   - POST /v1/refunds (payment_intent=): a full refund of a succeeded
//     PaymentIntent, charge_already_refunded the second time.
//
// The answers of POSTs with an Idempotency-Key are replayed (objects.go),
// as Stripe does. Cancels and Refunds list what was done.

// payableStatus: the customer can still pay a PaymentIntent in it.
func payableStatus(s string) bool {
	return s == "requires_payment_method" || s == "requires_confirmation" || s == "requires_action"
}

// Refunded is one refund the fake made.
type Refunded struct {
	ID             string
	PaymentIntent  string
	Account        string
	Amount         int64
	IdempotencyKey string
}

// payableRoute answers the calls above about the billing core's charges;
// f.mu is held. ok is false for any other call, and for a PaymentIntent
// that is not a charge (the purchase API's objects: local.go, objects.go).
func (f *Stripe) payableRoute(req Request) (reply, bool) {
	parts := strings.Split(strings.Trim(req.Path, "/"), "/")
	switch {
	case req.Method == http.MethodPost && len(parts) == 4 && parts[1] == "payment_intents" && parts[3] == "cancel":
		p, ok := f.charges.pis[parts[2]]
		if !ok {
			return reply{}, false
		}
		if p.Account != req.StripeAccount {
			return notFound(parts[2]), true
		}
		if !payableStatus(p.Status) {
			return unexpectedState(p, "cancel"), true
		}
		p.Status = "canceled"
		f.charges.cancels = append(f.charges.cancels, p.ID)
		return f.json(p.JSON()), true
	case req.Method == http.MethodPost && len(parts) == 4 && parts[1] == "payment_intents" && parts[3] == "confirm":
		p, ok := f.charges.pis[parts[2]]
		if !ok {
			return reply{}, false
		}
		if p.Account != req.StripeAccount {
			return notFound(parts[2]), true
		}
		if !payableStatus(p.Status) {
			return unexpectedState(p, "confirm"), true
		}
		p.Status, p.DeclineCode = "succeeded", ""
		if pm := req.Form.Get("payment_method"); pm != "" {
			p.PaymentMethod = pm
		}
		return f.json(p.JSON()), true
	case req.Method == http.MethodPost && len(parts) == 2 && parts[1] == "refunds":
		id := req.Form.Get("payment_intent")
		p, ok := f.charges.pis[id]
		if !ok {
			return reply{}, false
		}
		if p.Account != req.StripeAccount {
			return notFound(id), true
		}
		if p.Refunded {
			return reply{400, errBody("invalid_request_error", "charge_already_refunded",
				"Charge ch_"+strings.TrimPrefix(p.ID, "pi_")+" has already been refunded.", nil)}, true
		}
		if p.Status != "succeeded" {
			return reply{400, errBody("invalid_request_error", "", "This PaymentIntent does not have a successful charge to refund.", nil)}, true
		}
		p.Refunded = true
		r := Refunded{ID: newID("re_"), PaymentIntent: p.ID, Account: p.Account, Amount: p.Amount, IdempotencyKey: req.IdempotencyKey}
		f.charges.refunds = append(f.charges.refunds, r)
		return f.json(map[string]any{"id": r.ID, "object": "refund", "amount": p.Amount, "currency": p.Currency,
			"payment_intent": p.ID, "charge": "ch_" + strings.TrimPrefix(p.ID, "pi_"), "status": "succeeded",
			"reason": req.Form.Get("reason"), "metadata": map[string]any{}, "created": f.now().Unix()}), true
	}
	return reply{}, false
}

func unexpectedState(p *PI, verb string) reply {
	return reply{400, errBody("invalid_request_error", "payment_intent_unexpected_state",
		fmt.Sprintf("You cannot %s this PaymentIntent because it has a status of %s.", verb, p.Status),
		map[string]any{"payment_intent": p.JSON()})}
}

// ConfirmAsCustomer confirms PaymentIntent id on account as its customer
// would on-session, over HTTP: the confirmation reaches the fake as one
// request among the service's. It returns the HTTP status and body.
func (f *Stripe) ConfirmAsCustomer(account, id string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, f.URL+"/v1/payment_intents/"+id+"/confirm", strings.NewReader(""))
	if err != nil {
		return 0, "", err
	}
	key := f.Key
	if key == "" {
		key = "sk_test_customer_session"
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if account != "" {
		req.Header.Set("Stripe-Account", account)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String(), nil
}

// Cancels lists the PaymentIntents the fake cancelled, in order.
func (f *Stripe) Cancels() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.charges.cancels...)
}

// Refunds lists the refunds the fake made, in order.
func (f *Stripe) Refunds() []Refunded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Refunded(nil), f.charges.refunds...)
}
