-- +goose Up
-- The write-behind reads an event's record from the events table before it
-- writes it (to keep an earlier failed attempt's bookkeeping) only when an
-- earlier version can be there, since every read costs DynamoDB capacity:
--
-- fresh: the row was inserted by the transaction that claimed the event in
-- the ledger. Rows inserted otherwise (older binaries, tools) are read.
ALTER TABLE event_records_pending ADD COLUMN fresh boolean NOT NULL DEFAULT false;

-- Events whose record was, or may have been, written to the events table
-- outside the write-behind: a failure or a rejection inserts its row here,
-- committed, before it writes the record. The writer checks this table when
-- it loads the pending rows, so a claimed event's earlier attempt is read.
-- Only failures and rejections land here: a small table.
CREATE TABLE event_records_prior (
    event_id text        PRIMARY KEY,
    at       timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE event_records_prior;
ALTER TABLE event_records_pending DROP COLUMN fresh;
