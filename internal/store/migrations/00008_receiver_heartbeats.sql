-- Heartbeats of receiver pool pods (docs/architecture.md, "Receiver pools: the data
-- plane"). A pool pod holds no Kubernetes credentials, so every endpoint it serves
-- writes, into the endpoint's own schema, one row per pod every heartbeat interval:
-- whether it is ready there, what is wrong if not, and which configuration it serves.
-- The operator reads the rows with the endpoint's database URL, as it reads sink_state.

-- +goose Up
CREATE TABLE IF NOT EXISTS receiver_heartbeats (
    endpoint    text        NOT NULL,
    pod         text        NOT NULL,
    pool        text        NOT NULL,
    ready       bool        NOT NULL,
    detail      text        NOT NULL DEFAULT '',
    config_hash text        NOT NULL,
    seen_at     timestamptz NOT NULL,
    PRIMARY KEY (endpoint, pod)
);

-- +goose Down
DROP TABLE IF EXISTS receiver_heartbeats;
