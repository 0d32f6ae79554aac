package model

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/stripe-payments/stripe-payments/internal/actions"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
)

// Action types the billing core emits on the action outbox (docs/design.md §6).
const (
	ActionReminderDue      = "billing.reminder_due"
	ActionPaymentCompleted = "billing.payment_completed"
	ActionPaymentFailed    = "billing.payment_failed"
)

// DedupeKey names a billing action's effect: one action per subscription,
// billing date and type (and PaymentIntent for payment outcomes), however
// often it is caused. a must carry its BillingDetails.
func DedupeKey(a actions.Action) string {
	b := a.BillingDetails
	k := DedupeKeyPrefix(a.Type, a.Account, deref(a.SubscriptionID)) + b.BillingDate
	if b.Period != "" && b.Period != b.BillingDate {
		k += ":period-" + b.Period
	}
	switch {
	case b.PaymentIntent != "":
		k += ":" + b.PaymentIntent
	case b.Attempt > 0:
		k += fmt.Sprintf(":attempt-%d", b.Attempt)
	}
	return k
}

// DedupeKeyPrefix begins the DedupeKey of every action of type typ for
// subscription sub of account.
func DedupeKeyPrefix(typ, account, sub string) string {
	return fmt.Sprintf("%s:%s:%s:", typ, account, sub)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Notifier delivers billing actions. Notify must be idempotent per
// DedupeKey: jobs call it again after a crash.
type Notifier interface {
	Notify(ctx context.Context, a actions.Action) error
}

// LogNotifier only logs actions (no Postgres: tests, dry runs).
type LogNotifier struct{ Log *slog.Logger }

// Notify logs a.
func (n LogNotifier) Notify(_ context.Context, a actions.Action) error {
	n.Log.Info("billing action", "action", a.Type, "account", a.Account, "subscription_id", deref(a.SubscriptionID),
		"billing_date", a.BillingDate, "payment_intent", a.PaymentIntent)
	return nil
}

// PaymentAction is the action of an outcome of attempt attempt on p.
func PaymentAction(typ string, p Period, pi string, attempt int, errMsg string, now time.Time) actions.Action {
	sub := p.SubscriptionID
	return actions.Action{
		Type: typ, Account: p.AccountID, StripeAccount: p.PaymentDetails.StripeAccount,
		SubscriptionID: &sub, Created: now.UTC().Format(time.RFC3339),
		BillingDetails: &actions.BillingDetails{SKU: p.SKU, Email: p.Email,
			BillingDate: p.BillingDate.String(), Amount: p.Amount, Currency: p.Currency,
			PaymentIntent: pi, Attempt: attempt, Error: errMsg},
	}
}

// ReminderAction announces the period scheduled on period, charged on
// payDate.
func ReminderAction(sub Subscription, period, payDate dates.Date, now time.Time) actions.Action {
	id := sub.SubscriptionID
	b := &actions.BillingDetails{SKU: sub.SKU, Email: sub.Email,
		BillingDate: payDate.String(), Amount: sub.Amount, Currency: sub.Currency}
	if !period.IsZero() {
		b.Period = period.String()
	}
	return actions.Action{
		Type: ActionReminderDue, Account: sub.AccountID, StripeAccount: sub.PaymentDetails.StripeAccount,
		SubscriptionID: &id, Created: now.UTC().Format(time.RFC3339), BillingDetails: b,
	}
}
