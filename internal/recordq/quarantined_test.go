package recordq_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/recordq"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// TestQuarantinedRecordsAreCountedForTheOverview: the
// console overview's warning counts the rows of event_records_quarantined.
func TestQuarantinedRecordsAreCountedForTheOverview(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	q := recordq.New(pool, nil, recordq.Config{})
	n, err := q.Quarantined(ctx)
	require.NoError(t, err)
	assert.Zero(t, n)
	_, err = pool.Exec(ctx, `INSERT INTO event_records_quarantined (event_id, record, payload, enqueued_at, tries, error)
		VALUES ('evt_q1', '{}', '{}', now(), 5, 'ValidationException'), ('evt_q2', '{}', '{}', now(), 5, 'ValidationException')`)
	require.NoError(t, err)
	n, err = q.Quarantined(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 2, n)
}
