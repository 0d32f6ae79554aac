// Package settle is the billing core's kernel (docs/design.md §8): what one
// payment outcome does to a period. It reads no clock, store or Stripe.
package settle

import (
	"fmt"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/actions"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
)

// Settling a period with a payment outcome (docs/design.md §8): the one
// place that says what an outcome does to a period. The scheduled
// collection, pay now, batches, the unknown-outcome resolver, the webhook
// feed and the cancel that finds a payment all call settle; the I/O around
// it (the claim, the Stripe call, the refund, the write) is theirs. settle
// reads no clock, store or Stripe: everything it needs is in its input, so
// every transition is testable as a table (settle_test.go).

// Happened is what the service learnt about one PaymentIntent of a period.
type Happened int

const (
	// HappenedUnknown: no trustworthy answer (timeout, 5xx). Nothing
	// changes: the attempt stays in flight until it is resolved.
	HappenedUnknown Happened = iota
	// HappenedSucceeded: money moved.
	HappenedSucceeded
	// HappenedProcessing: a bank debit was submitted; it settles later.
	HappenedProcessing
	// HappenedDeclined: the charge, or a submitted bank debit, failed.
	HappenedDeclined
	// HappenedRefunded: the charge was refunded in full.
	HappenedRefunded
	// HappenedLost: Stripe has no PaymentIntent of the attempt in flight
	// (asked past the idempotency window): it was never made.
	HappenedLost
)

// HappenedOf maps an answer Stripe gave to a charge (or a lookup found) to
// what happened. An answer is never unknown (no answer is an error, and the
// attempt stays in flight without settling): what is neither a success nor
// a processing debit left the PaymentIntent unpaid, a decline.
func HappenedOf(o model.Outcome) Happened {
	switch o {
	case model.Succeeded:
		return HappenedSucceeded
	case model.Processing:
		return HappenedProcessing
	}
	return HappenedDeclined
}

// Input is the input of settle: a period as read, and what happened to one
// of its PaymentIntents.
type Input struct {
	Period model.Period
	// Sub is the period's subscription as read: its time zone, its status
	// and what a period not charged yet is charged with (a returned debit's
	// retries).
	Sub      model.Subscription
	Happened Happened
	// PaymentIntent the outcome is about ("" when Stripe made none).
	PaymentIntent string
	// OfAttempt: the outcome is the answer to the period's attempt in
	// flight (the charge's answer, a lookup, or the webhook of an attempt
	// whose answer was lost). Otherwise the PaymentIntent is one already
	// recorded for the period (Known) and the outcome came by webhook or
	// by a read.
	OfAttempt bool
	Known     bool
	// AttemptNo is the attempt the answer is of (0 when it came by
	// webhook): the action names it.
	AttemptNo   int
	Error       string
	DeclineCode string
	// Method is how a success was paid, when known already.
	Method model.PaymentMethodUsed
	// Amount, Currency and SKU are what the PaymentIntent charged, and
	// RefAmount, RefCurrency what its reference recorded (zero: none): a
	// payment of an earlier attempt is for that attempt's amount and plan.
	Amount      int64
	Currency    string
	SKU         string
	RefAmount   int64
	RefCurrency string
	// RefundedAlready: the PaymentIntent's reference records a refund of a
	// duplicate success.
	RefundedAlready bool
	// Process of the change.
	Process model.Process
	// Today is the subscription's date; Processed the receipt's (the
	// event's date for a webhook).
	Today, Processed dates.Date
	Now              time.Time
	// ReceiptExpires is when a receipt written now expires (real time).
	ReceiptExpires time.Time
	Rules          Rules
}

// Rules are the configured rules settle applies.
type Rules struct {
	Retry dates.RetryPolicy
	// Hard reports whether a decline code is one retrying cannot fix.
	Hard func(code string) bool
}

