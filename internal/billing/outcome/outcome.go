// Package outcome records a payment outcome: settle decides what it does to
// the period (a pure function), and the Recorder does the I/O around that
// decision: the refund of a second success, the action, the period, its
// receipt and reference and the subscription moved on, in one transaction.
// The collection, the webhook feed and the lifecycle (a cancel that finds a
// payment) all record through it.
package outcome

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/env"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/billing/schedule"
	"github.com/stripe-payments/stripe-payments/internal/billing/settle"
	"github.com/stripe/stripe-go/v76"
)

// Recorder records outcomes with an Env's collaborators and clock.
type Recorder struct {
	*env.Env
}

// forSub is the Recorder on sub's clock (env.Env.ForSub).
func (r *Recorder) forSub(ctx context.Context, sub model.Subscription) (*Recorder, error) {
	e, err := r.ForSub(ctx, sub)
	if err != nil {
		return nil, err
	}
	return &Recorder{Env: e}, nil
}

// Input is the input of settle for a period of sub, with the
// service's rules and clocks filled in.
func (r *Recorder) Input(sub model.Subscription, p model.Period, h settle.Happened, pi string, proc model.Process, today dates.Date) settle.Input {
	return settle.Input{Period: p, Sub: sub, Happened: h, PaymentIntent: pi, Process: proc, Today: today, Processed: today,
		Now: r.Now(), ReceiptExpires: r.Wall().Add(r.Cfg.ReceiptTTL), // kept for real time, whatever a test clock says
		Rules: settle.Rules{Retry: r.Cfg.Retry, Hard: r.HardDecline}}
}

// Record writes what settle decided, in tx (whose cause says what made the
// change): the refund of a second success first (Stripe's answer goes into
// the history), then the action (it states what Stripe did, so it goes out
// before the write: a rerun sends the same dedupe key), then the period,
// its receipt and reference and the subscription moved on, in one
// transaction. sub is updated as written; log names the change's subject.
func (r *Recorder) Record(ctx context.Context, log *slog.Logger, tx *model.Tx, sub *model.Subscription, st *settle.Settled, today dates.Date) error {
	if st.Declined != "" {
		if o, ok := r.Obs.(model.DeclineObserver); ok {
			o.Declined(st.Declined)
		}
	}
	p := &st.Period
	if st.Refund != "" {
		if r.Charger == nil {
			return fmt.Errorf("refund duplicate %s: no Stripe charger configured", st.Refund)
		}
		log.Error("billing feed: a second successful charge for one period (or one that ended "+string(p.Status)+"); refunding it",
			"recorded_payment_intent", p.TransactionID, "status", string(p.Status))
		id, err := r.Charger.Refund(ctx, p.PaymentDetails.StripeAccount, st.Refund, model.RefundKey(st.Refund))
		if err != nil {
			return fmt.Errorf("refund duplicate %s: %w", st.Refund, err)
		}
		st.Refunded(id)
	}
	if st.Action != nil {
		if err := r.Notifier.Notify(ctx, *st.Action); err != nil {
			return err
		}
	}
	st.Put(tx)
	// The subscription moves on: past p when it was its next period (the
	// cursor), and a charge of p is recorded on it.
	moved := (st.Charged || st.GaveUp) && schedule.OnCursor(*sub, *p)
	if moved {
		if err := r.Sched.Advance(ctx, tx, sub, p.BillingDate, today, p.Process, tx.Now()); err != nil {
			return err
		}
	}
	charged := st.Charged && schedule.Charged(sub, *p)
	if moved || charged {
		tx.PutSubscription(sub)
	}
	if err := r.Store.Commit(ctx, tx); err != nil {
		return err
	}
	if st.Refund != "" {
		if o, ok := r.Obs.(model.DuplicateObserver); ok {
			o.DuplicateRefunded()
		}
	}
	return nil
}

// Apply settles a period with what happened to one of its
// PaymentIntents as Stripe told it (an event, or a read), under the
// account's lock: the kernel decides (settle), then Stripe is asked what
// the decision needs (the debit still processing, how a success was paid)
// and the change is written with cause.
func (r *Recorder) Apply(ctx context.Context, log *slog.Logger, sub model.Subscription, in settle.Input, cause string) error {
	st := settle.Decide(in)
	switch {
	case st.RetryLater != "":
		return fmt.Errorf("%s: %w", st.RetryLater, model.ErrRetryLater)
	case st.Warn != "":
		log.Warn(st.Warn, "status", string(in.Period.Status), "recorded_payment_intent", in.Period.TransactionID)
	}
	if !st.Write {
		return nil
	}
	if st.Confirm {
		// A redelivered event of a debit that failed since is not one
		// that is processing: Stripe says what the PaymentIntent is now.
		if r.Charger == nil {
			return nil
		}
		pi, err := r.Charger.Retrieve(ctx, in.Period.PaymentDetails.StripeAccount, in.PaymentIntent)
		if err != nil {
			return err
		}
		if pi.Status != stripe.PaymentIntentStatusProcessing {
			return nil
		}
	}
	if st.Receipt != nil && in.Method == (model.PaymentMethodUsed{}) {
		// It collects the period: its receipt says how it was paid.
		st.WithMethod(r.chargeMethod(ctx, in.Period.PaymentDetails.StripeAccount, in.PaymentIntent, log))
	}
	if err := r.Record(ctx, log, model.NewTx(cause, in.Now), &sub, &st, in.Today); err != nil {
		return err
	}
	log.Info("billing feed applied", "status", string(st.Period.Status), "updated_event", st.Period.UpdatedEvent)
	return nil
}

// chargeMethod asks Stripe how PaymentIntent pi on account was paid (its
// latest charge's payment_method_details), for the receipt of a success a
// webhook reports (its event carries the charge's id only). Best effort:
// when Stripe cannot be asked the receipt is written without it (docs/design.md §4:
// "when it says"), never held back.
func (r *Recorder) chargeMethod(ctx context.Context, account, pi string, log *slog.Logger) model.PaymentMethodUsed {
	if r.Charger == nil {
		return model.PaymentMethodUsed{}
	}
	got, err := r.Charger.Retrieve(ctx, account, pi)
	if err != nil {
		log.Warn("billing feed: could not read how the payment was paid; its receipt says nothing of it", "error", err)
		return model.PaymentMethodUsed{}
	}
	return model.MethodOf(got)
}
