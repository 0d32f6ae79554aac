-- +goose Up
-- A bulk replay can be cancelled: the runner stops before its
-- next item; what it re-drove stays as recorded. The replays row stays the
-- audit row: who cancelled it and when (finished_at).
ALTER TABLE replays DROP CONSTRAINT replays_status_check;
ALTER TABLE replays ADD CONSTRAINT replays_status_check CHECK (status IN ('running', 'done', 'cancelled'));
ALTER TABLE replays ADD COLUMN cancelled_by text;
ALTER TABLE replays ADD CONSTRAINT replays_cancelled_by_check CHECK ((status = 'cancelled') = (cancelled_by IS NOT NULL));

-- +goose Down
-- A cancelled replay is an audit row: kept, as finished ('done').
ALTER TABLE replays DROP CONSTRAINT replays_cancelled_by_check;
UPDATE replays SET status = 'done' WHERE status = 'cancelled';
ALTER TABLE replays DROP COLUMN cancelled_by;
ALTER TABLE replays DROP CONSTRAINT replays_status_check;
ALTER TABLE replays ADD CONSTRAINT replays_status_check CHECK (status IN ('running', 'done'));
