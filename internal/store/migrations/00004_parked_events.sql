-- Parking (docs/concepts.md, "Ordering"): an authentic event that cannot apply yet, but
-- could from a state its entity may still reach, is recorded as `parked` and applied by
-- the transaction that moves its entity there. A parked event older than
-- spec.stateMachine.parkFor becomes `expired`. A guard that fails to evaluate records
-- `guard_error` and applies nothing. Parked, expired and guard_error receipts can be
-- re-driven by `hookkeeper replay`.

-- +goose Up
ALTER TABLE webhook_events DROP CONSTRAINT webhook_events_outcome_check;
ALTER TABLE webhook_events ADD CONSTRAINT webhook_events_outcome_check
    CHECK (outcome IN ('applied', 'ignored_state', 'guard_failed', 'guard_error', 'parked', 'expired', 'unmatched', 'unhandled'));

-- Every receipt transaction that locks an entity reads its parked events: this index is
-- empty for an entity without any, so the read costs one index probe.
CREATE INDEX webhook_events_parked_idx ON webhook_events (endpoint, entity_key)
    WHERE outcome = 'parked';

DROP INDEX webhook_events_replayable_idx;
CREATE INDEX webhook_events_replayable_idx ON webhook_events (endpoint, received_at)
    WHERE outcome IN ('unmatched', 'guard_failed', 'guard_error', 'parked', 'expired');

-- +goose Down
DROP INDEX webhook_events_replayable_idx;
CREATE INDEX webhook_events_replayable_idx ON webhook_events (endpoint, received_at)
    WHERE outcome IN ('unmatched', 'guard_failed');
DROP INDEX webhook_events_parked_idx;
UPDATE webhook_events SET outcome = 'ignored_state' WHERE outcome IN ('parked', 'expired');
UPDATE webhook_events SET outcome = 'guard_failed' WHERE outcome = 'guard_error';
ALTER TABLE webhook_events DROP CONSTRAINT webhook_events_outcome_check;
ALTER TABLE webhook_events ADD CONSTRAINT webhook_events_outcome_check
    CHECK (outcome IN ('applied', 'ignored_state', 'guard_failed', 'unmatched', 'unhandled'));
