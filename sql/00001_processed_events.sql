-- +goose Up
-- The processed-events ledger: an event id is inserted in the same
-- transaction as the event's effects, so a conflict means they were applied.
CREATE TABLE processed_events (
    event_id       text        PRIMARY KEY,
    event_type     text        NOT NULL,
    stripe_account text        NOT NULL,
    event_created  timestamptz NOT NULL,
    processed_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX processed_events_processed_at_idx ON processed_events (processed_at);

-- +goose Down
DROP TABLE processed_events;
