-- +goose Up
-- The tracking tables of the Stripe payments tracking database: purchases,
-- the payments (PaymentIntents) and subscriptions that pay for them. Each
-- state row also keeps the Stripe event last seen for it (created, id), so
-- that an older event never undoes a newer state (see 00004 and
-- internal/tracking).
CREATE TYPE payment_status AS ENUM ('new', 'paid', 'failed');
CREATE TYPE subscription_status AS ENUM ('new', 'active', 'terminated');
CREATE TYPE purchase_kind AS ENUM ('legacy', 'one_off', 'recurring');

CREATE TABLE purchases (
    id                 uuid          PRIMARY KEY,
    created            timestamptz   NOT NULL DEFAULT now(),
    last_updated       timestamptz   NOT NULL DEFAULT now(),
    account            uuid          NOT NULL,
    stripe_account     text          NOT NULL CHECK (stripe_account LIKE 'acct\_%'),
    kind               purchase_kind NOT NULL,
    fulfilled          boolean       NOT NULL DEFAULT false,
    fulfilled_at       timestamptz,
    -- The client's Idempotency-Key for POST /v1/purchases and a digest of
    -- the request it came with: a retry maps to the same purchase.
    idempotency_key    text,
    request_hash       text,
    -- Stripe objects the purchase API created (or was told about).
    customer           text,
    payment_intent     text,
    invoice            text,
    subscription       text,
    last_event_id      text,
    last_event_created timestamptz,
    CONSTRAINT purchases_fulfilled_at CHECK (fulfilled = (fulfilled_at IS NOT NULL)),
    CONSTRAINT purchases_idempotency_key UNIQUE (account, idempotency_key),
    -- target of the children's composite foreign keys: a payment or a
    -- subscription belongs to the same account as its purchase
    CONSTRAINT purchases_owner UNIQUE (id, account, stripe_account)
);

CREATE TABLE payments (
    id                 text           PRIMARY KEY CHECK (id LIKE 'pi\_%'),
    created            timestamptz    NOT NULL DEFAULT now(),
    last_updated       timestamptz    NOT NULL DEFAULT now(),
    account            uuid           NOT NULL,
    stripe_account     text           NOT NULL,
    purchase           uuid           NOT NULL,
    status             payment_status NOT NULL DEFAULT 'new',
    last_event_id      text,
    last_event_created timestamptz,
    CONSTRAINT payments_purchase_fkey FOREIGN KEY (purchase, account, stripe_account)
        REFERENCES purchases (id, account, stripe_account)
);
CREATE INDEX payments_purchase_idx ON payments (purchase);

CREATE TABLE subscriptions (
    id                 text                PRIMARY KEY CHECK (id LIKE 'sub\_%'),
    created            timestamptz         NOT NULL DEFAULT now(),
    last_updated       timestamptz         NOT NULL DEFAULT now(),
    account            uuid                NOT NULL,
    stripe_account     text                NOT NULL,
    purchase           uuid                NOT NULL,
    status             subscription_status NOT NULL DEFAULT 'new',
    last_event_id      text,
    last_event_created timestamptz,
    CONSTRAINT subscriptions_purchase_fkey FOREIGN KEY (purchase, account, stripe_account)
        REFERENCES purchases (id, account, stripe_account)
);
CREATE INDEX subscriptions_purchase_idx ON subscriptions (purchase);

-- +goose Down
DROP TABLE subscriptions;
DROP TABLE payments;
DROP TABLE purchases;
DROP TYPE purchase_kind;
DROP TYPE subscription_status;
DROP TYPE payment_status;
