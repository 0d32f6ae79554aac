package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/pgtx"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
	"github.com/stripe-payments/stripe-payments/internal/tracking"
)

func TestAccountsComeFromTheLedgerAndThePurchases(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	l := ledger.New(pool)
	_, err := l.Apply(ctx, ledger.EventRef{ID: "evt_a", Type: "x", StripeAccount: "acct_from_events", Created: time.Now()},
		func(context.Context, pgtx.Tx) error { return nil })
	require.NoError(t, err)
	// A purchase whose events never arrived: its account must still be polled.
	_, _, err = tracking.NewStore(pool).CreatePurchase(ctx, tracking.NewPurchase{
		Account: uuid.New(), StripeAccount: "acct_from_purchase", Kind: tracking.KindLegacy})
	require.NoError(t, err)

	accounts, err := ledger.NewAccounts(pool).Accounts(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"acct_from_events", "acct_from_purchase"}, accounts)
}
