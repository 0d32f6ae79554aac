package billing

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/billing/settle"
)

// settleInput is the input of settle for a period of sub, with the
// service's rules and clocks filled in.
func (s *Service) settleInput(sub Subscription, p Period, h settle.Happened, pi string, proc Process, today dates.Date) settle.Input {
	return settle.Input{Period: p, Sub: sub, Happened: h, PaymentIntent: pi, Process: proc, Today: today, Processed: today,
		Now: s.now(), ReceiptExpires: s.wall().Add(s.cfg.ReceiptTTL), // kept for real time, whatever a test clock says
		Rules: settle.Rules{Retry: s.cfg.Retry, Hard: s.HardDecline}}
}

// record writes what settle decided, in tx (whose cause says what made the
// change): the refund of a second success first (Stripe's answer goes into
// the history), then the action (it states what Stripe did, so it goes out
// before the write: a rerun sends the same dedupe key), then the period,
// its receipt and reference and the subscription moved on, in one
// transaction. sub is updated as written; log names the change's subject.
func (s *Service) record(ctx context.Context, log *slog.Logger, tx *Tx, sub *Subscription, st *settle.Settled, today dates.Date) error {
	if st.Declined != "" {
		if o, ok := s.obs.(DeclineObserver); ok {
			o.Declined(st.Declined)
		}
	}
	p := &st.Period
	if st.Refund != "" {
		if s.charger == nil {
			return fmt.Errorf("refund duplicate %s: no Stripe charger configured", st.Refund)
		}
		log.Error("billing feed: a second successful charge for one period (or one that ended "+string(p.Status)+"); refunding it",
			"recorded_payment_intent", p.TransactionID, "status", string(p.Status))
		id, err := s.charger.Refund(ctx, p.PaymentDetails.StripeAccount, st.Refund, RefundKey(st.Refund))
		if err != nil {
			return fmt.Errorf("refund duplicate %s: %w", st.Refund, err)
		}
		st.Refunded(id)
	}
	if st.Action != nil {
		if err := s.notifier.Notify(ctx, *st.Action); err != nil {
			return err
		}
	}
	st.Put(tx)
	switch {
	case st.Charged:
		if err := s.sched.MovedOn(ctx, tx, sub, *p, today, p.Process, tx.Now()); err != nil {
			return err
		}
	case st.GaveUp && sub.Status != SubCancelled && sub.NextPeriodDate.Equal(p.BillingDate):
		// Given up on the subscription's next period: it moves on.
		if err := s.sched.Advance(ctx, tx, sub, p.BillingDate, today, p.Process, tx.Now()); err != nil {
			return err
		}
		tx.PutSubscription(sub)
	}
	if err := s.store.Commit(ctx, tx); err != nil {
		return err
	}
	if st.Refund != "" {
		if o, ok := s.obs.(DuplicateObserver); ok {
			o.DuplicateRefunded()
		}
	}
	return nil
}
