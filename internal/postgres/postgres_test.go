package postgres_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/postgres"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

func TestConnectAppliesLimits(t *testing.T) {
	ctx := context.Background()
	pool, err := postgres.ConnectWith(ctx, testenv.DatabaseURL(t), postgres.PoolLimits{MaxConns: 7, StatementTimeout: 1500 * time.Millisecond})
	require.NoError(t, err)
	defer pool.Close()
	assert.Equal(t, int32(7), pool.Config().MaxConns)
	assert.Equal(t, postgres.DefaultPoolLimits().ConnectTimeout, pool.Config().ConnConfig.ConnectTimeout, "zero takes the default")
	var timeout string
	require.NoError(t, pool.QueryRow(ctx, `SHOW statement_timeout`).Scan(&timeout))
	assert.Equal(t, "1500ms", timeout)

	// The server ends a statement that outlives statement_timeout.
	_, err = pool.Exec(ctx, `SELECT pg_sleep(5)`)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "got %v", err)
	assert.Equal(t, "57014", pgErr.Code, "query_canceled by statement_timeout")
}

// A black-holed Postgres (packets dropped, nothing closed) fails a new
// connection after ConnectTimeout and a query on an open one at its
// context's deadline, instead of hanging for minutes of TCP retries.
func TestBlackHoledPostgresFailsWithinDeadlines(t *testing.T) {
	u, err := url.Parse(testenv.DatabaseURL(t))
	require.NoError(t, err)
	proxy := testenv.NewFaultProxy(t, u.Host)
	u.Host = proxy.Addr()
	ctx := context.Background()
	pool, err := postgres.ConnectWith(ctx, u.String(), postgres.PoolLimits{MaxConns: 2, ConnectTimeout: time.Second})
	require.NoError(t, err)
	defer pool.Close()

	proxy.BlackHole()
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	start := time.Now()
	_, err = pool.Exec(qctx, `SELECT 1`)
	require.Error(t, err, "a query through the black hole")
	assert.Less(t, time.Since(start), 10*time.Second, "bounded by the context, not TCP")
	t.Logf("query failed after %s", time.Since(start))

	start = time.Now()
	_, err = postgres.ConnectWith(ctx, u.String(), postgres.PoolLimits{ConnectTimeout: time.Second})
	require.Error(t, err, "a new pool through the black hole")
	assert.Less(t, time.Since(start), 10*time.Second, "bounded by connect_timeout")
	t.Logf("connect failed after %s", time.Since(start))
	start = time.Now()

	proxy.Restore()
	require.Eventually(t, func() bool {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return pool.Ping(c) == nil
	}, 30*time.Second, 100*time.Millisecond, "the pool recovers once the network does")
	t.Logf("recovered after %s", time.Since(start))
}
