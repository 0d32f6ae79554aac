-- +goose Up
-- A PaymentIntent can succeed after a failed attempt: the buyer retries on
-- the same PaymentIntent with another card, and Stripe sends
-- payment_intent.payment_failed and then payment_intent.succeeded. The money
-- was collected, so the payment ends paid. Reference 004's diagram has only
-- new -> paid | failed; this adds the one arrow failed -> paid (README,
-- "Deviation from reference 004"). paid stays final: nothing leaves it.

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION payments_transition() RETURNS trigger LANGUAGE plpgsql AS $$
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
    IF NEW.status <> OLD.status AND NOT (
           (OLD.status = 'new' AND NEW.status IN ('paid', 'failed'))
        OR (OLD.status = 'failed' AND NEW.status = 'paid')) THEN
        PERFORM tracking_refuse('payments', format('illegal transition %s -> %s', OLD.status, NEW.status));
    END IF;
    IF NEW IS DISTINCT FROM OLD THEN
        NEW.last_updated := greatest(now(), OLD.last_updated);
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION payments_transition() RETURNS trigger LANGUAGE plpgsql AS $$
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
