-- +goose Up
-- Incidents (docs/design.md §4): failures are grouped by kind, normalised
-- cause, event type and stripe_account from the rows that already say what
-- is broken (ops_event_problems, thin_hydrations, outbox dead letters,
-- ops_billing_runs). Only an incident's state is stored: a group without a
-- row is open. A resolved incident whose group has an occurrence after
-- state_at is open again (state_by 'system').
CREATE TABLE incidents (
    id             text        PRIMARY KEY, -- inc_ + hash of the group key
    kind           text        NOT NULL CHECK (kind IN ('event', 'delivery', 'billing')),
    cause          text        NOT NULL,
    event_type     text        NOT NULL,
    stripe_account text        NOT NULL,
    state          text        NOT NULL CHECK (state IN ('open', 'acknowledged', 'resolved')),
    state_at       timestamptz NOT NULL,
    state_by       text        NOT NULL
);

-- Every state change: who (the API caller, the console, or 'system' for a
-- reopen) and when.
CREATE TABLE incident_audit (
    id          bigserial   PRIMARY KEY,
    incident_id text        NOT NULL,
    from_state  text        NOT NULL,
    to_state    text        NOT NULL,
    actor       text        NOT NULL,
    at          timestamptz NOT NULL
);
CREATE INDEX incident_audit_incident_idx ON incident_audit (incident_id, at);

-- +goose Down
DROP TABLE incident_audit;
DROP TABLE incidents;
