// Webhook feed trust (docs/design.md §8): a billing event moves a period only when
// its PaymentIntent is one the service created for that period. Metadata is
// merchant-writable: any connected account can create a PaymentIntent that
// carries another period's billing_* keys, so the metadata only says which
// period an event claims to be about. It may move it when
//   - the event's account is the period's stripe_account (the platform for
//     a period charged on the platform's own account),
//   - the object's amount and currency are those of the attempt that
//     created it, as recorded with it (its PaymentRef; the period's for a
//     reference written before they were recorded, and for the attempt in
//     flight), not the period's amount today, and
//   - its id is one the service recorded for the period (the latest
//     attempt's TransactionID, or a PaymentIntent reference the service
//     wrote for this period), or the period has an attempt in flight, no
//     PaymentIntent on record at all, and the metadata (attempt number
//     included) names exactly that attempt: the webhook of a charge whose
//     answer was lost.
// A refused event moves nothing, is logged (WARN, ids only) and counted
// (stripe_payments_billing_feed_refused_total{reason}). The checks take no
// lock: the metadata names the account whose lock applying the event takes,
// so only a message that passed them may take it (they are made again under
// the lock, on the period as it is then).

package feed

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe/stripe-go/v76"
)

// Webhook feed trust (docs/design.md §8): a billing event moves a period only when
// its PaymentIntent is one the service created for that period. Metadata is
// merchant-writable: any connected account can create a PaymentIntent that
// carries another period's billing_* keys, so the metadata only says which
// period an event claims to be about. It may move it when
//   - the event's account is the period's stripe_account (the platform for
//     a period charged on the platform's own account),
//   - the object's amount and currency are those of the attempt that
//     created it, as recorded with it (its PaymentRef; the period's for a
//     reference written before they were recorded, and for the attempt in
//     flight), not the period's amount today, and
//   - its id is one the service recorded for the period (the latest
//     attempt's TransactionID, or a PaymentIntent reference the service
//     wrote for this period), or the period has an attempt in flight, no
//     PaymentIntent on record at all, and the metadata (attempt number
//     included) names exactly that attempt: the webhook of a charge whose
//     answer was lost.
// A refused event moves nothing, is logged (WARN, ids only) and counted
// (stripe_payments_billing_feed_refused_total{reason}). The checks take no
// lock: the metadata names the account whose lock applying the event takes,
// so only a message that passed them may take it (they are made again under
// the lock, on the period as it is then).

// verdict is what the trust checks concluded about one message.
type verdict struct {
	// reason the message may not move the period ("" when it may).
	reason string
	// known: the PaymentIntent is one the service recorded for the period
	// (an attempt's, the latest or an earlier one); false for the attempt
	// in flight matched by its metadata.
	known bool
	// ref is the PaymentIntent's reference, when it has one.
	ref *model.PaymentRef
}

// feedRefusal checks whether msg may move p. An error means the check
// could not be made (Stripe or DynamoDB unavailable): retried. msg is
// completed with the facts read from Stripe for an old message (V < 2), so
// a second check (under the lock) needs no Stripe call.
func (f *Feed) feedRefusal(ctx context.Context, msg *FeedMessage, p model.Period) (verdict, error) {
	if msg.V < 2 {
		// Enqueued before messages carried the facts to check: read them
		// from Stripe, on the period's account (another account's
		// PaymentIntent does not exist there).
		if f.Charger == nil {
			return verdict{reason: "payment_intent"}, nil
		}
		pi, err := f.Charger.Retrieve(ctx, p.PaymentDetails.StripeAccount, msg.PaymentIntent)
		var se *stripe.Error
		if errors.As(err, &se) && se.HTTPStatusCode == 404 {
			return verdict{reason: "account"}, nil
		}
		if err != nil {
			return verdict{}, err
		}
		msg.StripeAccount, msg.Amount, msg.Currency = p.PaymentDetails.StripeAccount, pi.Amount, string(pi.Currency)
		msg.Attempt = pi.Metadata[model.MetaAttempt]
		if msg.Type == "charge.refunded" && pi.LatestCharge != nil && pi.LatestCharge.Amount != 0 {
			msg.Amount = pi.LatestCharge.Amount
		}
		msg.V = 2
	}
	if f.platform(msg.StripeAccount) != f.platform(p.PaymentDetails.StripeAccount) {
		return verdict{reason: "account"}, nil
	}
	var ref *model.PaymentRef
	if msg.PaymentIntent != "" {
		r, err := f.Store.GetPaymentRef(ctx, msg.PaymentIntent)
		switch {
		case err == nil:
			ref = &r
		case !errors.Is(err, apperr.ErrNotFound):
			return verdict{}, err
		}
	}
	// The amount and currency the PaymentIntent was created with: those of
	// the attempt that created it as recorded with it, not the period's
	// today (an amount change since then applies to later attempts only).
	amount, currency := p.Amount, p.Currency
	if ref != nil && ref.Of(p) && ref.Currency != "" {
		amount, currency = ref.Amount, ref.Currency
	}
	if msg.Amount != amount {
		return verdict{reason: "amount"}, nil
	}
	if !strings.EqualFold(msg.Currency, currency) {
		return verdict{reason: "currency"}, nil
	}
	switch {
	case ref != nil && ref.Of(p):
		return verdict{known: true, ref: ref}, nil // an attempt of this period
	case ref != nil:
		return verdict{reason: "payment_intent"}, nil
	case msg.PaymentIntent != "" && msg.PaymentIntent == p.TransactionID:
		return verdict{known: true}, nil
	}
	inFlight := p.InFlightKey != "" && p.TransactionID == ""
	attemptOK := msg.Attempt == "" || msg.Attempt == strconv.Itoa(p.Attempts+1)
	if inFlight && attemptOK && msg.Account == p.AccountID && msg.Subscription == p.SubscriptionID &&
		msg.BillingDate == p.BillingDate.String() {
		return verdict{}, nil
	}
	return verdict{reason: "payment_intent"}, nil
}

// platform maps the platform's own account id to "" (events about the
// platform's own objects carry no account).
func (f *Feed) platform(account string) string {
	if account == f.Cfg.PlatformAccount {
		return ""
	}
	return account
}

// refuse logs and counts a refused feed event. Ids only: no secrets.
func (f *Feed) refuse(log *slog.Logger, msg FeedMessage, reason string) {
	log.Warn("billing feed: event refused: the PaymentIntent is not one the service created for this period; nothing moved",
		"reason", reason, "event_stripe_account", msg.StripeAccount, "event_amount", msg.Amount, "event_currency", msg.Currency)
	f.Obs.FeedRefused(reason)
}
