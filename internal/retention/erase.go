package retention

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/internal/store"
)

// Erasure asks to remove the stored payloads and headers of one entity's events, for
// example on a data subject's request. The dedupe records stay, so the provider's
// redelivery of an erased event is still a duplicate and is not applied again.
type Erasure struct {
	// Endpoint is the endpoint key ("namespace/name"); required.
	Endpoint string
	// EntityKey is the entity whose events are erased; required.
	EntityKey string
	// Actor is who asked (recorded); required.
	Actor string
	// Reason is why (recorded), e.g. a ticket; required.
	Reason string
	// DryRun counts what would be removed and changes and records nothing.
	DryRun bool
}

// Check says what is missing from the request (the endpoint is the caller's).
func (e Erasure) Check() error {
	var errs []error
	for _, f := range []struct{ name, v string }{
		{"entity key", e.EntityKey}, {"actor", e.Actor}, {"reason", e.Reason},
	} {
		if f.v == "" {
			errs = append(errs, fmt.Errorf("erasure: %s is empty", f.name))
		}
	}
	return errors.Join(errs...)
}

// ErasureReport says what an erasure removed and what it kept.
type ErasureReport struct {
	// ID is the erasures row that records it (zero in a dry run).
	ID int64
	// Receipts whose payload and headers were removed.
	Receipts int
	// Deliveries are delivered or discarded outbox rows whose payload was removed.
	Deliveries int
	// KeptParked are parked receipts kept whole: they still need their payload to apply.
	KeptParked int
	// KeptUndelivered are outbox rows kept whole because they are still to be
	// delivered or are dead letters: discard or deliver them, then erase again.
	KeptUndelivered int
}

// Erase removes the payloads and headers of e.EntityKey's receipts and the payloads of
// its settled outbox rows, keeps every dedupe record, and records the erasure (who,
// when, why, how many) in the same transaction. Running it again removes nothing and is
// recorded again. Erasing reads the endpoint's receipts without an index on the entity:
// it is an occasional, deliberate act.
func Erase(ctx context.Context, pool *pgxpool.Pool, tables store.Tables, e Erasure) (ErasureReport, error) {
	if e.Endpoint == "" {
		return ErasureReport{}, errors.New("erasure: endpoint is empty")
	}
	if err := e.Check(); err != nil {
		return ErasureReport{}, err
	}
	var rep ErasureReport
	args := pgx.NamedArgs{"endpoint": e.Endpoint, "entity": e.EntityKey, "actor": e.Actor, "reason": e.Reason}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		kept := fmt.Sprintf(`SELECT
  (SELECT count(*) FROM %[1]s WHERE endpoint = @endpoint AND entity_key = @entity AND outcome = 'parked' AND payload IS NOT NULL),
  (SELECT count(*) FROM %[2]s WHERE endpoint = @endpoint AND entity_key = @entity AND payload IS NOT NULL
     AND delivered_at IS NULL AND discarded_at IS NULL)`, tables.Events, tables.Outbox)
		if err := tx.QueryRow(ctx, kept, args).Scan(&rep.KeptParked, &rep.KeptUndelivered); err != nil {
			return fmt.Errorf("count kept rows: %w", err)
		}
		receipts := fmt.Sprintf(`SELECT count(*) FROM %s
WHERE endpoint = @endpoint AND entity_key = @entity AND payload IS NOT NULL AND outcome <> 'parked'`, tables.Events)
		deliveries := fmt.Sprintf(`SELECT count(*) FROM %s
WHERE endpoint = @endpoint AND entity_key = @entity AND payload IS NOT NULL
  AND (delivered_at IS NOT NULL OR discarded_at IS NOT NULL)`, tables.Outbox)
		if !e.DryRun {
			receipts = fmt.Sprintf(`WITH erased AS (
  UPDATE %s SET payload = NULL, headers = NULL, payload_removed_at = now()
  WHERE endpoint = @endpoint AND entity_key = @entity AND payload IS NOT NULL AND outcome <> 'parked'
  RETURNING 1)
SELECT count(*) FROM erased`, tables.Events)
			deliveries = fmt.Sprintf(`WITH erased AS (
  UPDATE %s SET payload = NULL
  WHERE endpoint = @endpoint AND entity_key = @entity AND payload IS NOT NULL
    AND (delivered_at IS NOT NULL OR discarded_at IS NOT NULL)
  RETURNING 1)
SELECT count(*) FROM erased`, tables.Outbox)
		}
		if err := tx.QueryRow(ctx, receipts, args).Scan(&rep.Receipts); err != nil {
			return fmt.Errorf("erase receipts: %w", err)
		}
		if err := tx.QueryRow(ctx, deliveries, args).Scan(&rep.Deliveries); err != nil {
			return fmt.Errorf("erase deliveries: %w", err)
		}
		if e.DryRun {
			return nil
		}
		args["receipts"], args["deliveries"], args["kept"] = rep.Receipts, rep.Deliveries, rep.KeptParked+rep.KeptUndelivered
		record := fmt.Sprintf(`INSERT INTO %s (endpoint, entity_key, actor, reason, receipts, deliveries, kept)
VALUES (@endpoint, @entity, @actor, @reason, @receipts, @deliveries, @kept) RETURNING id`, tables.Erasures)
		if err := tx.QueryRow(ctx, record, args).Scan(&rep.ID); err != nil {
			return fmt.Errorf("record the erasure: %w", err)
		}
		return nil
	})
	if err != nil {
		return ErasureReport{}, fmt.Errorf("erase entity of %s: %w", e.Endpoint, err)
	}
	return rep, nil
}
