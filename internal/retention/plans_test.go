package retention_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

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
	reader, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	before := testsupport.TableStats(t, ctx, reader, "seq_scan", pruned...)
	deleted := testsupport.TableStats(t, ctx, reader, "n_tup_del", pruned...)

	pool := testsupport.GenericPlanPool(t, ctx, url)
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

	// The deleted rows are the signal that the closed connection's figures have arrived.
	testsupport.WaitForTableStat(t, ctx, url, tables.Events, "n_tup_del", deleted[tables.Events]+old)
	testsupport.WaitForTableStat(t, ctx, url, tables.Outbox, "n_tup_del", deleted[tables.Outbox]+old)
	after := testsupport.TableStats(t, ctx, reader, "seq_scan", pruned...)
	for _, table := range pruned {
		if n := after[table] - before[table]; n != 0 {
			t.Errorf("%s: %d sequential scans by one pruning run; each statement must use an index", table, n)
		}
	}
}