// Settled is what settle decided.
type Settled struct {
	// Write: Period is written, with a history entry.
	Write  bool
	Period model.Period
	// Receipt of a success that collects the period (nil: none).
	Receipt *model.Receipt
	// Ref is the PaymentIntent's reference to write (nil: none).
	Ref *model.PaymentRef
	// Action is sent before the write (nil: none).
	Action *actions.Action
	// Charged: the period was attempted or paid: the subscription moves on
	// (movedOn). GaveUp: a lost attempt made the period STALE: the
	// subscription moves past it if it was its next period.
	Charged, GaveUp bool
	// Refund names a second success to refund before the write (then
	// refunded records the refund's id).
	Refund string
	// Confirm: apply only if Stripe says the PaymentIntent is processing
	// now (a redelivered event of a bank debit that failed since).
	Confirm bool
	// RetryLater says why the outcome cannot be applied yet.
	RetryLater string
	// Warn is something an operator should see in the log.
	Warn string
	// Declined is the class of a decline recorded ("hard", "soft"; "" none).
	Declined string
	// what the second success to refund charged
	refundAmount   int64
	refundCurrency string
}

// Decide applies one outcome to a period: the rules of docs/design.md §8
// (one successful charge per period, duplicate refunds, hard declines,
// retries and STALE, late payments) in one place.
func Decide(in Input) Settled {
	p := in.Period
	switch {
	case in.Happened == HappenedUnknown:
		return Settled{Period: p}
	case in.Happened == HappenedLost:
		return settleLost(in)
	case in.Happened == HappenedRefunded:
		return settleRefunded(in)
	case in.Happened == HappenedSucceeded:
		return settleSucceeded(in)
	case in.OfAttempt && (p.Status == model.Scheduled || p.Status == model.Error):
		return settleAttempt(in) // a processing debit or a decline, answering the attempt
	case in.Happened == HappenedProcessing && in.Known && p.InFlightKey == "" && p.Status == model.Error:
		// The customer paid an earlier PaymentIntent of the period with a
		// bank debit: it settles later, and no attempt is made meanwhile.
		p.Status, p.Process, p.UpdatedEvent, p.Error, p.NextAttemptDate = model.ACHSent, in.Process, "ach-sent", "", dates.Date{}
		p.TransactionID = in.PaymentIntent
		return Settled{Write: true, Period: p, Confirm: true}
	case in.Happened == HappenedDeclined && p.Status == model.ACHSent && p.TransactionID == in.PaymentIntent:
		return settleReturned(in)
	}
	return Settled{Period: p} // recorded already, or an older event
}

// settleAttempt records the answer to the attempt in flight: COMPLETED
// with a receipt, ACHSENT, or ERROR with its next look.
func settleAttempt(in Input) Settled {
	p := in.Period
	before := p
	// A decline's retries count from the day the attempt was made: when its
	// answer comes only later (resent, looked up, a webhook), the retry due
	// since then is due at once.
	retryFrom := in.Today
	if p.InFlightKey != "" && !p.InFlightAt.IsZero() {
		if d := dates.In(p.InFlightAt, in.Sub.Location()); d.Before(in.Today) {
			retryFrom = d
		}
	}
	p.Attempts++
	p.InFlightKey, p.InFlightAt, p.InFlightSent = "", time.Time{}, time.Time{}
	p.Process = in.Process
	out := Settled{Write: true, Charged: true}
	if in.PaymentIntent != "" {
		p.TransactionID = in.PaymentIntent
		ref := model.AttemptRef(p, in.PaymentIntent)
		out.Ref = &ref
	}
	switch in.Happened {
	case HappenedSucceeded:
		a := model.PaymentAction(model.ActionPaymentCompleted, before, in.PaymentIntent, in.AttemptNo, "", in.Now)
		out.Action = &a
		out.Receipt = complete(&p, in)
	case HappenedProcessing:
		p.Status, p.UpdatedEvent, p.Error, p.NextAttemptDate = model.ACHSent, "ach-sent", "", dates.Date{}
		p.DeclineCode, p.NotRetried = "", false
	default:
		a := model.PaymentAction(model.ActionPaymentFailed, before, in.PaymentIntent, in.AttemptNo, in.Error, in.Now)
		a.BillingDetails.DeclineCode, a.BillingDetails.NotRetried = in.DeclineCode, in.hard(in.DeclineCode)
		out.Action = &a
		out.Declined = declined(&p, in, "attempt-failed", retryFrom)
	}
	out.Period = p
	out.WithMethod(in.Method)
	return out
}

