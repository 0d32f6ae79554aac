// Package feed applies the Stripe events about the billing core's charges
// (docs/design.md §8 "Webhook feed trust"): first trust (is this
// PaymentIntent one the core created for the period it names?), then
// settle, under the account's lock, through the outcome Recorder.
package feed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/apperr"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/env"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/billing/outcome"
	"github.com/stripe-payments/stripe-payments/internal/billing/settle"
	"github.com/stripe-payments/stripe-payments/internal/lock"
	"github.com/stripe/stripe-go/v76"
)

// Feed applies Stripe events to billing periods.
type Feed struct {
	*env.Env
	rec *outcome.Recorder
}

// New is the feed over e.
func New(e *env.Env) *Feed { return &Feed{Env: e, rec: &outcome.Recorder{Env: e}} }

// forSub is the feed on sub's clock (env.Env.ForSub).
func (f *Feed) forSub(ctx context.Context, sub model.Subscription) (*Feed, error) {
	e, err := f.ForSub(ctx, sub)
	if err != nil {
		return nil, err
	}
	if e == f.Env {
		return f, nil
	}
	return New(e), nil
}

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
		Account: obj.Metadata[model.MetaAccount], Subscription: obj.Metadata[model.MetaSubscription], BillingDate: obj.Metadata[model.MetaDate],
		V: 2, StripeAccount: ev.Account, Amount: obj.Amount, Currency: obj.Currency, Attempt: obj.Metadata[model.MetaAttempt],
		SKU: obj.Metadata[model.MetaSKU]}
	if obj.LastPaymentError != nil {
		msg.Error = model.DeclineText(obj.LastPaymentError.Code, obj.LastPaymentError.Message)
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
// (trust.go) come first and take no lock: the account is named by
// merchant-writable metadata, so a message that fails them never takes (or
// waits for) that account's lock. Applying is idempotent: every transition
// is conditional on the state it leaves, and the history entry's key is
// derived from the event id.
func (f *Feed) ApplyFeed(ctx context.Context, msg FeedMessage) error {
	if msg.Account == "" {
		ref, err := f.Store.GetPaymentRef(ctx, msg.PaymentIntent)
		if errors.Is(err, apperr.ErrNotFound) {
			return nil // not a billing-core charge
		}
		if err != nil {
			return err
		}
		msg.Account, msg.Subscription, msg.BillingDate = ref.AccountID, ref.SubscriptionID, ref.BillingDate.String()
	}
	date, err := dates.Parse(msg.BillingDate)
	if err != nil || !model.ValidID(msg.Account) || !model.ValidID(msg.Subscription) {
		f.Log.Error("billing feed: bad billing metadata; ignored", "event_id", msg.EventID, "payment_intent", msg.PaymentIntent)
		return nil
	}
	log := f.feedLog(msg, date)
	p, err := f.Store.GetPeriod(ctx, msg.Account, msg.Subscription, date)
	if errors.Is(err, apperr.ErrNotFound) {
		f.refuse(log, msg, "period")
		return nil
	}
	if err != nil {
		return err
	}
	if v, err := f.feedRefusal(ctx, &msg, p); err != nil {
		return err
	} else if v.reason != "" {
		f.refuse(log, msg, v.reason)
		return nil
	}
	return f.WithLock(ctx, msg.Account, func(ctx context.Context, _ *lock.Lock) error {
		return f.applyFeed(ctx, msg, date)
	})
}

func (f *Feed) feedLog(msg FeedMessage, date dates.Date) *slog.Logger {
	return f.Log.With("event_id", msg.EventID, "event_type", msg.Type, "payment_intent", msg.PaymentIntent,
		"account", msg.Account, "subscription_id", msg.Subscription, "billing_date", date.String())
}

// applyFeed applies msg under the account's lock: the period is read again
// and the trust checks made again on it as it is now.
func (f *Feed) applyFeed(ctx context.Context, msg FeedMessage, date dates.Date) error {
	log := f.feedLog(msg, date)
	p, err := f.Store.GetPeriod(ctx, msg.Account, msg.Subscription, date)
	if errors.Is(err, apperr.ErrNotFound) {
		f.refuse(log, msg, "period")
		return nil
	}
	if err != nil {
		return err
	}
	v, err := f.feedRefusal(ctx, &msg, p)
	if err != nil {
		return err
	} else if v.reason != "" {
		f.refuse(log, msg, v.reason)
		return nil
	}
	sub, err := f.Store.GetSubscription(ctx, msg.Account, msg.Subscription)
	if err != nil {
		return err
	}
	f, err = f.forSub(ctx, sub) // its test clock's "today", if it has one
	if err != nil {
		return err
	}
	now, today := f.Now(), f.Today(sub)
	evDate := dates.In(time.Unix(msg.Created, 0), sub.Location())
	if sub.TestClock != "" && f.Clock != "" {
		// On a test clock, what happened "today" happened on the clock's
		// date, whatever Stripe's real time of the event.
		evDate = today
	}
	h := map[string]settle.Happened{"payment_intent.processing": settle.HappenedProcessing, "payment_intent.succeeded": settle.HappenedSucceeded,
		"payment_intent.payment_failed": settle.HappenedDeclined, "charge.refunded": settle.HappenedRefunded}[msg.Type]
	if h == settle.HappenedUnknown {
		return nil
	}
	in := f.rec.Input(sub, p, h, msg.PaymentIntent, model.FeedProcess(p), today)
	in.Now, in.Processed = now, evDate
	// The event answers the attempt in flight when its PaymentIntent is not
	// one recorded for the period (feedRefusal matched it by its metadata).
	in.OfAttempt, in.Known = p.InFlightKey != "" && !v.known, v.known
	in.Error, in.DeclineCode = msg.Error, msg.DeclineCode
	in.Amount, in.Currency, in.SKU = msg.Amount, msg.Currency, msg.SKU
	if v.ref != nil {
		in.RefAmount, in.RefCurrency, in.RefundedAlready = v.ref.Amount, v.ref.Currency, v.ref.RefundID != ""
	}
	if err := f.rec.Apply(ctx, log, sub, in, "evt:"+msg.EventID); err != nil {
		return fmt.Errorf("apply %s: %w", msg.Type, err)
	}
	return nil
}

// SettleFromStripe settles a billing attempt from the event Stripe would
// have sent about its PaymentIntent (the reconciliation's snapshot,
// docs/design.md §11), exactly as the webhook feed does: the same trust
// checks, the account's lock, the conditional transitions, a history entry
// keyed by the event's id (so the same snapshot settles once). It waits
// for a held lock (a collection run) up to wait. applies is false when the
// event is not about a billing charge.
func (f *Feed) SettleFromStripe(ctx context.Context, ev *stripe.Event, wait time.Duration) (applies bool, err error) {
	msg, ok, err := FeedFromEvent(ev)
	if err != nil || !ok {
		return false, err
	}
	deadline := time.Now().Add(wait)
	for {
		err := f.ApplyFeed(ctx, msg)
		if !errors.Is(err, model.ErrLocked) || time.Now().After(deadline) {
			if err != nil {
				return true, fmt.Errorf("settle %s from Stripe: %w", msg.PaymentIntent, err)
			}
			return true, nil
		}
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
