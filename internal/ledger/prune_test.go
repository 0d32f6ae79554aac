package ledger_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// Pruning the ledger deletes only rows processed before the cutoff, in
// batches, and the poller still knows the accounts whose rows all went.
func TestPruneLedgerRemovesOnlyRowsPastRetention(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	cutoff := now.Add(-90 * 24 * time.Hour)
	insert := func(id, account string, processed time.Time) {
		_, err := pool.Exec(ctx, `INSERT INTO processed_events (event_id, event_type, stripe_account, event_created, processed_at)
			VALUES ($1, 'invoice.paid', $2, $3, $3)`, id, account, processed)
		require.NoError(t, err)
	}
	for i := range 7 {
		insert(fmt.Sprintf("evt_old_%d", i), "acct_gone", cutoff.Add(-time.Duration(i+1)*time.Hour))
	}
	insert("evt_old_kept_account", "acct_active", cutoff.Add(-time.Minute))
	insert("evt_at_cutoff", "acct_active", cutoff)
	insert("evt_new", "acct_active", now.Add(-time.Hour))

	n, err := ledger.Prune(ctx, pool, cutoff, 3)
	require.NoError(t, err)
	assert.EqualValues(t, 8, n)

	l := ledger.New(pool)
	for id, want := range map[string]bool{"evt_old_0": false, "evt_old_6": false, "evt_old_kept_account": false, "evt_at_cutoff": true, "evt_new": true} {
		got, err := l.Processed(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, want, got, id)
	}
	accounts, err := ledger.NewAccounts(pool).Accounts(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"acct_active", "acct_gone"}, accounts)

	n, err = ledger.Prune(ctx, pool, cutoff, 3)
	require.NoError(t, err)
	assert.Zero(t, n, "a second pass finds nothing")
}
