package recordq_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/recordq"
)

// queryCounter counts the queries a pool sends.
type queryCounter struct{ n atomic.Int64 }

func (c *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestSettledIsBoundedInTimeAndQueries: an index listing waits for the
// records pending when it starts, but not for long: with a record that no
// writer takes, Settled gives up after recordq.SettleWait with
// ErrUnavailable (the API's 503), having sent at most
// recordq.SettleQueries queries to Postgres, instead of polling it for 10 s.
func TestSettledIsBoundedInTimeAndQueries(t *testing.T) {
	e := newEnv(t)
	cfg := e.pool.Config()
	counter := &queryCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	q := recordq.New(pool, e.table, recordq.Config{})
	rec := record(t)
	commit(t, e, q, rec) // no writer runs: it stays pending
	counter.n.Store(0)

	start := time.Now()
	err = q.Settled(context.Background())
	took := time.Since(start)
	require.ErrorIs(t, err, recordq.ErrUnavailable)
	assert.LessOrEqual(t, recordq.SettleWait, 2*time.Second, "the documented wait is short")
	assert.Less(t, took, recordq.SettleWait+time.Second, "Settled waited past its bound")
	assert.LessOrEqual(t, counter.n.Load(), int64(recordq.SettleQueries), "Settled polled Postgres past its bound")

	// Once the record is written, the same call returns at once.
	q.Hand([]events.Record{rec})
	run(t, q)
	flush(t, q)
	require.NoError(t, q.Settled(context.Background()))
}
