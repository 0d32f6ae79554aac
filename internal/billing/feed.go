package billing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/lock"
)

// FeedTopic is the outbox topic of the webhook feed (internal/billing/feedqueue).
const FeedTopic = "billing"

// FeedEventTypes are the Stripe events that feed the billing core.
var FeedEventTypes = []string{
	"payment_intent.processing",
	"payment_intent.succeeded",
	"payment_intent.payment_failed",
	"charge.refunded",
}

// FeedMessage is the outbox payload of one Stripe event about a billing
// charge.
type FeedMessage struct {
	EventID       string `json:"event_id"`
	Type          string `json:"type"`
	Created       int64  `json:"created"`
	PaymentIntent string `json:"payment_intent"`
	Account       string `json:"account,omitempty"`
	Subscription  string `json:"subscription,omitempty"`
	BillingDate   string `json:"billing_date,omitempty"`
	Error         string `json:"error,omitempty"`
	// DeclineCode is the failure's Stripe code (decline_code, else code).
	DeclineCode string `json:"decline_code,omitempty"`
	// What the feed checks before the event may move a period (feed trust):
	// the event's Stripe account ("" for the platform), the object's amount
	// and currency, and the attempt number of its metadata. V is 2 on
	// messages that carry them; older ones are checked against the
	// PaymentIntent read from Stripe.
	V             int    `json:"v,omitempty"`
	StripeAccount string `json:"stripe_account,omitempty"`
	Amount        int64  `json:"amount,omitempty"`
	Currency      string `json:"currency,omitempty"`
	Attempt       string `json:"attempt,omitempty"`
	// SKU is the plan the PaymentIntent was created for (its metadata): a
	// payment of an attempt made before a plan change paid for that plan.
	SKU string `json:"sku,omitempty"`
}

type feedObject struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Metadata         map[string]string `json:"metadata"`
	PaymentIntent    json.RawMessage   `json:"payment_intent"`
	Refunded         bool              `json:"refunded"`
	Amount           int64             `json:"amount"`
	Currency         string            `json:"currency"`
	LastPaymentError *struct {
		Code        string `json:"code"`
		DeclineCode string `json:"decline_code"`
		Message     string `json:"message"`
	} `json:"last_payment_error"`
}

func (o feedObject) paymentIntentID() string {
	if o.Object == "payment_intent" {
		return o.ID
	}
	var id string
	if json.Unmarshal(o.PaymentIntent, &id) == nil {
		return id
	}
	var obj struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(o.PaymentIntent, &obj) == nil {
		return obj.ID
	}
	return ""
}

// FeedFromEvent extracts the feed message of ev; ok is false when the event
// is not about a billing charge.
func FeedFromEvent(ev *stripe.Event) (FeedMessage, bool, error) {
	if ev.Data == nil || len(ev.Data.Raw) == 0 {
		return FeedMessage{}, false, nil
	}
	var obj feedObject
	if err := json.Unmarshal(ev.Data.Raw, &obj); err != nil {
		return FeedMessage{}, false, fmt.Errorf("decode %s object: %w", ev.Type, err)
	}
	msg := FeedMessage{EventID: ev.ID, Type: string(ev.Type), Created: ev.Created, PaymentIntent: obj.paymentIntentID(),
		Account: obj.Metadata[MetaAccount], Subscription: obj.Metadata[MetaSubscription], BillingDate: obj.Metadata[MetaDate],
		V: 2, StripeAccount: ev.Account, Amount: obj.Amount, Currency: obj.Currency, Attempt: obj.Metadata[MetaAttempt],
		SKU: obj.Metadata[MetaSKU]}
	if obj.LastPaymentError != nil {
		msg.Error = DeclineText(obj.LastPaymentError.Code, obj.LastPaymentError.Message)
		msg.DeclineCode = obj.LastPaymentError.DeclineCode
		if msg.DeclineCode == "" {
			msg.DeclineCode = obj.LastPaymentError.Code
		}
	}
	marked := msg.Account != "" && msg.Subscription != "" && msg.BillingDate != ""
	switch string(ev.Type) {
	case "payment_intent.processing", "payment_intent.succeeded", "payment_intent.payment_failed":
		return msg, marked && msg.PaymentIntent != "", nil
	case "charge.refunded":
		// Only a full refund ends a period; partial ones change nothing here.
		return msg, obj.Refunded && msg.PaymentIntent != "", nil
	}
	return FeedMessage{}, false, nil
}

// ApplyFeed applies one Stripe event to its billing period, under the
// account's lock (ErrLocked: the outbox retries it later). The trust checks
// (feedtrust.go) come first and take no lock: the account is named by
// merchant-writable metadata, so a message that fails them never takes (or
// waits for) that account's lock. Applying is idempotent: every transition
// is conditional on the state it leaves, and the history entry's key is
// derived from the event id.
func (s *Service) ApplyFeed(ctx context.Context, msg FeedMessage) error {
	if msg.Account == "" {
		ref, err := s.store.GetPaymentRef(ctx, msg.PaymentIntent)
		if errors.Is(err, apperr.ErrNotFound) {
			return nil // not a billing-core charge
		}
		if err != nil {
			return err
		}
		msg.Account, msg.Subscription, msg.BillingDate = ref.AccountID, ref.SubscriptionID, ref.BillingDate.String()
	}
	date, err := dates.Parse(msg.BillingDate)
	if err != nil || !validID(msg.Account) || !validID(msg.Subscription) {
		s.log.Error("billing feed: bad billing metadata; ignored", "event_id", msg.EventID, "payment_intent", msg.PaymentIntent)
		return nil
	}
	log := s.feedLog(msg, date)
	p, err := s.store.GetPeriod(ctx, msg.Account, msg.Subscription, date)
	if errors.Is(err, apperr.ErrNotFound) {
		s.refuse(log, msg, "period")
		return nil
	}
	if err != nil {
		return err
	}
	if v, err := s.feedRefusal(ctx, &msg, p); err != nil {
		return err
	} else if v.reason != "" {
		s.refuse(log, msg, v.reason)
		return nil
	}
	return s.withLock(ctx, msg.Account, func(ctx context.Context, _ *lock.Lock) error {
		return s.applyFeed(ctx, msg, date)
	})
}

