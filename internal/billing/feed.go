package billing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/actions"
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
	inFlight := p.InFlightKey != "" && !v.known
	c := &feedChange{msg: msg, log: log, sub: sub, p: p, pi: msg.PaymentIntent, inFlight: inFlight, known: v.known, ref: v.ref,
		now: now, today: today, evDate: evDate, tx: NewTx("evt:"+msg.EventID, now)}
	var (
		action *actions.Action
		apply  bool
	)
	switch msg.Type {
	case "payment_intent.processing":
		apply, err = s.feedProcessing(ctx, c)
	case "payment_intent.succeeded":
		action, apply, err = s.feedSucceeded(ctx, c)
	case "payment_intent.payment_failed":
		action, apply, err = s.feedFailed(ctx, c)
	case "charge.refunded":
		apply, err = s.feedRefunded(c)
	}
	if err != nil || !apply {
		return err
	}
	if action != nil {
		if err := s.notifier.Notify(ctx, *action); err != nil {
			return err
		}
	}
	if err := s.store.Commit(ctx, c.tx); err != nil {
		return fmt.Errorf("apply %s: %w", msg.Type, err)
	}
	if c.refunded {
		if o, ok := s.obs.(DuplicateObserver); ok {
			o.DuplicateRefunded()
		}
	}
	log.Info("billing feed applied", "status", string(c.p.Status), "updated_event", c.p.UpdatedEvent)
	return nil
}

// feedChange is one feed event being applied under the account's lock: the
// period and its subscription as read, and the change built in tx.
type feedChange struct {
	msg           FeedMessage
	log           *slog.Logger
	sub           Subscription
	p             Period
	pi            string
	inFlight      bool // the period's attempt in flight is not recorded with pi
	known         bool // pi is recorded for the period (an attempt's)
	ref           *PaymentRef
	refunded      bool // the change refunds a duplicate success
	now           time.Time
	today, evDate dates.Date
	tx            *Tx
}

// feedProcessing: a bank debit was submitted. apply is false when there is
// nothing to write.
func (s *Service) feedProcessing(ctx context.Context, c *feedChange) (apply bool, err error) {
	p := &c.p
	switch {
	case c.inFlight && (p.Status == Scheduled || p.Status == Error):
		res := ChargeResult{Outcome: Processing, PaymentIntent: c.pi}
		if err := s.record(ctx, c.tx, &c.sub, p, res, ProcWebhook, c.today, c.evDate, c.now); err != nil {
			return false, err
		}
		return true, nil
	case c.known && p.InFlightKey == "" && p.Status == Error && s.charger != nil:
		// The customer paid an earlier PaymentIntent of the period with a
		// bank debit: it settles later; no attempt is made meanwhile. A
		// redelivered event of a debit that failed since is not that:
		// Stripe says what the PaymentIntent is now.
		pi, err := s.charger.Retrieve(ctx, p.PaymentDetails.StripeAccount, c.pi)
		if err != nil {
			return false, err
		}
		if pi.Status != stripe.PaymentIntentStatusProcessing {
			return false, nil
		}
		p.Status, p.Process, p.UpdatedEvent, p.Error, p.NextAttemptDate = ACHSent, ProcWebhook, "ach-sent", "", dates.Date{}
		p.TransactionID = c.pi
		c.tx.PutPeriod(p, false)
		return true, nil
	default:
		return false, nil // recorded already, or an older event
	}
}

