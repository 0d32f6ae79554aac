-- +goose Up
-- stripe_budget_lease with a lead (measured, docs/design.md §9): a slot the store
-- grants at its "now" reaches the replica half a round trip later, already
-- late. When a lease's round trip is longer than a request's worth (a
-- loaded Postgres or replica), every slot granted into an idle schedule
-- came too late to use: the replica dropped it and leased again, and paid
-- another round trip for the same request. p_lead is how long after the
-- store's now the replica can use a slot (its recent leases' return trip):
-- the first slot is no earlier than now + p_lead, and every horizon of
-- 00029 is counted from there. p_lead = 0 is the function of 00029.
DROP FUNCTION stripe_budget_lease(text, int, int, interval, interval, interval, interval);

-- +goose StatementBegin
CREATE FUNCTION stripe_budget_lease(p_name text, p_class int, p_want int, p_interval interval,
    p_ahead interval, p_floor interval, p_demand_ttl interval, p_lead interval,
    OUT granted int, OUT first_slot timestamptz, OUT now_at timestamptz, OUT next_try timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    r       stripe_budget%ROWTYPE;
    t       timestamptz;
    base    timestamptz;
    horizon timestamptz;
    opposed boolean := false;
BEGIN
    SELECT * INTO r FROM stripe_budget WHERE name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO stripe_budget (name) VALUES (p_name) ON CONFLICT DO NOTHING;
        SELECT * INTO r FROM stripe_budget WHERE name = p_name FOR UPDATE;
    END IF;
    t := clock_timestamp();
    now_at := t;
    base := greatest(r.tat, t + p_lead);
    FOR i IN 1 .. p_class - 1 LOOP
        IF r.demand[i] > t THEN
            opposed := true;
        END IF;
    END LOOP;
    IF p_want > 0 THEN
        r.demand[p_class] := greatest(r.demand[p_class], t + p_demand_ttl);
    END IF;
    horizon := CASE WHEN opposed THEN t + p_lead ELSE t + p_lead + p_ahead END;
    granted := 0;
    IF p_want > 0 AND base <= horizon THEN
        granted := least(p_want, floor(extract(epoch FROM horizon - base) / extract(epoch FROM p_interval))::int + 1);
    ELSIF p_want > 0 AND opposed AND p_floor > interval '0' AND r.floor_tat[p_class] <= t THEN
        granted := 1;
        r.floor_tat[p_class] := t + p_floor;
    END IF;
    first_slot := base;
    IF granted > 0 THEN
        r.tat := base + granted * p_interval;
        next_try := r.tat - (horizon - t) / 2;
    ELSE
        next_try := base - (horizon - t) / 2;
        IF opposed AND p_floor > interval '0' THEN
            next_try := least(next_try, r.floor_tat[p_class]);
        END IF;
    END IF;
    UPDATE stripe_budget SET tat = r.tat, demand = r.demand, floor_tat = r.floor_tat WHERE name = p_name;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION stripe_budget_lease(text, int, int, interval, interval, interval, interval, interval);

-- +goose StatementBegin
CREATE FUNCTION stripe_budget_lease(p_name text, p_class int, p_want int, p_interval interval,
    p_ahead interval, p_floor interval, p_demand_ttl interval,
    OUT granted int, OUT first_slot timestamptz, OUT now_at timestamptz, OUT next_try timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    r       stripe_budget%ROWTYPE;
    t       timestamptz;
    base    timestamptz;
    horizon timestamptz;
    opposed boolean := false;
BEGIN
    SELECT * INTO r FROM stripe_budget WHERE name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO stripe_budget (name) VALUES (p_name) ON CONFLICT DO NOTHING;
        SELECT * INTO r FROM stripe_budget WHERE name = p_name FOR UPDATE;
    END IF;
    t := clock_timestamp();
    now_at := t;
    base := greatest(r.tat, t);
    FOR i IN 1 .. p_class - 1 LOOP
        IF r.demand[i] > t THEN
            opposed := true;
        END IF;
    END LOOP;
    IF p_want > 0 THEN
        r.demand[p_class] := greatest(r.demand[p_class], t + p_demand_ttl);
    END IF;
    horizon := CASE WHEN opposed THEN t ELSE t + p_ahead END;
    granted := 0;
    IF p_want > 0 AND base <= horizon THEN
        granted := least(p_want, floor(extract(epoch FROM horizon - base) / extract(epoch FROM p_interval))::int + 1);
    ELSIF p_want > 0 AND opposed AND p_floor > interval '0' AND r.floor_tat[p_class] <= t THEN
        granted := 1;
        r.floor_tat[p_class] := t + p_floor;
    END IF;
    first_slot := base;
    IF granted > 0 THEN
        r.tat := base + granted * p_interval;
        next_try := r.tat - (horizon - t) / 2;
    ELSE
        next_try := base - (horizon - t) / 2;
        IF opposed AND p_floor > interval '0' THEN
            next_try := least(next_try, r.floor_tat[p_class]);
        END IF;
    END IF;
    UPDATE stripe_budget SET tat = r.tat, demand = r.demand, floor_tat = r.floor_tat WHERE name = p_name;
END
$$;
-- +goose StatementEnd
