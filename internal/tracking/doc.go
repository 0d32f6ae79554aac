// Package tracking holds the state machines that events drive: purchases,
// their payments and subscriptions (docs/architecture.md). The Postgres pool
// and migrations are internal/postgres; the processed-events ledger, whose
// transaction the flows run in, is internal/ledger.
package tracking
