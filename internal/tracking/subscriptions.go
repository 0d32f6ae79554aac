package tracking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v76"

	"github.com/stripe-payments/stripe-payments/internal/actions"
	"github.com/stripe-payments/stripe-payments/internal/pgtx"
	"github.com/stripe-payments/stripe-payments/internal/stripeid"
)

// Subscription flows of the reference. "Subscription activated":
// customer.subscription.created/updated with status active moves a new
// subscription to active and fulfils its purchase. "Subscription terminated":
// customer.subscription.updated into an ended status,
// customer.subscription.deleted, or subscription_schedule.canceled moves an
// active subscription to terminated and triggers the unsubscribe actions; a
// subscription that ends before it was ever activated (its first payment
// failed: incomplete_expired) goes new -> terminated with no action, since
// nothing was fulfilled. Everything else ("already processed") does nothing.

// targetOf maps a Stripe subscription status to the tracked state it means;
// "" means no transition. Only Stripe's ended statuses terminate, because
// terminated is final here: past_due, paused and incomplete can still turn
// active in Stripe, and an active -> terminated on them could never be
// undone. unpaid ends it (Stripe stopped retrying; access should go).
func targetOf(status stripe.SubscriptionStatus) SubscriptionStatus {
	switch status {
	case stripe.SubscriptionStatusActive:
		return SubscriptionActive
	case stripe.SubscriptionStatusCanceled, stripe.SubscriptionStatusIncompleteExpired, stripe.SubscriptionStatusUnpaid:
		return SubscriptionTerminated
	default:
		return ""
	}
}

// SubscriptionChanged moves the tracked subscription to what its Stripe
// status means (customer.subscription.created, .updated, .deleted).
func (f *Flows) SubscriptionChanged(ctx context.Context, tx pgtx.Tx, ev *stripe.Event) error {
	var sub stripe.Subscription
	if err := json.Unmarshal(ev.Data.Raw, &sub); err != nil {
		return unprocessable("decode subscription: %v", err)
	}
	if !stripeid.Valid(sub.ID, "sub_") {
		return unprocessable("subscription id %q is not a subscription id", clip(sub.ID))
	}
	target := targetOf(sub.Status)
	if ev.Type == "customer.subscription.deleted" {
		target = SubscriptionTerminated
	}
	var hints []hint
	if h, ok := hintFrom(sub.Metadata); ok {
		hints = append(hints, h)
	}
	return f.moveSubscription(ctx, tx, f.event(ev), sub.ID, hints, target)
}

// ScheduleCanceled terminates the subscription a canceled schedule names.
func (f *Flows) ScheduleCanceled(ctx context.Context, tx pgtx.Tx, ev *stripe.Event) error {
	var sched stripe.SubscriptionSchedule
	if err := json.Unmarshal(ev.Data.Raw, &sched); err != nil {
		return unprocessable("decode subscription schedule: %v", err)
	}
	e := f.event(ev)
	if sched.Subscription == nil || sched.Subscription.ID == "" {
		e.log.Info("canceled schedule has no subscription: no effect", "schedule", sched.ID)
		return nil
	}
	if !stripeid.Valid(sched.Subscription.ID, "sub_") {
		return unprocessable("schedule names subscription %q, which is not a subscription id", clip(sched.Subscription.ID))
	}
	return f.moveSubscription(ctx, tx, e, sched.Subscription.ID, nil, SubscriptionTerminated)
}

