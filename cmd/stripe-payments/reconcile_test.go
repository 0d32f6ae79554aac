package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/stripetest"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// TestReconcileCommand: `reconcile --dry-run` reports a purchase paid at
// Stripe that the service never heard of and changes nothing;
// `reconcile` fulfils it; a run left behind by a stopped process is
// resumed and finished first; a further run finds nothing.
func TestReconcileCommand(t *testing.T) {
	fake := stripetest.New(t, stripetest.Options{Key: "sk_test_reconcile_cli"})
	dbURL := testenv.DatabaseURL(t)
	for k, v := range stackVars(t, fake, map[string]string{
		"STRIPE_PLATFORM_ACCOUNT": "acct_1PlatformCli",
		"DATABASE_URL":            dbURL,
		"LOG_LEVEL":               "warn",
	}) {
		t.Setenv(k, v)
	}
	ctx := context.Background()
	cmd := func(args ...string) (string, error) {
		var stdout, stderr bytes.Buffer
		err := run(ctx, args, strings.NewReader(""), &stdout, &stderr)
		return stdout.String(), err
	}
	_, err := cmd("migrate")
	require.NoError(t, err)

	// A legacy purchase whose PaymentIntent succeeded at Stripe; the
	// event never came.
	const merchant = "acct_1Nv0FGQ9RKHgCVdK"
	purchase, account := uuid.New(), uuid.New()
	pi := "pi_3MtwBwLkdIwHu7ix28a3tqPa"
	db, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer db.Close(ctx)
	_, err = db.Exec(ctx, `INSERT INTO purchases (id, account, stripe_account, kind, payment_intent) VALUES ($1, $2, $3, 'legacy', $4)`,
		purchase, account, merchant, pi)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `INSERT INTO payments (id, account, stripe_account, purchase) VALUES ($1, $2, $3, $4)`, pi, account, merchant, purchase)
	require.NoError(t, err)
	fake.Put("", stripetest.Account(merchant, "standard", "", time.Now().Unix())) // connected to the platform
	fake.Put(merchant, map[string]any{"id": pi, "object": "payment_intent", "amount": 2000, "currency": "usd", "status": "succeeded",
		"created": time.Now().Unix(), "livemode": false, "invoice": nil, "latest_charge": "ch_1",
		"metadata": map[string]any{"purchase_id": purchase.String(), "account": account.String()}})
	fulfilled := func() bool {
		var f bool
		require.NoError(t, db.QueryRow(ctx, `SELECT fulfilled FROM purchases WHERE id = $1`, purchase).Scan(&f))
		return f
	}

	out, err := cmd("reconcile", "--dry-run")
	require.NoError(t, err, out)
	assert.Contains(t, out, `payment_intent `+pi+` on `+merchant+`: local "payment_intent new, purchase new", Stripe "payment_intent succeeded": none (dry run)`)
	assert.Contains(t, out, "done: 2 checked, 1 drifted, 0 healed, 0 failed", "the PaymentIntent and the merchant's account")
	assert.False(t, fulfilled(), "a dry run changes nothing")

	// A run a stopped process left behind (its lease ran out) is resumed.
	_, err = db.Exec(ctx, `INSERT INTO reconciliations (id, status, dry_run, since, kinds, matched, created_by, created_at, lease_owner, leased_until)
		VALUES ('rec_00000000000000000000abcd', 'running', true, now() - interval '90 days', '{payment_intent}', 1, 'cli', now() - interval '1 hour',
		'gone', now() - interval '1 minute')`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `INSERT INTO reconcile_items (reconciliation_id, seq, kind, object_id, stripe_account, purchase, created)
		VALUES ('rec_00000000000000000000abcd', 1, 'payment_intent', $1, $2, $3, now())`, pi, merchant, purchase)
	require.NoError(t, err)

	out, err = cmd("reconcile")
	require.NoError(t, err, out)
	assert.Contains(t, out, "done: 2 checked, 1 drifted, 1 healed, 0 failed")
	assert.Contains(t, out, "handed payment_intent.succeeded evt_reconcile_"+pi+"_")
	assert.True(t, fulfilled())
	var status string
	var checked int
	require.NoError(t, db.QueryRow(ctx, `SELECT status, checked FROM reconciliations WHERE id = 'rec_00000000000000000000abcd'`).Scan(&status, &checked))
	assert.Equal(t, "done", status, "the left-behind run was resumed")
	assert.Equal(t, 1, checked)
	var actions int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&actions))
	assert.Equal(t, 1, actions, "one purchase.fulfilled action")

	out, err = cmd("reconcile")
	require.NoError(t, err, out)
	assert.Contains(t, out, "done: 2 checked, 0 drifted, 0 healed, 0 failed")

	_, err = cmd("reconcile", "--kinds", "charge")
	assert.ErrorContains(t, err, "kinds")
	_, err = cmd("reconcile", "--since", "tomorrow")
	assert.ErrorContains(t, err, "since")
}
