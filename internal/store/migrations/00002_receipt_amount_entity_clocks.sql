-- Columns and tables the receipt transaction needs beyond 00001.

-- +goose Up
-- The extracted amount, so replay can re-run a stored receipt's guard exactly as the
-- first delivery saw it.
ALTER TABLE webhook_events ADD COLUMN amount bigint;

-- Stale-event clocks for endpoints bound to the app's own table (entity.table): the app
-- table has no column for it, so hookkeeper keeps the occurredAt of the last applied
-- event per entity here. Rows are written only while the app row is locked, so the app
-- row lock serialises them.
CREATE TABLE entity_clocks (
    endpoint      text        NOT NULL,
    entity_key    text        NOT NULL,
    last_event_at timestamptz NOT NULL,
    PRIMARY KEY (endpoint, entity_key)
);

-- +goose Down
DROP TABLE entity_clocks;
ALTER TABLE webhook_events DROP COLUMN amount;