func (s *Service) feedLog(msg FeedMessage, date dates.Date) *slog.Logger {
	return s.log.With("event_id", msg.EventID, "event_type", msg.Type, "payment_intent", msg.PaymentIntent,
		"account", msg.Account, "subscription_id", msg.Subscription, "billing_date", date.String())
}

// applyFeed applies msg under the account's lock: the period is read again
// and the trust checks made again on it as it is now.
func (s *Service) applyFeed(ctx context.Context, msg FeedMessage, date dates.Date) error {
	log := s.feedLog(msg, date)
	p, err := s.store.GetPeriod(ctx, msg.Account, msg.Subscription, date)
	if errors.Is(err, apperr.ErrNotFound) {
		s.refuse(log, msg, "period")
		return nil
	}
	if err != nil {
		return err
	}
	v, err := s.feedRefusal(ctx, &msg, p)
	if err != nil {
		return err
	} else if v.reason != "" {
		s.refuse(log, msg, v.reason)
		return nil
	}
	sub, err := s.store.GetSubscription(ctx, msg.Account, msg.Subscription)
	if err != nil {
		return err
	}
	s, err = s.forSub(ctx, sub) // its test clock's "today", if it has one
	if err != nil {
		return err
	}
	now, today := s.now(), s.today(sub)
	evDate := dates.In(time.Unix(msg.Created, 0), sub.Location())
	if sub.TestClock != "" && s.clock != "" {
		// On a test clock, what happened "today" happened on the clock's
		// date, whatever Stripe's real time of the event.
		evDate = today
	}
	h := map[string]Happened{"payment_intent.processing": HappenedProcessing, "payment_intent.succeeded": HappenedSucceeded,
		"payment_intent.payment_failed": HappenedDeclined, "charge.refunded": HappenedRefunded}[msg.Type]
	if h == HappenedUnknown {
		return nil
	}
	in := s.settleInput(sub, p, h, msg.PaymentIntent, FeedProcess(p), today)
	in.Now, in.Processed = now, evDate
	// The event answers the attempt in flight when its PaymentIntent is not
	// one recorded for the period (feedRefusal matched it by its metadata).
	in.OfAttempt, in.Known = p.InFlightKey != "" && !v.known, v.known
	in.Error, in.DeclineCode = msg.Error, msg.DeclineCode
	in.Amount, in.Currency, in.SKU = msg.Amount, msg.Currency, msg.SKU
	if v.ref != nil {
		in.RefAmount, in.RefCurrency, in.RefundedAlready = v.ref.Amount, v.ref.Currency, v.ref.RefundID != ""
	}
	if err := s.applySettle(ctx, log, sub, in, "evt:"+msg.EventID); err != nil {
		return fmt.Errorf("apply %s: %w", msg.Type, err)
	}
	return nil
}

// applySettle settles a period with what happened to one of its
// PaymentIntents as Stripe told it (an event, or a read), under the
// account's lock: the kernel decides (settle), then Stripe is asked what
// the decision needs (the debit still processing, how a success was paid)
// and the change is written with cause.
func (s *Service) applySettle(ctx context.Context, log *slog.Logger, sub Subscription, in Settle, cause string) error {
	st := settle(in)
	switch {
	case st.RetryLater != "":
		return fmt.Errorf("%s: %w", st.RetryLater, ErrRetryLater)
	case st.Warn != "":
		log.Warn(st.Warn, "status", string(in.Period.Status), "recorded_payment_intent", in.Period.TransactionID)
	}
	if !st.Write {
		return nil
	}
	if st.Confirm {
		// A redelivered event of a debit that failed since is not one
		// that is processing: Stripe says what the PaymentIntent is now.
		if s.charger == nil {
			return nil
		}
		pi, err := s.charger.Retrieve(ctx, in.Period.PaymentDetails.StripeAccount, in.PaymentIntent)
		if err != nil {
			return err
		}
		if pi.Status != stripe.PaymentIntentStatusProcessing {
			return nil
		}
	}
	if st.Receipt != nil && in.Method == (PaymentMethodUsed{}) {
		// It collects the period: its receipt says how it was paid.
		st.withMethod(s.chargeMethod(ctx, in.Period.PaymentDetails.StripeAccount, in.PaymentIntent, log))
	}
	if err := s.record(ctx, log, NewTx(cause, in.Now), &sub, &st, in.Today); err != nil {
		return err
	}
	log.Info("billing feed applied", "status", string(st.Period.Status), "updated_event", st.Period.UpdatedEvent)
	return nil
}
