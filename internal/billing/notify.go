package billing

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/actions"
	"github.com/stripe-payments/stripe-payments/internal/billing/dates"
	"github.com/stripe-payments/stripe-payments/internal/email"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
)

// Action types the billing core emits on the action outbox (DESIGN §6).
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
	k := fmt.Sprintf("%s:%s:%s:%s", a.Type, a.Account, deref(a.SubscriptionID), b.BillingDate)
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

// OutboxNotifier enqueues actions with actions.Enqueue, as every side effect
// is: the dispatcher POSTs them to ACTIONS_URL (or logs them), at least once,
// one message per dedupe key.
type OutboxNotifier struct {
	Pool *pgxpool.Pool
	// Email also enqueues a reminder email (outbox topic "email", sent
	// through SES) for every billing.reminder_due with an address.
	Email bool
}

// Notify enqueues a (and its reminder email) in one transaction.
func (n OutboxNotifier) Notify(ctx context.Context, a actions.Action) error {
	key := DedupeKey(a)
	err := pgx.BeginFunc(ctx, n.Pool, func(tx pgx.Tx) error {
		// The outbox message is dated by the wall clock (deliverable now);
		// the action keeps the Created its job gave it.
		if _, err := actions.Enqueue(ctx, tx, a, key, time.Now()); err != nil {
			return err
		}
		if !n.Email || a.Type != ActionReminderDue || a.Email == "" {
			return nil
		}
		m := reminderEmail(a)
		if err := m.Validate(); err != nil {
			// A bad address must not block the reminder action itself.
			return nil
		}
		body, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("encode email: %w", err)
		}
		_, err = outbox.Enqueue(ctx, tx, outbox.Message{
			Topic: email.Topic, Type: a.Type, DedupeKey: "email:" + key, Payload: body,
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("notify %s: %w", a.Type, err)
	}
	return nil
}

// reminderEmail is the text of a payment reminder.
func reminderEmail(a actions.Action) email.Message {
	return email.Message{
		To:      a.Email,
		Subject: fmt.Sprintf("Your %s payment is due on %s", a.SKU, a.BillingDate),
		Text: fmt.Sprintf("Hello,\n\nyour %s subscription will be charged %s on %s.\n"+
			"Nothing to do if your payment method is up to date.\n", a.SKU, formatAmount(a.Amount, a.Currency), a.BillingDate),
	}
}

// zeroDecimal are the currencies Stripe counts in whole units.
var zeroDecimal = map[string]bool{"bif": true, "clp": true, "djf": true, "gnf": true, "jpy": true, "kmf": true,
	"krw": true, "mga": true, "pyg": true, "rwf": true, "ugx": true, "vnd": true, "vuv": true, "xaf": true, "xof": true, "xpf": true}

// formatAmount renders minor units for people: 1500 usd is "15.00 USD".
func formatAmount(minor int64, currency string) string {
	cur := strings.ToUpper(currency)
	if zeroDecimal[strings.ToLower(currency)] {
		return fmt.Sprintf("%d %s", minor, cur)
	}
	sign := ""
	if minor < 0 {
		sign, minor = "-", -minor
	}
	return fmt.Sprintf("%s%d.%02d %s", sign, minor/100, minor%100, cur)
}

// LogNotifier only logs actions (no Postgres: tests, dry runs).
type LogNotifier struct{ Log *slog.Logger }

// Notify logs a.
func (n LogNotifier) Notify(_ context.Context, a actions.Action) error {
	n.Log.Info("billing action", "action", a.Type, "account", a.Account, "subscription_id", deref(a.SubscriptionID),
		"billing_date", a.BillingDate, "payment_intent", a.PaymentIntent)
	return nil
}

func paymentAction(typ string, p Period, pi string, attempt int, errMsg string, now time.Time) actions.Action {
	sub := p.SubscriptionID
	return actions.Action{
		Type: typ, Account: p.AccountID, StripeAccount: p.PaymentDetails.StripeAccount,
		SubscriptionID: &sub, Created: now.UTC().Format(time.RFC3339),
		BillingDetails: &actions.BillingDetails{SKU: p.SKU, Email: p.Email,
			BillingDate: p.BillingDate.String(), Amount: p.Amount, Currency: p.Currency,
			PaymentIntent: pi, Attempt: attempt, Error: errMsg},
	}
}

// reminderAction announces the period scheduled on period, charged on
// payDate.
func reminderAction(sub Subscription, period, payDate dates.Date, now time.Time) actions.Action {
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
