package stripetest

// Declines as Stripe answers them: a card error whose `code` is
// card_declined and whose `decline_code` says why (lost_card,
// insufficient_funds, …), or, for the reasons Stripe reports as an error
// code of their own, that code (expired_card, incorrect_number, …; no
// decline_code but for authentication_required, which carries both).

// DefaultDeclineCode is the decline of a Decline when DeclineAs is unset.
const DefaultDeclineCode = "insufficient_funds"

// declineMessages are Stripe's messages of the codes the tests use.
var declineMessages = map[string]string{
	"insufficient_funds":      "Your card has insufficient funds.",
	"expired_card":            "Your card has expired.",
	"incorrect_number":        "Your card number is incorrect.",
	"invalid_number":          "Your card number is invalid.",
	"incorrect_cvc":           "Your card's security code is incorrect.",
	"processing_error":        "An error occurred while processing your card. Try again in a little bit.",
	"authentication_required": "Your card was declined. This transaction requires authentication.",
}

// cardError is the error object's code, decline_code ("" for none) and
// message of a decline with Stripe's code c.
func cardError(c string) (code, declineCode, msg string) {
	if c == "" {
		c = DefaultDeclineCode
	}
	msg = declineMessages[c]
	if msg == "" {
		msg = "Your card was declined."
	}
	switch c {
	case "expired_card", "incorrect_number", "invalid_number", "incorrect_cvc", "processing_error":
		return c, "", msg
	case "authentication_required":
		return c, c, msg
	}
	return "card_declined", c, msg
}

// declinedAs sets p's error from DeclineAs's code when DeclineWith is
// unset (declined sets it otherwise).
func (f *Stripe) declinedAs(p *PI) {
	if f.DeclineWith != nil || f.DeclineAs == nil {
		return
	}
	if c := f.DeclineAs(*p); c != "" {
		p.ErrorCode, p.DeclineCode, p.ErrorMessage = cardError(c)
	}
}
