-- +goose Up
-- Pruning the processed-events ledger must not make the poller forget a
-- Connect account whose events all aged out: the pruner records the accounts
-- of the rows it deletes here, and the poller's account list reads this table
-- beside the ledger and the purchases.
CREATE TABLE ledger_pruned_accounts (
    stripe_account text        PRIMARY KEY,
    pruned_at      timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE ledger_pruned_accounts;
