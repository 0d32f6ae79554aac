package tracking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/pgtx"
	"github.com/stripe-payments/stripe-payments/internal/stripeevent"
	"github.com/stripe-payments/stripe-payments/internal/stripeid"
)

// Payment flows of the reference: legacy purchase (payment_intent.succeeded
// -> payment paid, fulfil; payment_intent.payment_failed -> payment failed)
// and one-off product purchase (payment succeeded -> is the invoice part of a
// subscription? non-recurring -> fulfil). invoice.paid and
// invoice.payment_failed carry the same outcome for one-off invoices (and an
// invoice paid out of band has no PaymentIntent event at all); whichever
// arrives first applies, the other finds the work done.

// ExpandInvoice is the preparer of payment_intent events: when the
// PaymentIntent belongs to an invoice that the payload only names, it fetches
// the invoice from Stripe, before the transaction opens, and expands it into
// ev so the applier sees whether it belongs to a subscription and its
// metadata. The lookup is bounded by the flows' timeout.
func (f *Flows) ExpandInvoice(ctx context.Context, ev *stripe.Event) error {
	obj, err := stripeevent.Object(ev)
	if err != nil {
		return unprocessable("%v", err)
	}
	var id string
	switch ref := obj["invoice"].(type) {
	case string:
		id = ref
	case map[string]any:
		// Expanded objects carry "object"; a bare {"id": ...} is only a
		// reference, and deciding "not recurring" from it could fulfil a
		// subscription payment.
		if _, expanded := ref["object"]; !expanded {
			id, _ = ref["id"].(string)
		}
	}
	if id == "" {
		return nil // no invoice, or already expanded
	}
	if !stripeid.Valid(id, "in_") {
		// Never put an arbitrary string into a Stripe API path.
		return unprocessable("payment intent names invoice %q, which is not an invoice id", clip(id))
	}
	if f.invoices == nil {
		return errors.New("payment intent names an invoice but no invoice lookup is configured")
	}
	if f.processed != nil {
		done, err := f.processed(ctx, ev.ID)
		if err != nil {
			return fmt.Errorf("look up ledger: %w", err)
		}
		if done {
			return nil // a redelivery: no Stripe call for an event already applied
		}
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	raw, err := f.invoices(ctx, ev.Account, id)
	if err != nil {
		return fmt.Errorf("look up invoice %s: %w", id, err)
	}
	var inv map[string]any
	if err := json.Unmarshal(raw, &inv); err != nil {
		return fmt.Errorf("decode invoice %s: %w", id, err)
	}
	if inv["id"] != id {
		return fmt.Errorf("look up invoice %s: Stripe answered with %v", id, inv["id"])
	}
	obj["invoice"] = inv
	if ev.Data.Raw, err = json.Marshal(obj); err != nil {
		return fmt.Errorf("re-encode event object: %w", err)
	}
	return nil
}

// settlement is the outcome a payment event reports.
type settlement struct {
	paymentIntent string // "" for an invoice paid without one (out of band)
	outcome       PaymentStatus
	recurring     bool   // the invoice belongs to a subscription
	hints         []hint // metadata of the PaymentIntent and its invoice
}

// PaymentIntentSucceeded: the payment new (or failed) → paid; a purchase
// whose payment is not a subscription invoice's is fulfilled.
func (f *Flows) PaymentIntentSucceeded(ctx context.Context, tx pgtx.Tx, ev *stripe.Event) error {
	s, err := paymentIntentSettlement(ev, PaymentPaid)
	if err != nil {
		return err
	}
	return f.settle(ctx, tx, f.event(ev), s)
}

// PaymentIntentFailed: the payment new → failed.
func (f *Flows) PaymentIntentFailed(ctx context.Context, tx pgtx.Tx, ev *stripe.Event) error {
	s, err := paymentIntentSettlement(ev, PaymentFailed)
	if err != nil {
		return err
	}
	return f.settle(ctx, tx, f.event(ev), s)
}

func paymentIntentSettlement(ev *stripe.Event, outcome PaymentStatus) (settlement, error) {
	var pi stripe.PaymentIntent
	if err := json.Unmarshal(ev.Data.Raw, &pi); err != nil {
		return settlement{}, unprocessable("decode payment intent: %v", err)
	}
	if !stripeid.Valid(pi.ID, "pi_") {
		return settlement{}, unprocessable("payment intent id %q is not a PaymentIntent id", clip(pi.ID))
	}
	s := settlement{paymentIntent: pi.ID, outcome: outcome}
	if h, ok := hintFrom(pi.Metadata); ok {
		s.hints = append(s.hints, h)
	}
	if inv := pi.Invoice; inv != nil && inv.ID != "" {
		if !stripeid.Valid(inv.ID, "in_") {
			return settlement{}, unprocessable("payment intent %s names invoice %q, which is not an invoice id", pi.ID, clip(inv.ID))
		}
		if inv.Object == "" {
			// Only the id: the preparer did not run or could not expand it.
			// Deciding "non-recurring" now could fulfil a subscription
			// payment; fail so the event is retried.
			return settlement{}, fmt.Errorf("payment intent %s: invoice %s is not expanded", pi.ID, inv.ID)
		}
		s.recurring = inv.Subscription != nil && inv.Subscription.ID != ""
		if h, ok := hintFrom(inv.Metadata); ok {
			s.hints = append(s.hints, h)
		}
	}
	return s, nil
}

// InvoicePaid settles a one-off invoice's payment as PaymentIntentSucceeded
// does (an invoice paid out of band has no PaymentIntent event).
func (f *Flows) InvoicePaid(ctx context.Context, tx pgtx.Tx, ev *stripe.Event) error {
	return f.invoiceSettled(ctx, tx, ev, PaymentPaid)
}

// InvoicePaymentFailed settles a one-off invoice's payment as failed.
func (f *Flows) InvoicePaymentFailed(ctx context.Context, tx pgtx.Tx, ev *stripe.Event) error {
	return f.invoiceSettled(ctx, tx, ev, PaymentFailed)
}

func (f *Flows) invoiceSettled(ctx context.Context, tx pgtx.Tx, ev *stripe.Event, outcome PaymentStatus) error {
	var inv stripe.Invoice
	if err := json.Unmarshal(ev.Data.Raw, &inv); err != nil {
		return unprocessable("decode invoice: %v", err)
	}
	s := settlement{outcome: outcome, recurring: inv.Subscription != nil && inv.Subscription.ID != ""}
	if inv.PaymentIntent != nil && inv.PaymentIntent.ID != "" {
		if !stripeid.Valid(inv.PaymentIntent.ID, "pi_") {
			return unprocessable("invoice %s names payment intent %q, which is not a PaymentIntent id", clip(inv.ID), clip(inv.PaymentIntent.ID))
		}
		s.paymentIntent = inv.PaymentIntent.ID
	}
	if h, ok := hintFrom(inv.Metadata); ok {
		s.hints = append(s.hints, h)
	}
	return f.settle(ctx, tx, f.event(ev), s)
}

// settle applies a payment outcome: find the tracked payment (or the
// purchase its metadata names), move it new -> paid | failed unless a newer
// event already spoke for it, and fulfil a non-recurring purchase on success.
func (f *Flows) settle(ctx context.Context, tx pgtx.Tx, e event, s settlement) error {
	log := e.log.With("payment_intent", s.paymentIntent)
	if s.recurring {
		// Recurring: the subscription's activation fulfils (reference,
		// "Payment events"); a payment row is never stored for it.
		log.Info("payment of a subscription invoice: no payment effect")
		return nil
	}
	p, pay, err := locatePayment(ctx, tx, e, s)
	if err != nil {
		return err
	}
	if p == nil {
		log.Info("payment not tracked: no effect")
		return nil
	}
	log = log.With("purchase_id", p.ID)
	if pay != nil {
		if stale(pay.LastEventCreated, e.created) {
			log.Info("stale event: the payment has seen a newer one", "last_event_id", pay.LastEventID)
			return nil
		}
		next := pay.Status
		switch {
		case pay.Status == PaymentNew:
			next = s.outcome
		case pay.Status == s.outcome:
			log.Info("payment already " + string(s.outcome))
		case pay.Status == PaymentFailed && s.outcome == PaymentPaid:
			// A PaymentIntent can succeed after a failed attempt (the buyer
			// retries with another card): the money was collected, so the
			// payment ends paid. Reference 004's diagram has no failed -> paid
			// arrow; migration 00011 adds it (docs/tracking.md "State machines", deviation from 004).
			next = PaymentPaid
			log.Info("payment succeeded after a failed attempt: failed -> paid")
		default:
			log.Warn("payment failure reported for a paid payment: ignored")
		}
		if _, err := tx.Exec(ctx, `UPDATE payments SET status = $2, last_event_id = $3, last_event_created = $4 WHERE id = $1`,
			pay.ID, next, e.id, e.created); err != nil {
			return fmt.Errorf("update payment %s: %w", pay.ID, translate(err))
		}
		if next != pay.Status {
			log.Info("payment " + string(next))
		}
	}
	if s.outcome != PaymentPaid {
		return nil
	}
	if p.Kind == KindRecurring {
		log.Warn("payment for a recurring purchase outside a subscription invoice: not fulfilling (the subscription fulfils)")
		return nil
	}
	return f.fulfil(ctx, tx, e, p, "")
}

// locatePayment finds and locks the purchase and payment an outcome is about:
// the payment row stored for the PaymentIntent, else the purchase named by
// the metadata (then the payment row is created: the event overtook the
// purchase API's write). Both nil: not tracked.
func locatePayment(ctx context.Context, tx pgtx.Tx, e event, s settlement) (*purchaseRow, *Payment, error) {
	var p *purchaseRow
	if s.paymentIntent != "" {
		var purchase uuid.UUID
		var account string
		err := tx.QueryRow(ctx, `SELECT purchase, stripe_account FROM payments WHERE id = $1`, s.paymentIntent).Scan(&purchase, &account)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return nil, nil, fmt.Errorf("find payment %s: %w", s.paymentIntent, err)
		case account != e.stripeAccount:
			e.log.Warn("event for a tracked payment from another Stripe account: ignored", "payment_intent", s.paymentIntent)
			return nil, nil, nil
		default:
			if p, err = lockPurchase(ctx, tx, purchase); err != nil {
				return nil, nil, err
			}
		}
	}
	for _, h := range s.hints {
		if p != nil {
			break
		}
		var err error
		if p, err = purchaseFromHint(ctx, tx, e, h); err != nil {
			return nil, nil, err
		}
	}
	if p == nil || s.paymentIntent == "" {
		return p, nil, nil
	}
	if _, err := tx.Exec(ctx, `INSERT INTO payments (id, account, stripe_account, purchase) VALUES ($1, $2, $3, $4)
		ON CONFLICT (id) DO NOTHING`, s.paymentIntent, p.Account, p.StripeAccount, p.ID); err != nil {
		return nil, nil, fmt.Errorf("insert payment %s: %w", s.paymentIntent, translate(err))
	}
	if _, err := tx.Exec(ctx, `UPDATE purchases SET payment_intent = $2 WHERE id = $1 AND payment_intent IS NULL`,
		p.ID, s.paymentIntent); err != nil {
		return nil, nil, fmt.Errorf("record payment intent on purchase %s: %w", p.ID, translate(err))
	}
	var pay Payment
	err := tx.QueryRow(ctx, `SELECT id, purchase, status, coalesce(last_event_id, ''), last_event_created FROM payments WHERE id = $1 FOR UPDATE`,
		s.paymentIntent).Scan(&pay.ID, &pay.Purchase, &pay.Status, &pay.LastEventID, &pay.LastEventCreated)
	if err != nil {
		return nil, nil, fmt.Errorf("lock payment %s: %w", s.paymentIntent, err)
	}
	if pay.Purchase != p.ID {
		e.log.Warn("payment belongs to another purchase than its metadata names: ignored",
			"payment_intent", pay.ID, "purchase_id", p.ID)
		return nil, nil, nil
	}
	return p, &pay, nil
}
