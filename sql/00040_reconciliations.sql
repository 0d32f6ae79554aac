-- +goose Up
-- Reconciliation runs (docs/design.md §11): what the service holds compared
-- with what Stripe holds now. A run's items are the local objects in scope
-- when it was asked for (a purchase's PaymentIntent or subscription, a
-- billing attempt's bank debit waiting to settle, a connected account the
-- poller walks), in order; the runner reads each from Stripe, records the outcome with the
-- counters in one transaction, so a restart resumes at the first item
-- without one. An item healed but not yet recorded when the process died
-- is compared again: its snapshot event has the same id, so the handler's
-- ledger answers duplicate and nothing applies twice.
CREATE TABLE reconciliations (
    id           text        PRIMARY KEY,
    status       text        NOT NULL CHECK (status IN ('running', 'done')),
    dry_run      boolean     NOT NULL,
    since        timestamptz NOT NULL,
    kinds        text[]      NOT NULL,
    matched      integer     NOT NULL,
    checked      integer     NOT NULL DEFAULT 0,
    drifted      integer     NOT NULL DEFAULT 0,
    healed       integer     NOT NULL DEFAULT 0,
    failed       integer     NOT NULL DEFAULT 0,
    created_by   text        NOT NULL,
    created_at   timestamptz NOT NULL,
    finished_at  timestamptz,
    lease_owner  text,
    leased_until timestamptz
);
CREATE INDEX reconciliations_running_idx ON reconciliations (created_at) WHERE status = 'running';
CREATE INDEX reconciliations_created_idx ON reconciliations (created_at DESC);

CREATE TABLE reconcile_items (
    reconciliation_id text        NOT NULL REFERENCES reconciliations (id) ON DELETE CASCADE,
    seq               integer     NOT NULL,
    kind              text        NOT NULL CHECK (kind IN ('payment_intent', 'subscription', 'billing_attempt', 'account')),
    object_id         text        NOT NULL,
    stripe_account    text        NOT NULL, -- '' for the platform's own account
    purchase          uuid,       -- a purchase's object
    period            text,       -- a billing attempt's period: account, subscription and billing date
    created           timestamptz NOT NULL, -- the purchase's, or the period's date: where the listing window starts
    CHECK ((kind IN ('payment_intent', 'subscription')) = (purchase IS NOT NULL)),
    CHECK ((kind = 'billing_attempt') = (period IS NOT NULL)),
    outcome           text,       -- NULL until compared: in_sync, healed, drift (a dry run), failed
    PRIMARY KEY (reconciliation_id, seq)
);

-- One row per difference found: what the service held, what Stripe holds,
-- what was done about it.
CREATE TABLE reconcile_findings (
    reconciliation_id text        NOT NULL REFERENCES reconciliations (id) ON DELETE CASCADE,
    seq               integer     NOT NULL,
    kind              text        NOT NULL,
    object_id         text        NOT NULL,
    stripe_account    text        NOT NULL,
    local_state       text        NOT NULL,
    stripe_state      text        NOT NULL,
    action            text        NOT NULL,
    error             text,
    at                timestamptz NOT NULL,
    PRIMARY KEY (reconciliation_id, seq)
);

-- +goose Down
DROP TABLE reconcile_findings;
DROP TABLE reconcile_items;
DROP TABLE reconciliations;