// feedSucceeded: money moved. A customer may pay any payable
// PaymentIntent of a period at any time (docs/design.md §8): the success collects
// the period, or is refunded when the period already has one or ended
// WAIVED or CANCELLED (payable.go).
func (s *Service) feedSucceeded(ctx context.Context, c *feedChange) (*actions.Action, bool, error) {
	p, pi := &c.p, c.pi
	a := paymentAction(ActionPaymentCompleted, *p, pi, 0, "", c.now)
	var m PaymentMethodUsed
	if p.Status != Completed && p.Status != Refunded && p.Status != Waived && p.Status != Cancelled && p.Status != PausedSkipped &&
		!(p.InFlightKey != "" && c.known) {
		// It collects the period: its receipt says how it was paid.
		m = s.chargeMethod(ctx, p.PaymentDetails.StripeAccount, pi, c.log)
		a.BillingDetails.PaymentMethodType, a.BillingDetails.PaymentMethodLast4 = m.Type, m.Last4
	}
	switch {
	case (p.Status == Completed || p.Status == Refunded) && p.TransactionID == pi:
		return nil, false, nil // the job recorded it
	case p.InFlightKey != "" && c.known:
		// An earlier attempt's PaymentIntent succeeded while another is in
		// flight: once that one's outcome is recorded, this one completes
		// the period or is refunded.
		return nil, false, fmt.Errorf("success of %s while an attempt is in flight: %w", pi, ErrRetryLater)
	case p.Status == Completed || p.Status == Refunded || p.Status == Waived || p.Status == Cancelled || p.Status == PausedSkipped:
		apply, err := s.refundDuplicate(ctx, c)
		return nil, apply, err
	case c.inFlight:
		res := ChargeResult{Outcome: Succeeded, PaymentIntent: pi, Method: m}
		if err := s.record(ctx, c.tx, &c.sub, p, res, ProcWebhook, c.today, c.evDate, c.now); err != nil {
			return nil, false, err
		}
	default:
		// Money moved: the period (SCHEDULED, ERROR, ACHSENT, or STALE: a
		// late payment) is collected, at the amount of the attempt that
		// was paid.
		if p.Status != ACHSent && p.Status != Error && p.Status != Scheduled {
			c.log.Warn("billing feed: payment succeeded on a period that had ended", "status", string(p.Status))
			p.UpdatedEvent = "late-success-after-" + string(p.Status)
		}
		lateAmount(p, c.msg.Amount, c.msg.Currency)
		latePlan(p, c.msg.SKU)
		// The action says what was paid: the paying attempt's amount and plan.
		a.BillingDetails.SKU, a.BillingDetails.Amount, a.BillingDetails.Currency = p.SKU, p.Amount, p.Currency
		p.TransactionID, p.Process = pi, ProcWebhook
		s.complete(c.tx, p, pi, m, c.evDate, c.now)
		c.tx.PutPeriod(p, false)
		ref := attemptRef(*p, pi)
		if c.ref != nil && c.ref.Currency != "" {
			ref.Amount, ref.Currency = c.ref.Amount, c.ref.Currency
		}
		c.tx.PutPaymentRef(ref)
		if err := s.movedOn(ctx, c.tx, &c.sub, *p, c.today, ProcWebhook, c.now); err != nil {
			return nil, false, err
		}
	}
	return &a, true, nil
}

// feedFailed: the charge (or a submitted bank debit) failed.
func (s *Service) feedFailed(ctx context.Context, c *feedChange) (*actions.Action, bool, error) {
	p, pi, msg := &c.p, c.pi, c.msg
	a := paymentAction(ActionPaymentFailed, *p, pi, 0, msg.Error, c.now)
	a.BillingDetails.DeclineCode, a.BillingDetails.NotRetried = msg.DeclineCode, s.HardDecline(msg.DeclineCode)
	switch {
	case c.inFlight && (p.Status == Scheduled || p.Status == Error):
		res := ChargeResult{Outcome: Declined, PaymentIntent: pi, Error: msg.Error, DeclineCode: msg.DeclineCode}
		if err := s.record(ctx, c.tx, &c.sub, p, res, ProcWebhook, c.today, c.evDate, c.now); err != nil {
			return nil, false, err
		}
	case p.Status == ACHSent && p.TransactionID == pi:
		s.declined(p, ChargeResult{Outcome: Declined, PaymentIntent: pi, Error: msg.Error, DeclineCode: msg.DeclineCode}, "ach-failed", c.today)
		p.Process = ProcWebhook
		// The debit was in flight, so an amount, plan or payment method
		// change made meanwhile passed it by; its retries are new charges of
		// a period not charged: they take the subscription's (docs/design.md §8).
		p.Amount, p.SKU, p.PaymentDetails.PaymentMethod = c.sub.Amount, c.sub.SKU, c.sub.PaymentDetails.PaymentMethod
		if c.sub.Status == SubCancelled {
			p.Status, p.NextAttemptDate, p.CompletionDate = Cancelled, dates.Date{}, c.now
		}
		c.tx.PutPeriod(p, false)
	default:
		return nil, false, nil // recorded already, or an older event
	}
	return &a, true, nil
}

// feedRefunded: a full refund ends a collected period.
func (s *Service) feedRefunded(c *feedChange) (bool, error) {
	p, pi := &c.p, c.pi
	switch {
	case p.Status == Completed && p.TransactionID == pi:
		p.Status, p.Process, p.UpdatedEvent, p.CompletionDate = Refunded, ProcWebhook, "refunded", c.now
		c.tx.PutPeriod(p, false)
		return true, nil
	case p.Status == Refunded:
		return false, nil
	case c.ref != nil && c.ref.RefundID != "":
		return false, nil // the refund of a duplicate success (payable.go)
	case p.Status == Scheduled || p.Status == ACHSent || p.Status == Error:
		// The success has not been applied yet (events arrive out of
		// order): the outbox delivers this again later.
		return false, fmt.Errorf("refund of %s before its success: %w", pi, ErrRetryLater)
	default:
		c.log.Warn("billing feed: refund of a charge this period does not record; ignored", "status", string(p.Status),
			"recorded_payment_intent", p.TransactionID)
		return false, nil
	}
}
