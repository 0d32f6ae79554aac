-- +goose Up
-- Incidents kept incrementally (docs/incidents.md): an event problem's
-- incident cause is computed by the service when the row is written (cause,
-- with the version of the classifier that computed it), and a count per
-- group (cause, event_type, stripe_account) is kept in the same statement
-- by the triggers below, so listing the incidents reads one row per group
-- and a few index entries, never every problem row. Rows written before
-- this (cause NULL) or by an older classifier are classified by the next
-- read of the incidents.
ALTER TABLE ops_event_problems ADD COLUMN cause text, ADD COLUMN cause_version integer;
CREATE INDEX ops_event_problems_group_idx ON ops_event_problems (cause, event_type, stripe_account, at DESC, event_id);
CREATE INDEX ops_event_problems_cause_version_idx ON ops_event_problems (cause_version);

CREATE TABLE incident_event_groups (
    cause          text   NOT NULL,
    event_type     text   NOT NULL,
    stripe_account text   NOT NULL,
    n              bigint NOT NULL,
    PRIMARY KEY (cause, event_type, stripe_account)
) WITH (fillfactor = 50); -- every listed event updates its group's row: room for HOT updates

-- Statement-level, on the statement's transition tables: a statement that
-- writes many rows touches each group once, in key order, so two
-- statements never lock the same groups in opposite orders (no deadlock
-- between two instances taking batches of events off the list).
-- +goose StatementBegin
CREATE FUNCTION incident_event_groups_apply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO incident_event_groups AS g (cause, event_type, stripe_account, n)
            SELECT cause, event_type, stripe_account, count(*) FROM new_rows WHERE cause IS NOT NULL
            GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
            ON CONFLICT (cause, event_type, stripe_account) DO UPDATE SET n = g.n + excluded.n;
        RETURN NULL;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO incident_event_groups AS g (cause, event_type, stripe_account, n)
            SELECT cause, event_type, stripe_account, -count(*) FROM old_rows WHERE cause IS NOT NULL
            GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
            ON CONFLICT (cause, event_type, stripe_account) DO UPDATE SET n = g.n + excluded.n;
    ELSE
        INSERT INTO incident_event_groups AS g (cause, event_type, stripe_account, n)
            SELECT cause, event_type, stripe_account, sum(d) FROM (
                SELECT cause, event_type, stripe_account, 1 AS d FROM new_rows WHERE cause IS NOT NULL
                UNION ALL
                SELECT cause, event_type, stripe_account, -1 FROM old_rows WHERE cause IS NOT NULL) x
            GROUP BY 1, 2, 3 HAVING sum(d) <> 0 ORDER BY 1, 2, 3
            ON CONFLICT (cause, event_type, stripe_account) DO UPDATE SET n = g.n + excluded.n;
    END IF;
    -- A group nothing fails in any more is gone (these rows are locked
    -- already, by the statement above).
    DELETE FROM incident_event_groups g
        USING (SELECT DISTINCT cause, event_type, stripe_account FROM old_rows WHERE cause IS NOT NULL) x
        WHERE g.cause = x.cause AND g.event_type = x.event_type AND g.stripe_account = x.stripe_account AND g.n <= 0;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER ops_event_problems_groups_insert AFTER INSERT ON ops_event_problems
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION incident_event_groups_apply();
CREATE TRIGGER ops_event_problems_groups_update AFTER UPDATE ON ops_event_problems
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION incident_event_groups_apply();
CREATE TRIGGER ops_event_problems_groups_delete AFTER DELETE ON ops_event_problems
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION incident_event_groups_apply();

-- +goose StatementBegin
CREATE FUNCTION incident_event_groups_clear() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM incident_event_groups;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER ops_event_problems_groups_truncate AFTER TRUNCATE ON ops_event_problems
    FOR EACH STATEMENT EXECUTE FUNCTION incident_event_groups_clear();

-- +goose Down
DROP TRIGGER ops_event_problems_groups_truncate ON ops_event_problems;
DROP TRIGGER ops_event_problems_groups_delete ON ops_event_problems;
DROP TRIGGER ops_event_problems_groups_update ON ops_event_problems;
DROP TRIGGER ops_event_problems_groups_insert ON ops_event_problems;
DROP FUNCTION incident_event_groups_clear();
DROP FUNCTION incident_event_groups_apply();
DROP TABLE incident_event_groups;
DROP INDEX ops_event_problems_cause_version_idx;
DROP INDEX ops_event_problems_group_idx;
ALTER TABLE ops_event_problems DROP COLUMN cause_version, DROP COLUMN cause;
