// Package migrations embeds the Postgres schema migrations, applied in order
// by goose (`stripe-payments migrate`, and at the start of tests).
package migrations

import "embed"

// FS holds the numbered goose migrations.
//
//go:embed *.sql
var FS embed.FS
