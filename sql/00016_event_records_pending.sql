-- +goose Up
-- Write-behind of the events table (DynamoDB). The record of every event a
-- batch claims in the ledger is inserted here in the same transaction, so the
-- webhook can acknowledge on the durable Postgres commit; a background writer
-- copies the rows to the events table (BatchWriteItem) and deletes them.
-- Until a row is deleted, the events store reads the record from here, so an
-- acknowledged event is never absent. A crash leaves rows behind: the next
-- start (or the periodic sweep of any instance) writes them.
CREATE TABLE event_records_pending (
    event_id    text        PRIMARY KEY,
    record      bytea       NOT NULL, -- the record's fields but the payload (JSON)
    payload     bytea       NOT NULL, -- the raw event JSON
    enqueued_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE event_records_pending;
