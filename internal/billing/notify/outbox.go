// Package notify delivers the billing core's actions through the Postgres
// outbox (model.Notifier): each action is enqueued with actions.Enqueue,
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
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
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
	key := model.DedupeKey(a)
	err := pgx.BeginFunc(ctx, n.Pool, func(tx pgx.Tx) error {
		// The outbox message is dated by the wall clock (deliverable now);
		// the action keeps the Created its job gave it.
		if _, err := actions.Enqueue(ctx, tx, a, key, time.Now()); err != nil {
			return err
		}
		if !n.Email || a.Type != model.ActionReminderDue || a.Email == "" {
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
		To: a.Email, Account: a.Account, SubscriptionID: deref(a.SubscriptionID),
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

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// EraseQueued removes the subscriber's address from every reminder email
// of subscription sub of account the outbox holds, queued, dead-lettered or
// already delivered (model.QueuedEraser): the worker then sends none of
// them (a message with no recipient is settled unsent) and no stored copy
// keeps the address. Messages queued before they named their subscription
// are found by their dedupe key and addr, the address the subscription has
// now. It answers how many messages it changed.
func (n Outbox) EraseQueued(ctx context.Context, account, sub, addr string) (int, error) {
	// The dedupe key of a reminder's email (Notify): "email:" and the
	// action's key, which begins with its type, account and subscription.
	// Ids may hold ':', so the prefix alone could name another
	// subscription: the address must match too.
	legacy := "email:" + model.DedupeKeyPrefix(model.ActionReminderDue, account, sub)
	tag, err := n.Pool.Exec(ctx, `UPDATE outbox SET payload = jsonb_set(payload, '{to}', to_jsonb($5::text))
		WHERE topic = $1 AND payload->>'to' <> $5
		AND ((payload->>'account' = $2 AND payload->>'subscription_id' = $3)
			OR (NOT payload ? 'account' AND starts_with(dedupe_key, $4) AND $6 <> '' AND lower(payload->>'to') = lower($6)))`,
		email.Topic, account, sub, legacy, email.ErasedRecipient, addr)
	if err != nil {
		return 0, fmt.Errorf("erase queued emails of %s: %w", sub, err)
	}
	return int(tag.RowsAffected()), nil
}
