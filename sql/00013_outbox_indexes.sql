-- +goose NO TRANSACTION
-- +goose Up
-- Indexes of the claim, backlog, dead-letter and prune queries, built
-- CONCURRENTLY: the outbox was never pruned before this release, and a plain
-- CREATE INDEX would block the ingest transactions' inserts for the whole
-- build. Each is partial, so it holds only the rows its query reads.

-- The claim: due, undelivered, live messages of a topic, oldest due first.
-- A claimed row's available_at moves to its lease end, so rows under lease
-- are not scanned.
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_claim_idx
    ON outbox (topic, available_at) WHERE delivered_at IS NULL AND dead_at IS NULL;
-- Backlog metrics: count and oldest created_at of undelivered messages per topic.
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_backlog_idx
    ON outbox (topic, created_at) WHERE delivered_at IS NULL AND dead_at IS NULL;
-- Dead letters: listed newest first, counted per topic.
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_dead_idx
    ON outbox (topic, dead_at, id) WHERE dead_at IS NOT NULL;
-- Pruning of delivered messages past the retention.
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_delivered_idx
    ON outbox (delivered_at) WHERE delivered_at IS NOT NULL;
-- Replaced by outbox_claim_idx (it also excludes dead letters).
DROP INDEX CONCURRENTLY IF EXISTS outbox_pending_idx;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_pending_idx
    ON outbox (topic, available_at) WHERE delivered_at IS NULL;
DROP INDEX CONCURRENTLY IF EXISTS outbox_delivered_idx;
DROP INDEX CONCURRENTLY IF EXISTS outbox_dead_idx;
DROP INDEX CONCURRENTLY IF EXISTS outbox_backlog_idx;
DROP INDEX CONCURRENTLY IF EXISTS outbox_claim_idx;
