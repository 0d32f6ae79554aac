-- +goose Up
-- Outbox rows are claimed with a lease and delivered outside any transaction
-- (no connection or row lock is held while a consumer is called), and a
-- message that keeps failing becomes a dead letter instead of being retried
-- for ever. Every column is nullable or has a constant default, so this is a
-- catalogue-only change on a large table.
ALTER TABLE outbox
    ADD COLUMN leased_until timestamptz,          -- the claim's end; another worker may take the row after it
    ADD COLUMN lease_owner  text,                 -- which worker (and which claim) holds the lease
    ADD COLUMN dead_at      timestamptz,          -- set when the worker gave up; cleared by a re-drive
    ADD COLUMN redriven_at  timestamptz,          -- the age limit counts from here after a re-drive
    ADD COLUMN redrives     integer NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE outbox
    DROP COLUMN redrives,
    DROP COLUMN redriven_at,
    DROP COLUMN dead_at,
    DROP COLUMN lease_owner,
    DROP COLUMN leased_until;
