-- +goose Up
-- Bulk replays (docs/design.md §4). A replay's items are the events its
-- filter matched when it was asked for, in order; the runner re-drives them
-- through the one replay path and records each outcome with the counters in
-- one transaction, so a restart resumes at the first item without one. An
-- item re-driven but not yet recorded when the process died is re-driven
-- again: the handler's ledger answers duplicate, nothing applies twice.
-- The replays row is the audit row: who asked, when, with which filter.
CREATE TABLE replays (
    id           text        PRIMARY KEY,
    filter       jsonb       NOT NULL,
    status       text        NOT NULL CHECK (status IN ('running', 'done')),
    matched      integer     NOT NULL,
    done         integer     NOT NULL DEFAULT 0,
    applied      integer     NOT NULL DEFAULT 0,
    failed       integer     NOT NULL DEFAULT 0,
    created_by   text        NOT NULL,
    created_at   timestamptz NOT NULL,
    finished_at  timestamptz,
    lease_owner  text,
    leased_until timestamptz
);
CREATE INDEX replays_running_idx ON replays (created_at) WHERE status = 'running';

CREATE TABLE replay_items (
    replay_id      text    NOT NULL REFERENCES replays (id) ON DELETE CASCADE,
    seq            integer NOT NULL,
    kind           text    NOT NULL DEFAULT 'event' CHECK (kind IN ('event', 'delivery')),
    event_id       text    NOT NULL, -- the event id; for a delivery (a dead letter) the outbox message id
    stripe_account text    NOT NULL,
    outcome        text,   -- NULL until re-driven: applied, completed, duplicate, ignored, rejected, failed; redriven or not_dead for a delivery
    error          text,
    PRIMARY KEY (replay_id, seq)
);

-- +goose Down
DROP TABLE replay_items;
DROP TABLE replays;
