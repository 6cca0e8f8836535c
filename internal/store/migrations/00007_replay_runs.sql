-- WebhookReplay resources run once (docs/operations.md, "Replays as resources").

-- +goose Up
-- One row per WebhookReplay run, keyed by the resource's UID: the operator claims it
-- (INSERT ... ON CONFLICT DO NOTHING) before it changes anything, so a run is never
-- started twice, even by an operator that restarted between the run and writing the
-- resource's status. A finished row (finished_at set) is the result: the operator copies
-- it to the status and runs nothing. An unfinished row is a run that stopped midway
-- (the operator crashed or lost the database); the next attempt resumes it, which is safe
-- because every action selects only rows it has not changed yet. starts counts the
-- attempts; error is the last attempt's error, empty once finished.
CREATE TABLE replay_runs (
    uid         text        PRIMARY KEY,
    endpoint    text        NOT NULL,
    namespace   text        NOT NULL,
    name        text        NOT NULL,
    action      text        NOT NULL,
    actor       text        NOT NULL,
    reason      text        NOT NULL DEFAULT '',
    dry_run     boolean     NOT NULL DEFAULT false,
    spec        jsonb       NOT NULL DEFAULT '{}',
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    starts      integer     NOT NULL DEFAULT 1,
    selected    bigint      NOT NULL DEFAULT 0,
    changed     bigint      NOT NULL DEFAULT 0,
    outcomes    jsonb       NOT NULL DEFAULT '{}',
    error       text        NOT NULL DEFAULT ''
);

CREATE INDEX replay_runs_endpoint ON replay_runs (endpoint, started_at);

-- +goose Down
DROP TABLE replay_runs;
