// Package pgtx names the part of a Postgres transaction that code running
// inside someone else's transaction may use: statements, and no Commit or
// Rollback. The handler's appliers (tracking flows, the billing feed), the
// outbox and the record queue all write through it, so none of them can end
// the ledger's transaction early and none depends on pgx.Tx; a pgx.Tx
// satisfies it. It is a package of its own so that they can all name the
// same type without importing the handler.
package pgtx

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Tx runs statements in an open transaction.
type Tx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
