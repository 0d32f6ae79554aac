-- +goose Up
-- The billing queue (BILLING_QUEUE_URL, docs/billing.md "Billing queue"):
-- a collection run sends its accounts to SQS and the workers of every
-- replica collect them. A queued run is followed here, shared by the
-- replicas: the enqueue (one replica per date at a time: the partial
-- unique index), and each message's outcome, recorded before the message
-- is deleted.
CREATE TABLE ops_billing_queue_runs (
    id              uuid        PRIMARY KEY,
    job             text        NOT NULL,
    date            date        NOT NULL,
    test_clock      text        NOT NULL DEFAULT '',
    started_at      timestamptz NOT NULL,
    -- heartbeat_at: the enqueuer's last report; a run whose enqueue went
    -- quiet (its replica was killed) is superseded by the next start.
    heartbeat_at    timestamptz NOT NULL,
    deadline        timestamptz NOT NULL,
    enqueued        integer     NOT NULL DEFAULT 0,
    enqueue_done_at timestamptz,
    enqueue_error   text,
    drained_at      timestamptz,
    superseded_at   timestamptz
);
-- One open run per job, clock and date.
CREATE UNIQUE INDEX ops_billing_queue_runs_open_idx ON ops_billing_queue_runs (job, test_clock, date)
    WHERE drained_at IS NULL AND superseded_at IS NULL;
CREATE INDEX ops_billing_queue_runs_started_idx ON ops_billing_queue_runs (started_at);

-- One row per message (an account, or a part of one), the latest outcome.
CREATE TABLE ops_billing_queue_messages (
    run_id           uuid        NOT NULL REFERENCES ops_billing_queue_runs (id) ON DELETE CASCADE,
    account          text        NOT NULL,
    part             integer     NOT NULL,
    outcome          text        NOT NULL,
    receives         integer     NOT NULL,
    cause            text        NOT NULL DEFAULT '',
    replica          text        NOT NULL DEFAULT '',
    at               timestamptz NOT NULL,
    entries          integer     NOT NULL DEFAULT 0,
    reminded         integer     NOT NULL DEFAULT 0,
    succeeded        integer     NOT NULL DEFAULT 0,
    processing       integer     NOT NULL DEFAULT 0,
    declined         integer     NOT NULL DEFAULT 0,
    stale            integer     NOT NULL DEFAULT 0,
    paused_skipped   integer     NOT NULL DEFAULT 0,
    resumed          integer     NOT NULL DEFAULT 0,
    skipped          integer     NOT NULL DEFAULT 0,
    paid_by_customer integer     NOT NULL DEFAULT 0,
    unknown          integer     NOT NULL DEFAULT 0,
    resolved         integer     NOT NULL DEFAULT 0,
    unresolved       integer     NOT NULL DEFAULT 0,
    errors           integer     NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, account, part)
);
-- The dead letters of the incidents, newest first.
CREATE INDEX ops_billing_queue_messages_dead_idx ON ops_billing_queue_messages (at DESC) WHERE outcome = 'dead';
-- A dead letter is settled by a later clean outcome of its account.
CREATE INDEX ops_billing_queue_messages_account_idx ON ops_billing_queue_messages (account, at);

-- The run a billing run row enqueued (its progress is the queue run's).
ALTER TABLE ops_billing_runs ADD COLUMN queue_run uuid;

-- +goose Down
ALTER TABLE ops_billing_runs DROP COLUMN queue_run;
DROP TABLE ops_billing_queue_messages;
DROP TABLE ops_billing_queue_runs;