// moveSubscription applies one subscription event to its tracked row.
func (f *Flows) moveSubscription(ctx context.Context, tx pgtx.Tx, e event, id string, hints []hint, target SubscriptionStatus) error {
	log := e.log.With("subscription", id)
	p, sub, err := locateSubscription(ctx, tx, e, id, hints)
	if err != nil {
		return err
	}
	if sub == nil {
		log.Info("subscription not tracked: no effect")
		return nil
	}
	log = log.With("purchase_id", p.ID)
	if stale(sub.LastEventCreated, e.created) {
		log.Info("stale event: the subscription has seen a newer one", "last_event_id", sub.LastEventID)
		return nil
	}
	next := sub.Status
	switch {
	case target == "":
		log.Info("subscription status without a transition: no effect")
	case sub.Status == target:
		log.Info("subscription already " + string(target))
	case sub.Status == SubscriptionTerminated:
		log.Warn("subscription already terminated: event ignored", "wanted", target)
	default:
		next = target // new -> active, new -> terminated, active -> terminated
	}
	if _, err := tx.Exec(ctx, `UPDATE subscriptions SET status = $2, last_event_id = $3, last_event_created = $4 WHERE id = $1`,
		id, next, e.id, e.created); err != nil {
		return fmt.Errorf("update subscription %s: %w", id, translate(err))
	}
	if next == sub.Status {
		return nil
	}
	log.Info("subscription " + string(sub.Status) + " -> " + string(next))
	switch {
	case next == SubscriptionActive:
		return f.fulfil(ctx, tx, e, p, id)
	case sub.Status == SubscriptionActive && next == SubscriptionTerminated:
		a := actions.Action{Type: actions.TypeSubscriptionTerminated, Account: p.Account.String(),
			StripeAccount: p.StripeAccount, PurchaseID: ptr(p.ID.String()), SubscriptionID: ptr(id)}
		if _, err := actions.Enqueue(ctx, tx, a, actions.DedupeKey(a.Type, id), f.now()); err != nil {
			return err
		}
		log.Info("unsubscribe actions triggered")
	default:
		log.Info("subscription ended before it was activated: nothing to undo")
	}
	return nil
}

// locateSubscription finds and locks a tracked subscription and its purchase.
// A subscription the purchase API has not stored yet (its event overtook the
// API's write) is created from the metadata's purchase.
func locateSubscription(ctx context.Context, tx pgtx.Tx, e event, id string, hints []hint) (*purchaseRow, *Subscription, error) {
	var p *purchaseRow
	var purchase uuid.UUID
	var account string
	err := tx.QueryRow(ctx, `SELECT purchase, stripe_account FROM subscriptions WHERE id = $1`, id).Scan(&purchase, &account)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, nil, fmt.Errorf("find subscription %s: %w", id, err)
	case account != e.stripeAccount:
		e.log.Warn("event for a tracked subscription from another Stripe account: ignored", "subscription", id)
		return nil, nil, nil
	default:
		if p, err = lockPurchase(ctx, tx, purchase); err != nil {
			return nil, nil, err
		}
	}
	for _, h := range hints {
		if p != nil {
			break
		}
		if p, err = purchaseFromHint(ctx, tx, e, h); err != nil {
			return nil, nil, err
		}
		if p != nil && p.Kind != KindRecurring {
			e.log.Warn("subscription metadata names a purchase that is not recurring: ignored", "purchase_id", p.ID)
			return nil, nil, nil
		}
	}
	if p == nil {
		return nil, nil, nil
	}
	if _, err := tx.Exec(ctx, `INSERT INTO subscriptions (id, account, stripe_account, purchase) VALUES ($1, $2, $3, $4)
		ON CONFLICT (id) DO NOTHING`, id, p.Account, p.StripeAccount, p.ID); err != nil {
		return nil, nil, fmt.Errorf("insert subscription %s: %w", id, translate(err))
	}
	if _, err := tx.Exec(ctx, `UPDATE purchases SET subscription = $2 WHERE id = $1 AND subscription IS NULL`, p.ID, id); err != nil {
		return nil, nil, fmt.Errorf("record subscription on purchase %s: %w", p.ID, translate(err))
	}
	var sub Subscription
	err = tx.QueryRow(ctx, `SELECT id, purchase, status, coalesce(last_event_id, ''), last_event_created FROM subscriptions WHERE id = $1 FOR UPDATE`, id).
		Scan(&sub.ID, &sub.Purchase, &sub.Status, &sub.LastEventID, &sub.LastEventCreated)
	if err != nil {
		return nil, nil, fmt.Errorf("lock subscription %s: %w", id, err)
	}
	if sub.Purchase != p.ID {
		e.log.Warn("subscription belongs to another purchase than its metadata names: ignored", "purchase_id", p.ID)
		return nil, nil, nil
	}
	return p, &sub, nil
}
