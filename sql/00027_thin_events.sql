-- +goose Up
-- Thin events (docs/design.md §4). A thin notification is recorded in the
-- events table (status received, payload_kind thin) and queued here in the
-- same delivery, before the 200: the hydrator claims due rows with a lease,
-- hydrates them through Stripe's API and the one handler, and deletes the row
-- once the thin record is processed. A crash at any point leaves the row (or
-- no 200, so Stripe delivers again): nothing received is lost.
CREATE TABLE thin_hydrations (
    event_id        text        PRIMARY KEY,
    event_type      text        NOT NULL,
    context         text        NOT NULL DEFAULT '', -- connected account, '' the platform
    source          text        NOT NULL,
    payload         bytea       NOT NULL,            -- the thin notification as delivered
    received_at     timestamptz NOT NULL DEFAULT now(),
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    attempts        integer     NOT NULL DEFAULT 0,
    last_error      text,
    leased_until    timestamptz
);
CREATE INDEX thin_hydrations_due ON thin_hydrations (next_attempt_at);

-- The connected accounts Accounts v2 events tell the service about
-- (v2.core.account.created|updated|closed and v2.core.account[...].updated):
-- the poller walks the open ones, and a closed one until its last events are
-- in. event_at orders the events about one account (they arrive in any
-- order): an older event never undoes a newer one.
CREATE TABLE connected_accounts (
    account    text        PRIMARY KEY,
    status     text        NOT NULL CHECK (status IN ('open', 'closed')),
    event_at   timestamptz NOT NULL,
    last_event text        NOT NULL,
    closed_at  timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE connected_accounts;
DROP TABLE thin_hydrations;
