package billing

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"

	"github.com/stripe/stripe-go/v76"
)

// Webhook feed trust (DESIGN §8): a billing event moves a period only when
// its PaymentIntent is one the service created for that period. Metadata is
// merchant-writable: any connected account can create a PaymentIntent that
// carries another period's billing_* keys, so the metadata only says which
// period an event claims to be about. It may move it when
//   - the event's account is the period's stripe_account (the platform for
//     a period charged on the platform's own account),
//   - the object's amount and currency are the period's, and
//   - its id is one the service recorded for the period (the latest
//     attempt's TransactionID, or a PaymentIntent reference the service
//     wrote for this period), or the period has an attempt in flight, no
//     PaymentIntent on record at all, and the metadata (attempt number
//     included) names exactly that attempt: the webhook of a charge whose
//     answer was lost.
// A refused event moves nothing, is logged (WARN, ids only) and counted
// (stripe_payments_billing_feed_refused_total{reason}).

// feedRefusal says why msg may not move p ("" when it may). An error means
// the check could not be made (Stripe or DynamoDB unavailable): retried.
func (s *Service) feedRefusal(ctx context.Context, msg FeedMessage, p Period) (string, error) {
	if msg.V < 2 {
		// Enqueued before messages carried the facts to check: read them
		// from Stripe, on the period's account (another account's
		// PaymentIntent does not exist there).
		if s.charger == nil {
			return "payment_intent", nil
		}
		pi, err := s.charger.Retrieve(ctx, p.PaymentDetails.StripeAccount, msg.PaymentIntent)
		var se *stripe.Error
		if errors.As(err, &se) && se.HTTPStatusCode == 404 {
			return "account", nil
		}
		if err != nil {
			return "", err
		}
		msg.StripeAccount, msg.Amount, msg.Currency = p.PaymentDetails.StripeAccount, pi.Amount, string(pi.Currency)
		msg.Attempt = pi.Metadata[MetaAttempt]
		if msg.Type == "charge.refunded" && pi.LatestCharge != nil && pi.LatestCharge.Amount != 0 {
			msg.Amount = pi.LatestCharge.Amount
		}
	}
	if s.platform(msg.StripeAccount) != s.platform(p.PaymentDetails.StripeAccount) {
		return "account", nil
	}
	if msg.Amount != p.Amount {
		return "amount", nil
	}
	if !strings.EqualFold(msg.Currency, p.Currency) {
		return "currency", nil
	}
	if msg.PaymentIntent != "" && msg.PaymentIntent == p.TransactionID {
		return "", nil
	}
	ref, err := s.store.GetPaymentRef(ctx, msg.PaymentIntent)
	switch {
	case err == nil:
		if ref.AccountID == p.AccountID && ref.SubscriptionID == p.SubscriptionID && ref.BillingDate.Equal(p.BillingDate) {
			return "", nil // an earlier attempt of this period
		}
		return "payment_intent", nil
	case !errors.Is(err, ErrNotFound):
		return "", err
	}
	inFlight := p.InFlightKey != "" && p.TransactionID == ""
	attemptOK := msg.Attempt == "" || msg.Attempt == strconv.Itoa(p.Attempts+1)
	if inFlight && attemptOK && msg.Account == p.AccountID && msg.Subscription == p.SubscriptionID &&
		msg.BillingDate == p.BillingDate.String() {
		return "", nil
	}
	return "payment_intent", nil
}

// platform maps the platform's own account id to "" (events about the
// platform's own objects carry no account).
func (s *Service) platform(account string) string {
	if account == s.cfg.PlatformAccount {
		return ""
	}
	return account
}

// refuse logs and counts a refused feed event. Ids only: no secrets.
func (s *Service) refuse(log *slog.Logger, msg FeedMessage, reason string) {
	log.Warn("billing feed: event refused: the PaymentIntent is not one the service created for this period; nothing moved",
		"reason", reason, "event_stripe_account", msg.StripeAccount, "event_amount", msg.Amount, "event_currency", msg.Currency)
	s.obs.FeedRefused(reason)
}
