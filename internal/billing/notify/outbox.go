// Package notify delivers the billing core's actions through the Postgres
// outbox (billing.Notifier): each action is enqueued with actions.Enqueue,
// as every side effect is, and a reminder also enqueues its email (outbox
// topic "email", sent through SES by internal/email). Keeping it here keeps
// pgx and the outbox out of the billing core.
package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stripe-payments/stripe-payments/internal/actions"
	"github.com/stripe-payments/stripe-payments/internal/billing"
	"github.com/stripe-payments/stripe-payments/internal/email"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
)

// Outbox enqueues actions with actions.Enqueue, as every side effect
// is: the dispatcher POSTs them to ACTIONS_URL (or logs them), at least once,
// one message per dedupe key.
type Outbox struct {
	Pool *pgxpool.Pool
	// Email also enqueues a reminder email (outbox topic "email", sent
	// through SES) for every billing.reminder_due with an address.
	Email bool
}

// Notify enqueues a (and its reminder email) in one transaction.
func (n Outbox) Notify(ctx context.Context, a actions.Action) error {
	key := billing.DedupeKey(a)
	err := pgx.BeginFunc(ctx, n.Pool, func(tx pgx.Tx) error {
		// The outbox message is dated by the wall clock (deliverable now);
		// the action keeps the Created its job gave it.
		if _, err := actions.Enqueue(ctx, tx, a, key, time.Now()); err != nil {
			return err
		}
		if !n.Email || a.Type != billing.ActionReminderDue || a.Email == "" {
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
