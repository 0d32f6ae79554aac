-- +goose Up
-- The outbox: side effects written in the same transaction as the state
-- transition that causes them, delivered afterwards at least once by a worker
-- per topic. dedupe_key makes "one message per effect" a database fact.
CREATE TABLE outbox (
    id            uuid        PRIMARY KEY,
    topic         text        NOT NULL,
    type          text        NOT NULL,
    dedupe_key    text        NOT NULL UNIQUE,
    payload       jsonb       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    available_at  timestamptz NOT NULL DEFAULT now(),
    attempts      integer     NOT NULL DEFAULT 0,
    last_error    text,
    delivered_at  timestamptz
);
-- The worker's scan: undelivered messages of a topic that are due.
CREATE INDEX outbox_pending_idx ON outbox (topic, available_at) WHERE delivered_at IS NULL;

-- +goose Down
DROP TABLE outbox;
