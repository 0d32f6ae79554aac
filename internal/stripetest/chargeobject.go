package stripetest

import (
	"net/url"
	"slices"
	"strings"
)

// A PaymentIntent's latest_charge is the Charge's id, or, when the request
// asks for it (expand[]=latest_charge; in a list or search,
// expand[]=data.latest_charge), the Charge itself as Stripe renders it,
// with payment_method_details: what the billing core's receipts record.

// MethodCard and MethodBank are the payment_method_details the fake
// renders by default: a card for any payment method, a US bank account for
// one whose id names a bank account (pm_usBankAccount…, …bank…), after
// Stripe's test payment methods.
var (
	MethodCard = map[string]any{"type": "card", "card": map[string]any{
		"brand": "visa", "last4": "4242", "exp_month": 12, "exp_year": 2034, "funding": "credit", "country": "US",
		"network": "visa", "fingerprint": "Xt5EWLLDS7FJjR1c"}}
	MethodBank = map[string]any{"type": "us_bank_account", "us_bank_account": map[string]any{
		"account_holder_type": "individual", "account_type": "checking", "bank_name": "STRIPE TEST BANK",
		"fingerprint": "FFDMA0xfhBjWSZLu", "last4": "6789", "routing_number": "110000000"}}
)

// methodDetails is the payment_method_details of p's charge: MethodAs's,
// else MethodCard or MethodBank by its payment method id.
func (f *Stripe) methodDetails(p PI) map[string]any {
	if f.MethodAs != nil {
		if m := f.MethodAs(p); m != nil {
			return m
		}
	}
	if strings.Contains(strings.ToLower(p.PaymentMethod), "bank") {
		return MethodBank
	}
	return MethodCard
}

// chargeObject is p's latest charge as Stripe renders it; f.mu is held.
func (f *Stripe) chargeObject(p *PI) map[string]any {
	status := map[string]string{"succeeded": "succeeded", "processing": "pending"}[p.Status]
	if status == "" {
		status = "failed"
	}
	ch := map[string]any{
		"id": "ch_" + strings.TrimPrefix(p.ID, "pi_"), "object": "charge", "amount": p.Amount,
		"amount_captured": 0, "amount_refunded": 0, "currency": p.Currency, "customer": p.Customer,
		"payment_intent": p.ID, "payment_method": p.PaymentMethod, "status": status,
		"paid": status == "succeeded", "captured": status == "succeeded", "refunded": p.Refunded,
		"metadata": p.Metadata, "livemode": false, "created": p.Created.Unix(),
		"payment_method_details": f.methodDetails(*p),
	}
	if status == "succeeded" {
		ch["amount_captured"] = p.Amount
	}
	if p.Refunded {
		ch["amount_refunded"] = p.Amount
	}
	if status == "failed" {
		ce := p.cardError()
		ch["failure_code"], ch["failure_message"] = ce.Code, ce.Message
		if ce.DeclineCode != "" {
			ch["outcome"] = map[string]any{"type": "issuer_declined", "reason": ce.DeclineCode}
		}
	}
	return ch
}

// expand renders body's latest_charge as the Charge when form asks for it
// under prefix ("" for the PaymentIntent itself, "data." in a list);
// f.mu is held.
func (f *Stripe) expand(form url.Values, prefix string, p *PI, body map[string]any) map[string]any {
	if slices.Contains(form["expand[]"], prefix+"latest_charge") || slices.Contains(form["expand[0]"], prefix+"latest_charge") {
		body["latest_charge"] = f.chargeObject(p)
	}
	return body
}
