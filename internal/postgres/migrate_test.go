package postgres_test

import (
	"context"
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stripe-payments/stripe-payments/internal/postgres"
	"github.com/stripe-payments/stripe-payments/internal/testenv"
	migrations "github.com/stripe-payments/stripe-payments/sql"
)

// A database that already has a later migration than one that lands after
// it (numbers are reserved in blocks per change) still migrates: the
// missing migration is applied, not refused.
func TestMigrateAppliesAMigrationThatLandedOutOfOrder(t *testing.T) {
	pool := testenv.Postgres(t) // fully migrated
	ctx := context.Background()
	_, err := pool.Exec(ctx, `DROP TABLE ledger_pruned_accounts`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DELETE FROM goose_db_version WHERE version_id = 14`)
	require.NoError(t, err)
	// The database now holds every migration but 00014, later ones included.
	entries, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	require.Greater(t, len(entries), 0)
	last := entries[len(entries)-1]
	require.False(t, strings.HasPrefix(last, "00014"), "a later migration exists")

	require.NoError(t, postgres.Migrate(ctx, pool))
	_, err = pool.Exec(ctx, `SELECT stripe_account FROM ledger_pruned_accounts`)
	require.NoError(t, err)
}
