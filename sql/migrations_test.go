package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/testenv"
	migrations "github.com/stripe-payments/stripe-payments/sql"
)

// A migration's Down never deletes audit rows: rolling back the replay
// cancel (00033) keeps a cancelled replay, as finished.
func TestReplayCancelDownKeepsCancelledReplays(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Postgres(t)
	_, err := pool.Exec(ctx, `INSERT INTO replays (id, filter, status, matched, created_by, created_at, finished_at, cancelled_by)
		VALUES ('rpl_cancelled', '{}', 'cancelled', 3, 'console', now(), now(), 'console')`)
	require.NoError(t, err)

	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithAllowOutofOrder(true))
	require.NoError(t, err)
	_, err = provider.DownTo(ctx, 32)
	require.NoError(t, err)

	var status string
	require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM replays WHERE id = 'rpl_cancelled'`).Scan(&status))
	assert.Equal(t, "done", status)
}
