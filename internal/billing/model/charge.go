package model

import (
	"strconv"
	"time"

	"github.com/stripe/stripe-go/v76"
)

// The model of a charge: what the service asks of Stripe and what it
// learns (the Charger interface, deps.go; internal/billing/stripecharge
// makes the requests).

// Metadata keys that mark a PaymentIntent as a billing-core charge; the
// webhook feed routes events by them.
const (
	MetaAccount      = "billing_account"
	MetaSubscription = "billing_subscription"
	MetaDate         = "billing_date"
	MetaSKU          = "billing_sku"
)

// Outcome of one charge attempt.
type Outcome int

const (
	// Unknown: no answer we can trust (network, 5xx, rate limit exhausted,
	// cancelled). The attempt stays in flight; a rerun reuses its
	// idempotency key and Stripe answers with the same PaymentIntent.
	Unknown Outcome = iota
	Succeeded
	// Processing: accepted, settles later (bank debits): ACHSENT.
	Processing
	// Declined: the attempt failed for good: ERROR, retried on schedule.
	Declined
)

// ChargeRequest is an off-session, confirmed PaymentIntent on a connected
// account.
type ChargeRequest struct {
	StripeAccount  string
	Customer       string
	PaymentMethod  string
	Amount         int64
	Currency       string
	IdempotencyKey string
	Metadata       map[string]string
	Description    string
}

// ChargeResult is what Stripe said.
type ChargeResult struct {
	Outcome       Outcome
	PaymentIntent string
	Error         string
	// DeclineCode is Stripe's code of a decline: the decline_code, else the
	// error's code (expired_card, authentication_required, …).
	DeclineCode string
	// Method is how a success was paid, from its charge (zero when Stripe
	// did not say).
	Method PaymentMethodUsed
}

// PaymentMethodUsed is how a charge was paid, from the Charge's
// payment_method_details: its type (card, us_bank_account, …) and the last
// four digits of the card or account.
type PaymentMethodUsed struct {
	Type  string
	Last4 string
}

// MethodOf is how pi's latest charge was paid, when pi carries its charge
// (retrieved with expand latest_charge); zero otherwise.
func MethodOf(pi *stripe.PaymentIntent) PaymentMethodUsed {
	if pi == nil || pi.LatestCharge == nil || pi.LatestCharge.PaymentMethodDetails == nil {
		return PaymentMethodUsed{}
	}
	d := pi.LatestCharge.PaymentMethodDetails
	m := PaymentMethodUsed{Type: string(d.Type)}
	switch {
	case d.Card != nil:
		m.Last4 = d.Card.Last4
	case d.USBankAccount != nil:
		m.Last4 = d.USBankAccount.Last4
	case d.SEPADebit != nil:
		m.Last4 = d.SEPADebit.Last4
	case d.BACSDebit != nil:
		m.Last4 = d.BACSDebit.Last4
	case d.AUBECSDebit != nil:
		m.Last4 = d.AUBECSDebit.Last4
	case d.ACSSDebit != nil:
		m.Last4 = d.ACSSDebit.Last4
	}
	return m
}

// MetaAttempt is the attempt number a billing PaymentIntent was created by;
// with the other billing_* keys it names the one attempt a lookup looks for.
const MetaAttempt = "billing_attempt"

// Lookup is what asking Stripe for an attempt's PaymentIntent found.
type Lookup struct {
	// Found: a PaymentIntent of the attempt exists; Result is its outcome.
	Found  bool
	Result ChargeResult
	// How names the way it was found (search, list), for the history.
	How string
}

// AttemptQuery identifies the PaymentIntent an attempt created: the
// metadata the service set on it, the account, customer, amount and
// currency it was created with, and when the attempt started.
type AttemptQuery struct {
	StripeAccount string
	Customer      string
	Amount        int64
	Currency      string
	Metadata      map[string]string
	Since         time.Time
	// Exclude: PaymentIntents already recorded for the period (earlier
	// attempts), never the answer.
	Exclude map[string]bool
}

// AttemptMeta is the metadata of attempt n on p.
func AttemptMeta(p Period, n int) map[string]string {
	return map[string]string{MetaAccount: p.AccountID, MetaSubscription: p.SubscriptionID,
		MetaDate: p.BillingDate.String(), MetaSKU: p.SKU, MetaAttempt: strconv.Itoa(n)}
}
