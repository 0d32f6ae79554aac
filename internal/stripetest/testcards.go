package stripetest

import "strings"

// Stripe's documented test payment method ids (docs.stripe.com/testing)
// and what they do. With Stripe.TestCards set (the local Stripe), they
// decide the outcome of every payment: a confirm, an invoice pay, a
// subscription's first payment, an off-session charge. Without it (the
// tests' default), every payment method succeeds unless Decide says
// otherwise.

// PaymentMethodOutcome is what paying with one payment method does.
type PaymentMethodOutcome struct {
	// Behavior: Succeed, Decline or Process (a bank debit).
	Behavior Behavior
	// Error of a Decline, or of a bank debit that fails when it settles.
	Error CardError
	// SettlesOK: a processing bank debit succeeds when it settles.
	SettlesOK bool
}

// ACHFailingPaymentMethod is the local Stripe's bank account that accepts a
// debit (processing) and fails it when it settles (Stripe's test account
// number 000222222227, insufficient funds).
const ACHFailingPaymentMethod = "pm_usBankAccount_insufficientFunds"

var testDeclines = map[string]CardError{
	"pm_card_chargeDeclined":                  {Code: "card_declined", DeclineCode: "generic_decline", Message: "Your card was declined."},
	"pm_card_visa_chargeDeclined":             {Code: "card_declined", DeclineCode: "generic_decline", Message: "Your card was declined."},
	"pm_card_chargeDeclinedInsufficientFunds": {Code: "card_declined", DeclineCode: "insufficient_funds", Message: "Your card has insufficient funds."},
	"pm_card_chargeDeclinedLostCard":          {Code: "card_declined", DeclineCode: "lost_card", Message: "Your card was declined."},
	"pm_card_chargeDeclinedStolenCard":        {Code: "card_declined", DeclineCode: "stolen_card", Message: "Your card was declined."},
	"pm_card_chargeDeclinedFraudulent":        {Code: "card_declined", DeclineCode: "fraudulent", Message: "Your card was declined."},
	"pm_card_chargeDeclinedExpiredCard":       {Code: "expired_card", DeclineCode: "expired_card", Message: "Your card has expired."},
	"pm_card_chargeDeclinedIncorrectCvc":      {Code: "incorrect_cvc", DeclineCode: "incorrect_cvc", Message: "Your card's security code is incorrect."},
	"pm_card_chargeDeclinedProcessingError":   {Code: "processing_error", DeclineCode: "processing_error", Message: "An error occurred while processing your card. Try again in a little bit."},
	"pm_card_authenticationRequired": {Code: "authentication_required", DeclineCode: "authentication_required",
		Message: "Your card was declined. This transaction requires authentication."},
	"pm_card_authenticationRequiredOnSetup": {Code: "authentication_required", DeclineCode: "authentication_required",
		Message: "Your card was declined. This transaction requires authentication."},
}

// TestPaymentMethod is what paying with pm does on the local Stripe: the
// declining and bank-debit test ids as documented; every other id (the
// success cards pm_card_visa, pm_card_mastercard, pm_card_amex,
// pm_card_discover, pm_card_visa_debit… and any pm_ of your own) succeeds.
func TestPaymentMethod(pm string) PaymentMethodOutcome {
	if ce, ok := testDeclines[pm]; ok {
		return PaymentMethodOutcome{Behavior: Decline, Error: ce}
	}
	switch {
	case pm == ACHFailingPaymentMethod:
		return PaymentMethodOutcome{Behavior: Process, Error: CardError{Code: "payment_method_provider_decline",
			DeclineCode: "insufficient_funds", Message: "The customer's bank account has insufficient funds."}}
	case pm == "pm_usBankAccount" || strings.HasPrefix(pm, "pm_usBankAccount_"):
		return PaymentMethodOutcome{Behavior: Process, SettlesOK: true}
	}
	return PaymentMethodOutcome{Behavior: Succeed}
}
