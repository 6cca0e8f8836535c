-- The schema of docs/architecture.md, "The database schema". Every statement runs with search_path set to the
-- endpoint's schema (spec.database.schema), so names here are unqualified.

-- +goose Up
-- Receipts: one row per authentic event, ever. The unique constraint is the dedupe
-- arbiter (never a prior SELECT); duplicates add no row.
CREATE TABLE webhook_events (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint     text        NOT NULL,
    event_id     text        NOT NULL,
    event_type   text        NOT NULL DEFAULT '',
    entity_key   text        NOT NULL DEFAULT '',
    payload      jsonb       NOT NULL,
    headers      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    received_at  timestamptz NOT NULL DEFAULT now(),
    occurred_at  timestamptz,
    outcome      text        NOT NULL,
    detail       text        NOT NULL DEFAULT '',
    processed_at timestamptz,
    CONSTRAINT webhook_events_endpoint_event_id_key UNIQUE (endpoint, event_id),
    CONSTRAINT webhook_events_outcome_check
        CHECK (outcome IN ('applied', 'ignored_state', 'guard_failed', 'unmatched', 'unhandled'))
);

-- Replay looks for receipts that may apply later.
CREATE INDEX webhook_events_replayable_idx ON webhook_events (endpoint, received_at)
    WHERE outcome IN ('unmatched', 'guard_failed');

-- Managed entities (used when spec.entity.table is absent). last_event_at is the
-- occurredAt of the last applied event: older events are stale and ignored.
CREATE TABLE entities (
    endpoint      text        NOT NULL,
    entity_key    text        NOT NULL,
    state         text        NOT NULL,
    amount        bigint,
    version       bigint      NOT NULL DEFAULT 0,
    last_event_at timestamptz,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (endpoint, entity_key)
);

-- The outbox: one row per emitted effect. dedupe_key is derived from the endpoint, the
-- source event id and the emitted type, never random, and is the Idempotency-Key.
CREATE TABLE outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint        text        NOT NULL,
    dedupe_key      text        NOT NULL,
    entity_key      text        NOT NULL,
    event_type      text        NOT NULL,
    source_event_id text        NOT NULL,
    payload         jsonb       NOT NULL,
    occurred_at     timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    available_at    timestamptz NOT NULL DEFAULT now(),
    attempts        integer     NOT NULL DEFAULT 0,
    lease_until     timestamptz,
    last_error      text,
    delivered_at    timestamptz,
    dead_at         timestamptz,
    CONSTRAINT outbox_endpoint_dedupe_key_key UNIQUE (endpoint, dedupe_key)
);

-- The claim query scans due, undelivered rows; PerEntity ordering looks for an earlier
-- undelivered row of the same entity.
CREATE INDEX outbox_due_idx ON outbox (endpoint, available_at, id)
    WHERE delivered_at IS NULL AND dead_at IS NULL;
CREATE INDEX outbox_entity_pending_idx ON outbox (endpoint, entity_key, id)
    WHERE delivered_at IS NULL AND dead_at IS NULL;
CREATE INDEX outbox_dead_idx ON outbox (endpoint, dead_at) WHERE dead_at IS NOT NULL;

-- Wake dispatchers at commit (NOTIFY is delivered only when the transaction commits, and
-- repeated payloads in one transaction fold into one), so the receiver needs no extra
-- round trip. The payload is the endpoint; the channel is fixed.
-- +goose StatementBegin
CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('hookkeeper_outbox', NEW.endpoint);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH ROW EXECUTE FUNCTION outbox_notify();

-- +goose Down
DROP TRIGGER outbox_notify ON outbox;
DROP FUNCTION outbox_notify();
DROP TABLE outbox;
DROP TABLE entities;
DROP TABLE webhook_events;