// settleSucceeded: money moved. A customer may pay any payable
// PaymentIntent of a period at any time: the success collects the period,
// or is refunded when the period already has one or ended WAIVED or
// CANCELLED; a success for a STALE period completes it (a late payment).
func settleSucceeded(in Input) Settled {
	p, pi := in.Period, in.PaymentIntent
	ended := p.Status == model.Completed || p.Status == model.Refunded || p.Status == model.Waived || p.Status == model.Cancelled || p.Status == model.PausedSkipped
	switch {
	case (p.Status == model.Completed || p.Status == model.Refunded) && p.TransactionID == pi:
		return Settled{Period: p} // recorded already
	case p.InFlightKey != "" && in.Known:
		// An earlier attempt's PaymentIntent succeeded while another is in
		// flight: once that one's outcome is recorded, this one completes
		// the period or is refunded.
		return Settled{Period: p, RetryLater: fmt.Sprintf("success of %s while an attempt is in flight", pi)}
	case ended:
		if in.RefundedAlready {
			return Settled{Period: p} // a redelivery, another replica
		}
		p.UpdatedEvent, p.Process = model.UpdatedEventDuplicateRefunded, in.Process
		return Settled{Write: true, Period: p, Refund: pi, refundAmount: in.Amount, refundCurrency: in.Currency}
	case in.OfAttempt:
		return settleAttempt(in)
	}
	// The period (SCHEDULED, ERROR, ACHSENT, or STALE: a late payment) is
	// collected, at the amount and plan of the attempt that was paid.
	out := Settled{Write: true, Charged: true}
	event := "completed"
	switch p.Status {
	case model.ACHSent:
		event = model.UpdatedEventACHCompleted
	case model.Error, model.Scheduled:
	default:
		out.Warn = "billing feed: payment succeeded on a period that had ended"
		event = model.UpdatedEventLatePayment
	}
	a := model.PaymentAction(model.ActionPaymentCompleted, p, pi, in.AttemptNo, "", in.Now)
	if in.Amount > 0 && in.Currency != "" {
		p.Amount, p.Currency = in.Amount, in.Currency
	}
	if in.SKU != "" {
		p.SKU = in.SKU
	}
	a.BillingDetails.SKU, a.BillingDetails.Amount, a.BillingDetails.Currency = p.SKU, p.Amount, p.Currency
	out.Action = &a
	p.TransactionID, p.Process = pi, in.Process
	out.Receipt = complete(&p, in)
	p.UpdatedEvent = event
	ref := model.AttemptRef(p, pi)
	if in.RefCurrency != "" {
		ref.Amount, ref.Currency = in.RefAmount, in.RefCurrency
	}
	out.Ref = &ref
	out.Period = p
	out.WithMethod(in.Method)
	return out
}

// settleReturned: a submitted bank debit failed. Its retries are new
// charges of a period not charged: they take the subscription's amount,
// plan and payment method (a change made while it was in flight passed it
// by); a subscription cancelled meanwhile ends it.
func settleReturned(in Input) Settled {
	p, sub := in.Period, in.Sub
	a := model.PaymentAction(model.ActionPaymentFailed, p, in.PaymentIntent, in.AttemptNo, in.Error, in.Now)
	a.BillingDetails.DeclineCode, a.BillingDetails.NotRetried = in.DeclineCode, in.hard(in.DeclineCode)
	class := declined(&p, in, model.UpdatedEventACHReturned, in.Today)
	p.Process = in.Process
	p.Amount, p.SKU, p.PaymentDetails.PaymentMethod = sub.Amount, sub.SKU, sub.PaymentDetails.PaymentMethod
	if sub.Status == model.SubCancelled {
		p.Status, p.NextAttemptDate, p.CompletionDate = model.Cancelled, dates.Date{}, in.Now
	}
	return Settled{Write: true, Period: p, Action: &a, Declined: class}
}

// settleRefunded: a full refund ends a collected period.
func settleRefunded(in Input) Settled {
	p, pi := in.Period, in.PaymentIntent
	switch {
	case p.Status == model.Completed && p.TransactionID == pi:
		p.Status, p.Process, p.UpdatedEvent, p.CompletionDate = model.Refunded, in.Process, model.UpdatedEventRefunded, in.Now
		return Settled{Write: true, Period: p}
	case p.Status == model.Refunded, in.RefundedAlready: // the refund of a duplicate success
		return Settled{Period: p}
	case p.Status == model.Scheduled || p.Status == model.ACHSent || p.Status == model.Error:
		// Events arrive out of order: the success has not been applied yet.
		return Settled{Period: p, RetryLater: fmt.Sprintf("refund of %s before its success", pi)}
	}
	return Settled{Period: p, Warn: "billing feed: refund of a charge this period does not record; ignored"}
}

