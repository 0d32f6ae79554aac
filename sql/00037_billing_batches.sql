-- +goose Up
-- Batch collections (docs/design.md §4, §8 "Batch collection"). A batch's
-- items are the subscriptions its selection matched when it was asked for,
-- each with the ERROR period it is to charge. The runner records, before any
-- Stripe request, the attempt it is about to make (billing_date and
-- attempt_no: the idempotency key of docs/design.md §8 follows from them), and the
-- outcome with the counters in one transaction afterwards; a restart resumes
-- at the first item without an outcome and settles a begun attempt with its
-- own key, never a new one. The money-safety rules (claim, key) live on the
-- billing period in DynamoDB; these rows only say how far the batch got.
CREATE TABLE billing_batches (
    id           text        PRIMARY KEY,
    selection    jsonb       NOT NULL,
    status       text        NOT NULL CHECK (status IN ('running', 'done')),
    matched      integer     NOT NULL,
    done         integer     NOT NULL DEFAULT 0,
    paid         integer     NOT NULL DEFAULT 0,
    processing   integer     NOT NULL DEFAULT 0,
    declined     integer     NOT NULL DEFAULT 0,
    skipped      integer     NOT NULL DEFAULT 0,
    failed       integer     NOT NULL DEFAULT 0,
    created_by   text        NOT NULL,
    created_at   timestamptz NOT NULL,
    finished_at  timestamptz,
    lease_owner  text,
    leased_until timestamptz
);
CREATE INDEX billing_batches_running_idx ON billing_batches (created_at) WHERE status = 'running';
CREATE INDEX billing_batches_created_idx ON billing_batches (created_at DESC, id DESC);

CREATE TABLE billing_batch_items (
    batch_id        text    NOT NULL REFERENCES billing_batches (id) ON DELETE CASCADE,
    seq             integer NOT NULL,
    account_id      text    NOT NULL,
    subscription_id text    NOT NULL,
    billing_date    text    NOT NULL, -- the ERROR period selected (YYYY-MM-DD)
    amount          bigint  NOT NULL,
    currency        text    NOT NULL,
    begun_date      text,             -- the attempt begun: its period and number (NULL: none yet)
    begun_attempt   integer,
    outcome         text,             -- NULL until done: paid, processing, declined, nothing_to_pay, skipped_*, failed
    payment_intent  text,
    decline_code    text,
    error           text,
    PRIMARY KEY (batch_id, seq)
);

-- +goose Down
DROP TABLE billing_batch_items;
DROP TABLE billing_batches;
