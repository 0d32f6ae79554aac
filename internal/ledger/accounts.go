package ledger

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Accounts lists the Connect accounts the service knows: every account
// that ever had an event processed (the ledger) and every account a tracked
// purchase was made on, even if none of its events ever arrived — the case
// the poller exists for.
type Accounts struct {
	pool *pgxpool.Pool
}

// NewAccounts returns the ledger's account source.
func NewAccounts(pool *pgxpool.Pool) *Accounts { return &Accounts{pool: pool} }

// Accounts returns every distinct stripe_account of the ledger and the
// purchases, and those whose ledger rows were all pruned, sorted. The platform's own account is among them when platform
// events were processed.
func (l *Accounts) Accounts(ctx context.Context) ([]string, error) {
	rows, err := l.pool.Query(ctx, `SELECT stripe_account FROM processed_events
		UNION SELECT stripe_account FROM purchases
		UNION SELECT stripe_account FROM ledger_pruned_accounts ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("list ledger accounts: %w", err)
	}
	accounts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list ledger accounts: %w", err)
	}
	return accounts, nil
}
