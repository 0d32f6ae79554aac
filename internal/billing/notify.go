package billing

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
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

// Action is one side effect for ACTIONS_URL: the DESIGN §6 fields plus the
// billing details a consumer needs to act (send the email, update a ledger).
type Action struct {
	// ID is the outbox message id, set when the action is enqueued; it
	// never changes across redeliveries (receivers dedupe on it).
	ID            uuid.UUID `json:"id"`
	Type          string    `json:"type"`
	Account       string    `json:"account"`
	StripeAccount string    `json:"stripe_account"`
	// PurchaseID is always null for billing actions; the key is there so
	// every action has the shape of DESIGN §6.
	PurchaseID     *string `json:"purchase_id"`
	SubscriptionID string  `json:"subscription_id"`
	// Created is when the effect was decided, RFC 3339 UTC, as for every
	// action.
	Created       string `json:"created"`
	SKU           string `json:"sku"`
	Email         string `json:"email,omitempty"`
	BillingDate   string `json:"billing_date"`
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	PaymentIntent string `json:"payment_intent,omitempty"`
	Attempt       int    `json:"attempt,omitempty"`
	Error         string `json:"error,omitempty"`

	// period is the scheduled date of the period a reminder announces,
	// when it differs from its charge date (a moved period): two periods
	// charged on one date each get their reminder (DESIGN §8, finding F16).
	period dates.Date
}

// DedupeKey names the effect: one action per subscription, billing date and
// type (and PaymentIntent for payment outcomes), however often it is caused.
func (a Action) DedupeKey() string {
	k := fmt.Sprintf("%s:%s:%s:%s", a.Type, a.Account, a.SubscriptionID, a.BillingDate)
	if !a.period.IsZero() && a.period.String() != a.BillingDate {
		k += ":period-" + a.period.String()
	}
	switch {
	case a.PaymentIntent != "":
		k += ":" + a.PaymentIntent
	case a.Attempt > 0:
		k += fmt.Sprintf(":attempt-%d", a.Attempt)
	}
	return k
}

// Notifier delivers billing actions. Notify must be idempotent per
// DedupeKey: jobs call it again after a crash.
type Notifier interface {
	Notify(ctx context.Context, a Action) error
}

// OutboxNotifier enqueues actions on the "action" outbox topic, whose
// dispatcher POSTs them to ACTIONS_URL (or logs them): at least once, one
// message per dedupe key.
type OutboxNotifier struct {
	Pool *pgxpool.Pool
	// Email also enqueues a reminder email (outbox topic "email", sent
	// through SES) for every billing.reminder_due with an address.
	Email bool
}

// Notify enqueues a.
func (n OutboxNotifier) Notify(ctx context.Context, a Action) error {
	a.ID = uuid.New()
	payload, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("encode action: %w", err)
	}
	err = pgx.BeginFunc(ctx, n.Pool, func(tx pgx.Tx) error {
		if _, err := outbox.Enqueue(ctx, tx, outbox.Message{
			ID: a.ID, Topic: actions.Topic, Type: a.Type, DedupeKey: a.DedupeKey(), Payload: payload,
		}); err != nil {
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
			Topic: email.Topic, Type: a.Type, DedupeKey: "email:" + a.DedupeKey(), Payload: body,
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("notify %s: %w", a.Type, err)
	}
	return nil
}

// reminderEmail is the text of a payment reminder.
func reminderEmail(a Action) email.Message {
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
func (n LogNotifier) Notify(_ context.Context, a Action) error {
	n.Log.Info("billing action", "action", a.Type, "account", a.Account, "subscription_id", a.SubscriptionID,
		"billing_date", a.BillingDate, "payment_intent", a.PaymentIntent)
	return nil
}

func paymentAction(typ string, p Period, pi string, attempt int, errMsg string, now time.Time) Action {
	return Action{
		Type: typ, Account: p.AccountID, StripeAccount: p.PaymentDetails.StripeAccount,
		SubscriptionID: p.SubscriptionID, Created: now.UTC().Format(time.RFC3339), SKU: p.SKU, Email: p.Email,
		BillingDate: p.BillingDate.String(), Amount: p.Amount, Currency: p.Currency,
		PaymentIntent: pi, Attempt: attempt, Error: errMsg,
	}
}

func reminderAction(sub Subscription, period, payDate dates.Date, now time.Time) Action {
	return Action{period: period,
		Type: ActionReminderDue, Account: sub.AccountID, StripeAccount: sub.PaymentDetails.StripeAccount,
		SubscriptionID: sub.SubscriptionID, Created: now.UTC().Format(time.RFC3339), SKU: sub.SKU, Email: sub.Email,
		BillingDate: payDate.String(), Amount: sub.Amount, Currency: sub.Currency,
	}
}
