-- A sink that is down for days (docs/operations.md, "HookkeeperSinkDown"), and a recorded
-- way out for dead letters ("Discarding dead letters").

-- +goose Up
-- One row per endpoint: what the dispatchers know about the sink. They update it in the
-- statement that records their attempts' results, so every replica shares it. Once
-- down_since is set, no dispatcher claims rows; one at a time (probe_until, a lease)
-- sends one row as a probe when next_probe_at has passed, and the first answer ends the
-- outage. last_error is a dispatcher's description (a status or a kind of transport
-- error, never the URL). The operator reads this row for the SinkHealthy condition.
CREATE TABLE sink_state (
    endpoint             text        PRIMARY KEY,
    consecutive_failures integer     NOT NULL DEFAULT 0,
    failing_since        timestamptz,
    down_since           timestamptz,
    recovered_at         timestamptz,
    last_error           text        NOT NULL DEFAULT '',
    probes               integer     NOT NULL DEFAULT 0,
    next_probe_at        timestamptz,
    probe_until          timestamptz,
    updated_at           timestamptz NOT NULL DEFAULT now()
);

-- A deliberate discard of dead letters: who, when, why and how many. The rows stay in
-- the outbox, marked with the discard that took them.
CREATE TABLE dead_letter_discards (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint     text        NOT NULL,
    actor        text        NOT NULL,
    reason       text        NOT NULL CHECK (reason <> ''),
    discarded_at timestamptz NOT NULL DEFAULT now(),
    rows         integer     NOT NULL DEFAULT 0
);

-- Nothing here reads or rewrites the outbox, which may be large and is written by every
-- receipt: nullable columns without a default are catalog changes, and the foreign key
-- is NOT VALID (checked for new values, not by a scan of the rows there are, all NULL).
-- The dead letters' partial index stays: discarded rows are few, and the gauge, replay
-- and discard filter them out of it.
ALTER TABLE outbox ADD COLUMN discarded_at timestamptz;
ALTER TABLE outbox ADD COLUMN discard_id bigint;
ALTER TABLE outbox ADD CONSTRAINT outbox_discard_id_fkey
    FOREIGN KEY (discard_id) REFERENCES dead_letter_discards (id) NOT VALID;

-- +goose Down
ALTER TABLE outbox DROP CONSTRAINT outbox_discard_id_fkey;
ALTER TABLE outbox DROP COLUMN discard_id;
ALTER TABLE outbox DROP COLUMN discarded_at;
DROP TABLE dead_letter_discards;
DROP TABLE sink_state;
