-- +goose Up
-- One Stripe API budget for every replica and job (docs/design.md §9), kept as a
-- GCRA schedule: `tat` is the theoretical arrival time, the next free
-- request slot of the whole service. A lease reserves consecutive slots
-- `interval` apart from max(tat, now) and moves tat past them, so slots
-- handed to different replicas never overlap and the service as a whole
-- never sends more than one request per interval. The clock is the
-- database's (clock_timestamp), one clock for every replica.
--
-- demand[c] is until when class c (1 charges, 2 hydration and purchases,
-- 3 background) has requests waiting somewhere; floor_tat[c] is when a
-- lower class may next take a slot although a higher class is waiting (its
-- guaranteed share, so it is never starved for good).
CREATE TABLE stripe_budget (
    name      text          PRIMARY KEY,
    tat       timestamptz   NOT NULL DEFAULT '-infinity',
    demand    timestamptz[] NOT NULL DEFAULT '{-infinity,-infinity,-infinity}',
    floor_tat timestamptz[] NOT NULL DEFAULT '{-infinity,-infinity,-infinity}'
);

-- stripe_budget_lease reserves up to p_want slots for class p_class.
--   An unopposed class (no higher class waiting) may reserve slots up to
--   p_ahead after now: the charges class a short horizon (a batch), the
--   lower classes one interval (one request's worth), so whatever a lower
--   class holds delays a charge that arrives next by at most one request.
--   An opposed class takes only a slot that is free right now (a gap the
--   higher classes left) or, every p_floor, one slot at the end of the
--   schedule (its floor share).
-- It returns the slots granted (the first at first_slot, then every
-- p_interval), the database's time, and when to ask again if more is
-- wanted.
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

-- +goose Down
DROP FUNCTION stripe_budget_lease(text, int, int, interval, interval, interval, interval);
DROP TABLE stripe_budget;
