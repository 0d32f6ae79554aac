-- +goose Up
-- A test clock's day runs the same remind and collect jobs as the real
-- ticker, on the clock's own dates. Recording them beside the real runs
-- (marked with their clock) lets the overview show what 90 days of
-- test-clock billing did, instead of "no billing run recorded yet"; the
-- run counter and its alert still count real runs only.
ALTER TABLE ops_billing_runs ADD COLUMN test_clock text;

-- +goose Down
ALTER TABLE ops_billing_runs DROP COLUMN test_clock;
