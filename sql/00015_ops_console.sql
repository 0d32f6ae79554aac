-- +goose Up
-- What the operator console (/ops/) reads without scanning the events table.

-- Events handled per hour and outcome (applied, duplicate, failed, rejected,
-- ignored), added to by every instance from in-memory counts flushed every
-- few seconds: 48 hourly rows per outcome is the whole overview chart.
CREATE TABLE ops_event_hours (
    hour    timestamptz NOT NULL CHECK (date_trunc('hour', hour) = hour),
    outcome text        NOT NULL,
    n       bigint      NOT NULL CHECK (n >= 0),
    PRIMARY KEY (hour, outcome)
);

-- Events whose last handling failed or was rejected: the dead-letter view.
-- A row is written when an event fails or is rejected and removed when a
-- later delivery or replay records it processed without error.
CREATE TABLE ops_event_problems (
    event_id       text        PRIMARY KEY,
    outcome        text        NOT NULL CHECK (outcome IN ('failed', 'rejected')),
    event_type     text        NOT NULL,
    stripe_account text        NOT NULL,
    error          text        NOT NULL,
    at             timestamptz NOT NULL
);
CREATE INDEX ops_event_problems_at_idx ON ops_event_problems (at DESC, event_id);

-- Billing job runs (serve's ticker, `collect`, `remind`) and their reports.
CREATE TABLE ops_billing_runs (
    id          bigserial   PRIMARY KEY,
    job         text        NOT NULL,
    date        date        NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    report      jsonb       NOT NULL,
    error       text
);
CREATE INDEX ops_billing_runs_started_idx ON ops_billing_runs (started_at DESC);

-- +goose Down
DROP TABLE ops_billing_runs;
DROP TABLE ops_event_problems;
DROP TABLE ops_event_hours;
