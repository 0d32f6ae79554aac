package ops

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// TestQuarantinedRecordsAreCountedForTheOverview (issue 26 finding 5): the
// overview's warning counts the rows of event_records_quarantined.
func TestQuarantinedRecordsAreCountedForTheOverview(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	n, err := QuarantinedRecords(ctx, pool)
	require.NoError(t, err)
	assert.Zero(t, n)
	_, err = pool.Exec(ctx, `INSERT INTO event_records_quarantined (event_id, record, payload, enqueued_at, tries, error)
		VALUES ('evt_q1', '{}', '{}', now(), 5, 'ValidationException'), ('evt_q2', '{}', '{}', now(), 5, 'ValidationException')`)
	require.NoError(t, err)
	n, err = QuarantinedRecords(ctx, pool)
	require.NoError(t, err)
	assert.EqualValues(t, 2, n)
	assert.Contains(t, quarantineWarning(n), "2 event record(s) quarantined")
}