// settleLost records an attempt Stripe never made: it is over (a new one
// may be made), or the period is given up on when it is past its stale
// date.
func settleLost(in Input) Settled {
	p := in.Period
	p.Attempts++
	p.InFlightKey, p.InFlightAt, p.InFlightSent = "", time.Time{}, time.Time{}
	p.Process, p.UpdatedEvent = in.Process, "attempt-lost"
	p.Error = fmt.Sprintf("attempt %d: no PaymentIntent at Stripe (its outcome was unknown); not charged", p.Attempts)
	stale := in.Rules.Retry.IsStale(p.Due(), in.Today)
	if stale {
		p.Status, p.UpdatedEvent, p.CompletionDate, p.NextAttemptDate = model.Stale, "stale", in.Now, dates.Date{}
	}
	return Settled{Write: true, Period: p, GaveUp: stale}
}

// complete marks p COMPLETED and returns its receipt.
func complete(p *model.Period, in Input) *model.Receipt {
	r := &model.Receipt{
		AccountID: p.AccountID, SubscriptionID: p.SubscriptionID, SKU: p.SKU, ProcessedDate: in.Processed,
		BillingDate: p.BillingDate, Amount: p.Amount, Currency: p.Currency, PaymentIntent: in.PaymentIntent,
		ExpiresAt: in.ReceiptExpires,
	}
	p.Status, p.Error, p.NextAttemptDate, p.CompletionDate = model.Completed, "", dates.Date{}, in.Now
	p.DeclineCode, p.NotRetried, p.UpdatedEvent = "", false, "completed"
	return r
}

// declined writes a declined attempt's outcome into p: ERROR with the
// code, and its next look — the first retry day after retryFrom, or, for a
// hard decline (docs/design.md §8: retrying cannot fix it), its stale date.
// It returns the decline's class.
func declined(p *model.Period, in Input, event string, retryFrom dates.Date) string {
	p.Status, p.UpdatedEvent, p.Error, p.DeclineCode, p.NotRetried = model.Error, event, in.Error, in.DeclineCode, false
	p.HardDeclinedMethod = ""
	p.NextAttemptDate, _ = in.Rules.Retry.NextAttempt(p.Due(), retryFrom)
	if in.hard(in.DeclineCode) {
		p.NotRetried, p.UpdatedEvent = true, "declined-not-retried"
		// The method refused: a platform trigger waits for another one.
		p.HardDeclinedMethod = p.PaymentDetails.PaymentMethod
		p.Error = "not retried: " + in.DeclineCode + " (" + in.Error + ")"
		p.NextAttemptDate = in.Rules.Retry.StaleDate(p.Due())
	}
	return model.DeclineClass(p.NotRetried)
}

func (in Input) hard(code string) bool {
	return code != "" && in.Rules.Hard != nil && in.Rules.Hard(code)
}

// WithMethod records how a success was paid, on its receipt and action
// (known only after Stripe is asked, for a success that came by webhook).
func (st *Settled) WithMethod(m model.PaymentMethodUsed) {
	if st.Receipt == nil {
		return
	}
	st.Receipt.PaymentMethodType, st.Receipt.PaymentMethodLast4 = m.Type, m.Last4
	if st.Action != nil {
		st.Action.BillingDetails.PaymentMethodType, st.Action.BillingDetails.PaymentMethodLast4 = m.Type, m.Last4
	}
}

// Refunded records id, the refund of the second success st.Refund, on the
// period and on the PaymentIntent's reference (one refund per
// PaymentIntent).
func (st *Settled) Refunded(id string) {
	p, amount, currency := &st.Period, st.refundAmount, st.refundCurrency
	p.Error = fmt.Sprintf("second successful charge %s (%d %s) refunded: %s", st.Refund, amount, currency, id)
	st.Ref = &model.PaymentRef{PaymentIntent: st.Refund, AccountID: p.AccountID, SubscriptionID: p.SubscriptionID,
		BillingDate: p.BillingDate, Amount: amount, Currency: currency, RefundID: id}
}

// Put adds st's writes to tx.
func (st *Settled) Put(tx *model.Tx) {
	if st.Ref != nil {
		tx.PutPaymentRef(*st.Ref)
	}
	if st.Receipt != nil {
		tx.PutReceipt(*st.Receipt)
	}
	tx.PutPeriod(&st.Period, false)
}
