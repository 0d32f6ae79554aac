package replay

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/testenv"
)

// A replay's finished_at is the database's clock whichever way it ends
// (the runner's finish writes now()): a cancel on an instance whose clock
// is off records the same clock as a finish.
func TestCancelRecordsTheDatabaseClock(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	s := NewStore(pool, nil)
	s.now = func() time.Time { return time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC) } // a skewed app clock
	_, err := pool.Exec(ctx, `INSERT INTO replays (id, filter, status, matched, created_by, created_at)
		VALUES ('rpl_clock', '{}', 'running', 1, 'console', now())`)
	require.NoError(t, err)
	r, err := s.Cancel(ctx, "rpl_clock", "console")
	require.NoError(t, err)
	var dbNow time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT now()`).Scan(&dbNow))
	assert.WithinDuration(t, dbNow, r.FinishedAt, time.Minute)
}
