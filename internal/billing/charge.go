package billing

import (
	"strconv"
	"time"
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

// attemptMeta is the metadata of attempt n on p.
func attemptMeta(p Period, n int) map[string]string {
	return map[string]string{MetaAccount: p.AccountID, MetaSubscription: p.SubscriptionID,
		MetaDate: p.BillingDate.String(), MetaSKU: p.SKU, MetaAttempt: strconv.Itoa(n)}
}
