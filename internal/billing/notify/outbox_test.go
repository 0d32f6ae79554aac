package notify_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/actions"
	"github.com/stripe-payments/stripe-payments/internal/billing/model"
	"github.com/stripe-payments/stripe-payments/internal/billing/notify"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// Billing actions have the action shape of docs/design.md §6 (id, type, account,
// stripe_account, purchase_id, subscription_id, created), their id is the
// outbox message id, and one effect enqueues one action.
func TestBillingActionsHaveTheActionShape(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	n := notify.Outbox{Pool: pool}
	sub := "sub-1"
	a := actions.Action{Type: model.ActionReminderDue, Account: "acc-1", StripeAccount: "acct_1X",
		SubscriptionID: &sub, Created: time.Now().UTC().Format(time.RFC3339),
		BillingDetails: &actions.BillingDetails{BillingDate: "2026-12-01", Amount: 1500, Currency: "usd"}}
	require.NoError(t, n.Notify(ctx, a))
	require.NoError(t, n.Notify(ctx, a), "a second notification of the same effect is a no-op")

	rows, err := pool.Query(ctx, `SELECT id, payload FROM outbox WHERE topic = 'action'`)
	require.NoError(t, err)
	defer rows.Close()
	count := 0
	for rows.Next() {
		count++
		var id uuid.UUID
		var payload []byte
		require.NoError(t, rows.Scan(&id, &payload))
		var got map[string]any
		require.NoError(t, json.Unmarshal(payload, &got))
		for _, k := range []string{"id", "type", "account", "stripe_account", "purchase_id", "subscription_id", "created"} {
			assert.Contains(t, got, k)
		}
		assert.Equal(t, id.String(), got["id"])
		assert.Nil(t, got["purchase_id"])
		_, err := time.Parse(time.RFC3339, got["created"].(string))
		assert.NoError(t, err)
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, 1, count)
}
