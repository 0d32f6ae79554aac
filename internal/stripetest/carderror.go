package stripetest

// CardError is the error Stripe gives a declined PaymentIntent: the
// error's code (card_declined, authentication_required, expired_card…), its
// decline_code and its message.
type CardError struct {
	Code, DeclineCode, Message string
}

// insufficientFunds is the default decline.
var insufficientFunds = CardError{Code: "card_declined", DeclineCode: "insufficient_funds", Message: "Your card has insufficient funds."}

// declined sets p's error from DeclineWith (default insufficient funds).
func (f *Stripe) declined(p *PI) {
	ce := insufficientFunds
	if f.DeclineWith != nil {
		ce = f.DeclineWith(*p)
	}
	p.ErrorCode, p.DeclineCode, p.ErrorMessage = ce.Code, ce.DeclineCode, ce.Message
}

// cardError is p's decline as Stripe renders it.
func (p *PI) cardError() CardError {
	if p.ErrorCode == "" && p.DeclineCode == "" && p.ErrorMessage == "" {
		return insufficientFunds
	}
	return CardError{Code: p.ErrorCode, DeclineCode: p.DeclineCode, Message: p.ErrorMessage}
}
