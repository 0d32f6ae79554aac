-- +goose Up
-- Event records the events table (DynamoDB) refused for good (a validation
-- error, a row that cannot be decoded) after INGEST_RECORD_QUARANTINE_AFTER
-- writes: moved here from event_records_pending, so that one such record
-- does not stop admission for every other. The events store still reads
-- them (an acknowledged event never disappears); the operator console lists
-- them; docs/runbook-quarantined-records.md says what to do.
CREATE TABLE event_records_quarantined (
    event_id       text        PRIMARY KEY,
    record         bytea       NOT NULL,
    payload        bytea       NOT NULL,
    enqueued_at    timestamptz NOT NULL,
    quarantined_at timestamptz NOT NULL DEFAULT now(),
    tries          integer     NOT NULL,
    error          text        NOT NULL
);

-- +goose Down
DROP TABLE event_records_quarantined;
