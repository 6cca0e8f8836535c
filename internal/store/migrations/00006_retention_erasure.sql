-- Retention and erasure (docs/operations.md, "Retention" and "Erasing an entity's data").
-- Payloads and headers can be removed while the dedupe record (the row, with its event
-- id, type, entity, outcome and times) stays, so a provider's late redelivery of an
-- event whose payload is gone is still a duplicate.
--
-- No transaction: the index is built CONCURRENTLY, so migrating a large table does not
-- block the receivers writing to it. Every statement is idempotent, so a migration that
-- stopped half way can run again.

-- +goose NO TRANSACTION
-- +goose Up
ALTER TABLE webhook_events ALTER COLUMN payload DROP NOT NULL;
ALTER TABLE webhook_events ALTER COLUMN headers DROP NOT NULL;
-- When the payload and headers were removed (by retention or an erasure); NULL while kept.
ALTER TABLE webhook_events ADD COLUMN IF NOT EXISTS payload_removed_at timestamptz;
ALTER TABLE outbox ALTER COLUMN payload DROP NOT NULL;

-- The receipts whose payload is still kept, oldest first: what retention removes
-- payloads from. A row leaves the index when its payload goes, so pruning never
-- rescans what it already pruned.
CREATE INDEX CONCURRENTLY IF NOT EXISTS webhook_events_payload_kept_idx
    ON webhook_events (endpoint, received_at) WHERE payload IS NOT NULL;

-- Retention deletes and updates a steady share of these tables every few minutes.
-- Vacuum them after 2% of their rows changed instead of PostgreSQL's default 20%, so the
-- space pruning frees is reused by new rows and the tables stay flat rather than grow
-- between vacuums (make soak).
ALTER TABLE webhook_events SET (autovacuum_vacuum_scale_factor = 0.02);
ALTER TABLE outbox SET (autovacuum_vacuum_scale_factor = 0.02);

-- One row per erasure: who asked, why, when, and how much it removed. An erasure that
-- removed nothing (a second run) is recorded too.
CREATE TABLE IF NOT EXISTS erasures (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint    text        NOT NULL,
    entity_key  text        NOT NULL,
    actor       text        NOT NULL,
    reason      text        NOT NULL CHECK (reason <> ''),
    erased_at   timestamptz NOT NULL DEFAULT now(),
    receipts    integer     NOT NULL DEFAULT 0,
    deliveries  integer     NOT NULL DEFAULT 0,
    kept        integer     NOT NULL DEFAULT 0
);

-- +goose Down
ALTER TABLE outbox RESET (autovacuum_vacuum_scale_factor);
ALTER TABLE webhook_events RESET (autovacuum_vacuum_scale_factor);
DROP TABLE IF EXISTS erasures;
DROP INDEX CONCURRENTLY IF EXISTS webhook_events_payload_kept_idx;
UPDATE outbox SET payload = 'null'::jsonb WHERE payload IS NULL;
ALTER TABLE outbox ALTER COLUMN payload SET NOT NULL;
ALTER TABLE webhook_events DROP COLUMN IF EXISTS payload_removed_at;
UPDATE webhook_events SET headers = '{}'::jsonb WHERE headers IS NULL;
UPDATE webhook_events SET payload = 'null'::jsonb WHERE payload IS NULL;
ALTER TABLE webhook_events ALTER COLUMN headers SET NOT NULL;
ALTER TABLE webhook_events ALTER COLUMN payload SET NOT NULL;
