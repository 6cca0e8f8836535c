-- The sink's Retry-After of a row's last answer (docs/architecture.md, "The life of one
-- webhook", step 13): the row is not due before outbox.not_before, even when an outage
-- of the sink ends and the rows that were waiting out their own backoff are made due at
-- once. NULL when the last answer asked for no delay. A nullable column without a
-- default: PostgreSQL adds it to the catalog only, the outbox is not rewritten.

-- +goose Up
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS not_before timestamptz;

-- +goose Down
ALTER TABLE outbox DROP COLUMN IF EXISTS not_before;
