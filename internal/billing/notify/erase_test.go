package notify_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/billing/notify"
	"github.com/stripe-payments/stripe-payments/internal/email"
	"github.com/stripe-payments/stripe-payments/internal/outbox"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// TestEraseQueuedFindsOnlyTheSubscriptionsEmails: an erasure reaches the
// reminder emails of its subscription, those queued before messages named
// their subscription included (found by their dedupe key and the address),
// and no other subscription's, even one whose key begins alike (ids may
// hold ':').
func TestEraseQueuedFindsOnlyTheSubscriptionsEmails(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	const addr = "Erin@Example.com"
	msgs := []struct {
		name   string
		key    string
		msg    email.Message
		erased bool
	}{
		{"named, the current address", "email:billing.reminder_due:acc:sub:2026-12-01",
			email.Message{To: addr, Account: "acc", SubscriptionID: "sub"}, true},
		{"named, an earlier address", "email:billing.reminder_due:acc:sub:2026-11-01",
			email.Message{To: "old@example.com", Account: "acc", SubscriptionID: "sub"}, true},
		{"unnamed, the address in another case", "email:billing.reminder_due:acc:sub:2026-10-01",
			email.Message{To: "erin@EXAMPLE.com"}, true},
		{"unnamed, another address", "email:billing.reminder_due:acc:sub:2026-09-01",
			email.Message{To: "someone@example.com"}, false},
		{"another subscription, same address", "email:billing.reminder_due:acc:sub2:2026-12-01",
			email.Message{To: addr, Account: "acc", SubscriptionID: "sub2"}, false},
		{"another account whose key begins alike", "email:billing.reminder_due:acc:sub:x:2026-12-01",
			email.Message{To: "x@example.com", Account: "acc:sub", SubscriptionID: "x"}, false},
	}
	for _, m := range msgs {
		m.msg.Subject, m.msg.Text = "s", "t"
		body, err := json.Marshal(m.msg)
		require.NoError(t, err)
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = outbox.Enqueue(ctx, tx, outbox.Message{Topic: email.Topic, Type: "billing.reminder_due", DedupeKey: m.key, Payload: body})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
	}
	n, err := notify.Outbox{Pool: pool}.EraseQueued(ctx, "acc", "sub", addr)
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	for _, m := range msgs {
		var to string
		require.NoError(t, pool.QueryRow(ctx, `SELECT payload->>'to' FROM outbox WHERE dedupe_key = $1`, m.key).Scan(&to))
		if m.erased {
			assert.Equal(t, email.ErasedRecipient, to, m.name)
		} else {
			assert.Equal(t, m.msg.To, to, m.name)
		}
	}
	n, err = notify.Outbox{Pool: pool}.EraseQueued(ctx, "acc", "sub", addr)
	require.NoError(t, err)
	assert.Zero(t, n, "a second erasure finds nothing left")
}
