package retention

import (
	"fmt"

	"github.com/hookkeeper/hookkeeper/internal/store"
)

// queries are the statements of one schema's tables. Named arguments: @endpoint,
// @cutoff (older than this goes), @limit (rows per batch), @before (the first id too
// young to prune, from the matching firstYoung query).
type queries struct {
	prunePayloads      string
	firstYoungReceipt  string
	pruneReceipts      string
	firstYoungDelivery string
	pruneDeliveries    string
}

func queriesFor(t store.Tables) queries {
	return queries{
		// webhook_events_payload_kept_idx holds only rows that still have a payload,
		// oldest first: a batch reads what it removes, and parked rows (skipped) are few.
		prunePayloads: fmt.Sprintf(`
WITH batch AS (
  SELECT id FROM %[1]s
  WHERE endpoint = @endpoint AND payload IS NOT NULL AND received_at < @cutoff AND outcome <> 'parked'
  ORDER BY received_at LIMIT @limit
  FOR UPDATE SKIP LOCKED)
UPDATE %[1]s e SET payload = NULL, headers = NULL, payload_removed_at = now()
FROM batch WHERE e.id = batch.id`, t.Events),

		// Ids grow with received_at, so the rows old enough to delete come before the
		// first one that is not; bounding the batches by that id keeps the last batch
		// from reading the young rest of the table through the primary key.
		firstYoungReceipt: firstYoung(t.Events, "received_at"),
		pruneReceipts: fmt.Sprintf(`
WITH batch AS (
  SELECT id FROM %[1]s
  WHERE endpoint = @endpoint AND id < @before AND received_at < @cutoff AND outcome <> 'parked'
  ORDER BY id LIMIT @limit
  FOR UPDATE SKIP LOCKED)
DELETE FROM %[1]s e USING batch WHERE e.id = batch.id`, t.Events),

		// A row created after the cutoff cannot have been delivered before it.
		firstYoungDelivery: firstYoung(t.Outbox, "created_at"),
		// Only delivered rows: pending, dead-lettered and discarded rows stay.
		pruneDeliveries: fmt.Sprintf(`
WITH batch AS (
  SELECT id FROM %[1]s
  WHERE endpoint = @endpoint AND id < @before AND delivered_at < @cutoff
  ORDER BY id LIMIT @limit
  FOR UPDATE SKIP LOCKED)
DELETE FROM %[1]s o USING batch WHERE o.id = batch.id`, t.Outbox),
	}
}

// firstYoung finds the endpoint's first row in table (by id) whose column is at or after
// @cutoff: the bound of the batches of a prune ordered by id. Without one, the largest
// bigint.
func firstYoung(table, column string) string {
	return fmt.Sprintf(`
SELECT COALESCE((SELECT id FROM %s WHERE endpoint = @endpoint AND %s >= @cutoff ORDER BY id LIMIT 1),
                9223372036854775807)`, table, column)
}
