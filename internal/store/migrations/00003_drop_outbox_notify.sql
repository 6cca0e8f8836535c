-- Dispatchers are no longer woken by a commit-time trigger. A transaction that has
-- queued a NOTIFY takes PostgreSQL's database-wide notify-queue lock before its commit
-- record and holds it until the record is flushed, so every receipt transaction that
-- wrote an outbox row committed one at a time (no group commit). The receiver now wakes
-- its own dispatcher after commit and sends NOTIFY hookkeeper_outbox itself, outside
-- the receipt transaction (outbox.Notifier); the dispatchers' polling covers a lost
-- wake-up.

-- +goose Up
DROP TRIGGER outbox_notify ON outbox;
DROP FUNCTION outbox_notify();

-- +goose Down
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
