-- +goose Up
-- The state machines, enforced by the database itself: a row is born in its
-- initial state, and an UPDATE may only follow an arrow of the diagrams
--   purchase      new -> fulfilled
--   payment       new -> paid | failed
--   subscription  new -> active -> terminated, new -> terminated
-- (staying in the same state is allowed: the event bookkeeping columns move).
-- The identity columns of a row never change, a Stripe id recorded on a
-- purchase is never replaced, and last_updated is maintained here.
-- Refusals raise check_violation (23514) naming the constraint
-- <table>_transition, which internal/tracking maps to ErrIllegalTransition.

-- +goose StatementBegin
CREATE FUNCTION tracking_refuse(tbl text, msg text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%: %', tbl, msg
        USING ERRCODE = 'check_violation', CONSTRAINT = tbl || '_transition', TABLE = tbl;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION purchases_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.fulfilled OR NEW.fulfilled_at IS NOT NULL THEN
            PERFORM tracking_refuse('purchases', 'a purchase starts new (not fulfilled)');
        END IF;
        NEW.last_updated := NEW.created;
        RETURN NEW;
    END IF;
    IF NEW.id <> OLD.id OR NEW.created <> OLD.created OR NEW.account <> OLD.account
       OR NEW.stripe_account <> OLD.stripe_account OR NEW.kind <> OLD.kind
       OR NEW.idempotency_key IS DISTINCT FROM OLD.idempotency_key
       OR NEW.request_hash IS DISTINCT FROM OLD.request_hash THEN
        PERFORM tracking_refuse('purchases', 'identity columns are immutable');
    END IF;
    IF OLD.fulfilled AND NOT NEW.fulfilled THEN
        PERFORM tracking_refuse('purchases', 'illegal transition fulfilled -> new');
    END IF;
    IF OLD.fulfilled AND NEW.fulfilled_at IS DISTINCT FROM OLD.fulfilled_at THEN
        PERFORM tracking_refuse('purchases', 'fulfilled_at is immutable once fulfilled');
    END IF;
    IF (OLD.customer IS NOT NULL AND NEW.customer IS DISTINCT FROM OLD.customer)
       OR (OLD.payment_intent IS NOT NULL AND NEW.payment_intent IS DISTINCT FROM OLD.payment_intent)
       OR (OLD.invoice IS NOT NULL AND NEW.invoice IS DISTINCT FROM OLD.invoice)
       OR (OLD.subscription IS NOT NULL AND NEW.subscription IS DISTINCT FROM OLD.subscription) THEN
        PERFORM tracking_refuse('purchases', 'a recorded Stripe id is never replaced');
    END IF;
    IF NEW IS DISTINCT FROM OLD THEN
        NEW.last_updated := greatest(now(), OLD.last_updated);
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION payments_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.status <> 'new' THEN
            PERFORM tracking_refuse('payments', format('a payment starts new, not %s', NEW.status));
        END IF;
        NEW.last_updated := NEW.created;
        RETURN NEW;
    END IF;
    IF NEW.id <> OLD.id OR NEW.created <> OLD.created OR NEW.account <> OLD.account
       OR NEW.stripe_account <> OLD.stripe_account OR NEW.purchase <> OLD.purchase THEN
        PERFORM tracking_refuse('payments', 'identity columns are immutable');
    END IF;
    IF NEW.status <> OLD.status AND NOT (OLD.status = 'new' AND NEW.status IN ('paid', 'failed')) THEN
        PERFORM tracking_refuse('payments', format('illegal transition %s -> %s', OLD.status, NEW.status));
    END IF;
    IF NEW IS DISTINCT FROM OLD THEN
        NEW.last_updated := greatest(now(), OLD.last_updated);
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION subscriptions_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.status <> 'new' THEN
            PERFORM tracking_refuse('subscriptions', format('a subscription starts new, not %s', NEW.status));
        END IF;
        NEW.last_updated := NEW.created;
        RETURN NEW;
    END IF;
    IF NEW.id <> OLD.id OR NEW.created <> OLD.created OR NEW.account <> OLD.account
       OR NEW.stripe_account <> OLD.stripe_account OR NEW.purchase <> OLD.purchase THEN
        PERFORM tracking_refuse('subscriptions', 'identity columns are immutable');
    END IF;
    IF NEW.status <> OLD.status AND NOT (
           (OLD.status = 'new' AND NEW.status IN ('active', 'terminated'))
        OR (OLD.status = 'active' AND NEW.status = 'terminated')) THEN
        PERFORM tracking_refuse('subscriptions', format('illegal transition %s -> %s', OLD.status, NEW.status));
    END IF;
    IF NEW IS DISTINCT FROM OLD THEN
        NEW.last_updated := greatest(now(), OLD.last_updated);
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER purchases_transition BEFORE INSERT OR UPDATE ON purchases
    FOR EACH ROW EXECUTE FUNCTION purchases_transition();
CREATE TRIGGER payments_transition BEFORE INSERT OR UPDATE ON payments
    FOR EACH ROW EXECUTE FUNCTION payments_transition();
CREATE TRIGGER subscriptions_transition BEFORE INSERT OR UPDATE ON subscriptions
    FOR EACH ROW EXECUTE FUNCTION subscriptions_transition();

-- +goose Down
DROP TRIGGER subscriptions_transition ON subscriptions;
DROP TRIGGER payments_transition ON payments;
DROP TRIGGER purchases_transition ON purchases;
DROP FUNCTION subscriptions_transition();
DROP FUNCTION payments_transition();
DROP FUNCTION purchases_transition();
DROP FUNCTION tracking_refuse(text, text);
