package ledger_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/ledger"
	"github.com/stripe-payments/stripe-payments/internal/pgtx"
	"github.com/stripe-payments/stripe-payments/internal/postgres"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// After a network failure every idle pooled connection is dead; the ledger
// starts its transaction over on another connection instead of failing the
// event on the first dead one.
func TestLedgerSurvivesDeadPooledConnections(t *testing.T) {
	u, err := url.Parse(testenv.DatabaseURL(t))
	require.NoError(t, err)
	proxy := testenv.NewFaultProxy(t, u.Host)
	u.Host = proxy.Addr()
	ctx := context.Background()
	pool, err := postgres.ConnectWith(ctx, u.String(), postgres.PoolLimits{MaxConns: 4})
	require.NoError(t, err)
	defer pool.Close()
	// Four open, idle connections.
	var conns []*pgxpool.Conn
	for range 4 {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	proxy.Cut() // every connection reset
	proxy.Restore()

	l := ledger.New(pool)
	applied, err := l.Apply(ctx, ledger.EventRef{ID: "evt_dead_conns_1", Type: "payment_intent.succeeded",
		StripeAccount: "acct_1", Created: time.Now()}, func(context.Context, pgtx.Tx) error { return nil })
	require.NoError(t, err, "the first use after the failure")
	assert.True(t, applied)
	got, err := l.ApplyBatch(ctx, []ledger.EventRef{{ID: "evt_dead_conns_2", Type: "payment_intent.succeeded",
		StripeAccount: "acct_1", Created: time.Now()}}, func(context.Context, pgtx.Tx, ledger.EventRef) error { return nil })
	require.NoError(t, err)
	assert.True(t, got["evt_dead_conns_2"])
}
