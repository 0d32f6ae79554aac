-- +goose Up
-- The poller's per-account checkpoint: every event of stripe_account created
-- before `checkpoint` has been listed from the Stripe Events API and found
-- processed (or replayed). The next run lists from checkpoint - overlap.
CREATE TABLE poller_checkpoints (
    stripe_account text        PRIMARY KEY CHECK (stripe_account LIKE 'acct\_%'),
    checkpoint     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE poller_checkpoints;
