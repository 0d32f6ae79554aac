-- +goose Up
-- Thin intake on one durable Postgres commit, so the answer waits for one
-- write, not two: it waits for the queue row only; the events table's
-- record is written behind it
-- (recorded), read through from this table until then. thin_done remembers
-- the hydrated ones for a while, so a redelivery is answered duplicate with
-- no second hydration.
ALTER TABLE thin_hydrations ADD COLUMN recorded boolean NOT NULL DEFAULT true; -- rows queued before: recorded by the old intake
ALTER TABLE thin_hydrations ALTER COLUMN recorded SET DEFAULT false;
CREATE INDEX thin_hydrations_unrecorded ON thin_hydrations (received_at) WHERE NOT recorded;
CREATE TABLE thin_done (
    event_id text        PRIMARY KEY,
    done_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX thin_done_at ON thin_done (done_at);

-- +goose Down
DROP TABLE thin_done;
DROP INDEX thin_hydrations_unrecorded;
ALTER TABLE thin_hydrations DROP COLUMN recorded;
