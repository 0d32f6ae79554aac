-- +goose Up
-- Collections triggered by the platform (docs/design.md §8): each trigger,
-- from the queue or the API, is recorded here before anything is charged,
-- one row per reference (the platform's id of its event: the same reference
-- twice does nothing twice, it only counts a duplicate). The processor of
-- every replica leases the rows still 'running' (waiting to be collected)
-- with the lease package's FOR UPDATE SKIP LOCKED, asks the billing core to
-- collect, and writes what it did in the same row. The money-safety rules
-- (one triggered attempt per period per BILLING_TRIGGER_MIN_GAP, the claim,
-- the idempotency key) live on the billing period in DynamoDB; these rows
-- say what each trigger did.
CREATE TABLE billing_triggers (
    id                text        PRIMARY KEY,
    reference         text        NOT NULL UNIQUE,
    account_id        text        NOT NULL,
    kind              text        NOT NULL CHECK (kind IN ('income', 'balance')),
    occurred_at       timestamptz NOT NULL,
    source            text        NOT NULL CHECK (source IN ('api', 'queue')),
    message_id        text,       -- the EventBridge event's id (queue only)
    status            text        NOT NULL CHECK (status IN ('running', 'done')),
    outcome           text,       -- NULL while running: billing.Trigger* outcomes
    process           text        NOT NULL CHECK (process IN ('WEBHOOK', 'WEBHOOK_BALANCE')),
    today             text,       -- the day it acted on (a test clock's)
    attempts          integer     NOT NULL DEFAULT 0,
    periods           jsonb       NOT NULL DEFAULT '[]',
    tries             integer     NOT NULL DEFAULT 0,
    error             text,
    duplicates        integer     NOT NULL DEFAULT 0,
    last_duplicate_at timestamptz,
    created_at        timestamptz NOT NULL,
    processed_at      timestamptz,
    lease_owner       text,
    leased_until      timestamptz
);
CREATE INDEX billing_triggers_running_idx ON billing_triggers (created_at) WHERE status = 'running';
CREATE INDEX billing_triggers_account_idx ON billing_triggers (account_id, created_at DESC);

-- Queue messages that are not triggers, with the reason: the message
-- itself stays on the queue for the redrive policy (dead-letter queue).
CREATE TABLE billing_trigger_refusals (
    message_id    text        PRIMARY KEY,
    reason        text        NOT NULL,
    error         text        NOT NULL,
    body          text        NOT NULL, -- the first 2 KiB
    receive_count integer     NOT NULL,
    first_seen    timestamptz NOT NULL,
    last_seen     timestamptz NOT NULL
);
CREATE INDEX billing_trigger_refusals_seen_idx ON billing_trigger_refusals (last_seen DESC);

-- +goose Down
DROP TABLE billing_trigger_refusals;
DROP TABLE billing_triggers;
