package retention_test

import (
	"context"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/retention"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// Retention's statements must not scan the tables they prune, however small those
// tables were when the connection planned them: a receiver's plans are made on a new
// endpoint's tables and kept, and a week later the same statements run on a week of
// receipts and deliveries every ten minutes. Each runs after store.PlanOnIndexes in
// its own round trip; this test fails without it.
func TestPruneNeverScansItsTables(t *testing.T) {
	t.Parallel()
	url := testsupport.MigratedDatabase(t, schema)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tables := store.TablesIn(schema)
	pruned := []string{tables.Events, tables.Outbox}
	const old = 300 // rows of each kind past every window, pruned in batches of 100
	testsupport.Settle(t, ctx, url, func(exec testsupport.Exec) {
		for _, table := range pruned {
			// No analyze may change the plans during the test.
			exec("ALTER TABLE " + table + " SET (autovacuum_enabled = false)")
		}
		exec(`INSERT INTO `+tables.Events+` (endpoint, event_id, event_type, entity_key, payload, headers, received_at, outcome)
			SELECT $1, 'evt-' || g, 'payment_intent.succeeded', 'order-' || g, '{}', '{}',
				now() - interval '60 days' + g * interval '1 second', 'applied'
			FROM generate_series(1, $2::int) g`, endpoint, old)
		exec(`INSERT INTO `+tables.Outbox+` (endpoint, dedupe_key, entity_key, event_type, source_event_id, payload,
				created_at, available_at, delivered_at)
			SELECT $1, 'evt-' || g, 'order-' || g, 'order.paid', 'evt-' || g, '{}',
				now() - interval '60 days' + g * interval '1 second', now() - interval '60 days', now() - interval '60 days'
			FROM generate_series(1, $2::int) g`, endpoint, old)
		for _, table := range pruned {
			exec("ANALYZE " + table)
		}
	})
	pool := testsupport.GenericPlanPool(t, ctx, url)
	// The deleted receipts are the signal that the closed connection's figures have
	// arrived (its deleted deliveries are reported with them).
	deleted := testsupport.Signal{Table: tables.Events, Column: "n_tup_del", Grows: old}
	scans := testsupport.SeqScansDuring(t, ctx, url, pruned, deleted, func() {
		rep, err := retention.Prune(ctx, pool, retention.Options{
			Endpoint: endpoint,
			Tables:   tables,
			Policy:   retention.Policy{PayloadFor: 24 * time.Hour, DedupeFor: 30 * 24 * time.Hour, DeliveredFor: 7 * 24 * time.Hour},
			// Several batches of each statement, all on the plans made on the first.
			BatchSize: 100,
			Pause:     -1,
		})
		if err != nil || rep.Receipts != old || rep.Deliveries != old {
			t.Fatalf("Prune: %+v, %v", rep, err)
		}
		pool.Close() // the backend reports its table statistics as it exits
	})
	for _, table := range pruned {
		if n := scans[table]; n != 0 {
			t.Errorf("%s: %d sequential scans by one pruning run; each statement must use an index", table, n)
		}
	}
}
