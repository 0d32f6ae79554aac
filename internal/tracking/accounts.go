package tracking

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// LedgerAccounts lists the Connect accounts the service knows from the
// processed-events ledger: every account that ever had an event processed.
// It is the poller's first AccountSource; tracked purchases' accounts can be
// added by another source.
type LedgerAccounts struct {
	pool *pgxpool.Pool
}

// NewLedgerAccounts returns the ledger's account source.
func NewLedgerAccounts(pool *pgxpool.Pool) *LedgerAccounts { return &LedgerAccounts{pool: pool} }

// Accounts returns every distinct stripe_account of the ledger, sorted. The
// platform's own account is among them when platform events were processed.
func (l *LedgerAccounts) Accounts(ctx context.Context) ([]string, error) {
	rows, err := l.pool.Query(ctx, `SELECT DISTINCT stripe_account FROM processed_events ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("list ledger accounts: %w", err)
	}
	accounts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list ledger accounts: %w", err)
	}
	return accounts, nil
}
