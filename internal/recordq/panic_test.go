package recordq_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/events"
	"github.com/stripe-payments/stripe-payments/internal/recordq"
)

// panicTable panics in its first PutProcessed.
type panicTable struct {
	recordq.Table
	panicked atomic.Bool
}

func (p *panicTable) PutProcessed(ctx context.Context, recs []events.Record) error {
	if p.panicked.CompareAndSwap(false, true) {
		panic("injected panic in a write")
	}
	return p.Table.PutProcessed(ctx, recs)
}

// TestAPanicInAWriteIsRetried: a panic while writing
// a batch is recovered; the batch is retried like a failed write and
// reaches the table; the process survives.
func TestAPanicInAWriteIsRetried(t *testing.T) {
	e := newEnv(t)
	table := &panicTable{Table: e.table}
	q := recordq.New(e.pool, table, recordq.Config{})
	r := record(t)
	commit(t, e, q, r)
	q.Hand([]events.Record{r})
	run(t, q)
	flush(t, q)
	require.True(t, table.panicked.Load())
	got, err := e.table.Get(context.Background(), r.ID)
	require.NoError(t, err)
	assert.Equal(t, events.StatusProcessed, got.Status)
	assert.Zero(t, e.pendingRows(t))
}
