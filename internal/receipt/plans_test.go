package receipt

import (
	"fmt"
	"testing"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// The receipt transaction's statements, and the parking sweep's, must use their
// indexes however small the tables were when the connection planned them
// (store.PlanOnIndexes says why): the tables are analyzed at 300 rows, the connection
// makes its generic plans, the tables grow by 20,000 rows without an analyze, and not
// one sequential scan may follow. This test fails without PlanOnIndexes. Nor may an
// index scan read the entity table beyond the rows it locks and moves, alone or in a
// group: a lock planned as a scan of the tenant's (or endpoint's) index range reads
// every entity in it (docs/benchmarks.md, "Set-based group statements").
func TestReceiptStatementsNeverScanTheirTables(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		table  *v1alpha1.EntityTableSpec
		setup  []string
		entity func(exec testsupport.Exec, endpoint, key string)
		tables []string
		// entities is the table of the entities, among tables.
		entities string
	}{{
		name: "managed entities",
		entity: func(exec testsupport.Exec, endpoint, key string) {
			exec(`INSERT INTO hk.entities (endpoint, entity_key, state, amount)
				VALUES ($1, $2, 'payment_pending', 100)`, endpoint, key)
		},
		tables:   []string{"hk.webhook_events", "hk.entities", "hk.outbox"},
		entities: "hk.entities",
	}, {
		name:  "app table",
		table: ordersBinding(),
		setup: []string{ordersTable},
		entity: func(exec testsupport.Exec, _, key string) {
			exec(`INSERT INTO public.orders (tenant_id, client_txn_id, status, expected_amount_paise)
				VALUES ('acme', $1, 'payment_pending', 100)`, key)
		},
		tables:   []string{"hk.webhook_events", "hk.entity_clocks", "hk.outbox", "public.orders"},
		entities: "public.orders",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, tc.table))
			testsupport.Settle(t, f.ctx, f.url, func(exec testsupport.Exec) {
				for _, s := range tc.setup {
					exec(s) // CREATE TABLE builds its indexes, and each build scans
				}
				for _, table := range tc.tables {
					// No analyze may invalidate the plans while the test grows the tables.
					exec(fmt.Sprintf("ALTER TABLE %s SET (autovacuum_enabled = false)", table))
				}
				for i := range 8 {
					tc.entity(exec, f.ep.Key(), fmt.Sprintf("first-%d", i))
					tc.entity(exec, f.ep.Key(), fmt.Sprintf("later-%d", i))
				}
				// A few hundred receipts (a new endpoint's first second), analyzed as
				// autovacuum does early on: the plans below are made on tables this small.
				bulk(exec, f.ep.Key(), 1, 300)
				for _, table := range tc.tables {
					exec("ANALYZE " + table)
				}
			})

			// One connection, so every statement is planned on it and its plans are reused.
			pool := f.openPool(1, "") // closed below already unless the test stops early
			rec := NewRecorder(pool, f.ep)
			record := func(id, key string) {
				t.Helper()
				res, err := rec.Record(f.ctx, ev(id, "payment_intent.succeeded", key, 100, t0))
				if err != nil || res.Outcome != OutcomeApplied {
					t.Fatalf("Record(%s): %+v, %v", id, res, err)
				}
				// The parking sweep's statements, which run every minute on a table
				// that keeps a week of receipts.
				if _, err := rec.ExpireParked(f.ctx); err != nil {
					t.Fatal(err)
				}
				if _, _, err := rec.ParkedStats(f.ctx); err != nil {
					t.Fatal(err)
				}
			}

			// The 20,000 bulk rows and the 16 receipts are the signal that the figures
			// of the closed connection have arrived.
			grown := testsupport.Signal{Table: "hk.webhook_events", Column: "n_tup_ins", Grows: 20000 + 16}
			stats := testsupport.StatsDuring(t, f.ctx, f.url, []string{"seq_scan", "idx_tup_fetch"}, tc.tables, grown, func() {
				// More than five executions of every statement: PostgreSQL makes its
				// generic plan for the connection.
				for i := range 8 {
					key := fmt.Sprintf("first-%d", i)
					record("evt-"+key, key)
				}
				// The tables grow by 20,000 receipts behind the receiver's back, with no
				// analyze, as during a busy endpoint's first minute.
				bulk(f.exec, f.ep.Key(), 301, 20300)
				// And as one group.
				later := make([]Event, 8)
				for i := range later {
					key := fmt.Sprintf("later-%d", i)
					later[i] = ev("evt-"+key, "payment_intent.succeeded", key, 100, t0)
				}
				for i, rep := range recordOneGroup(t, f.ctx, rec, later...) {
					if rep.err != nil || rep.res.Outcome != OutcomeApplied {
						t.Fatalf("group member %d: %+v, %v", i, rep.res, rep.err)
					}
				}
				pool.Close() // the backend reports its table statistics as it exits
			})
			for _, table := range tc.tables {
				if n := stats["seq_scan"][table]; n != 0 {
					t.Errorf("%s: %d sequential scans by 16 receipts; every receipt statement must use an index", table, n)
				}
			}
			// Each receipt fetches its entity twice: to lock it, and to move it.
			if n := stats["idx_tup_fetch"][tc.entities]; n > 2*16 {
				t.Errorf("%s: %d rows fetched by index for 16 receipts, want at most 32: a statement reads entities it does not lock", tc.entities, n)
			}
		})
	}
}

// bulk writes receipts from..to (and their clocks and outbox rows) of applied events,
// as earlier receipts would have.
func bulk(exec testsupport.Exec, endpoint string, from, to int) {
	exec(`INSERT INTO hk.webhook_events (endpoint, event_id, event_type, entity_key, payload, outcome)
		SELECT $1, 'bulk-' || g, 'payment_intent.succeeded', 'bulk-' || g, '{}', 'applied'
		FROM generate_series($2::int, $3::int) g`, endpoint, from, to)
	exec(`INSERT INTO hk.entity_clocks (endpoint, entity_key, last_event_at)
		SELECT $1, 'bulk-' || g, now() FROM generate_series($2::int, $3::int) g`, endpoint, from, to)
	exec(`INSERT INTO hk.outbox (endpoint, dedupe_key, entity_key, event_type, source_event_id, payload)
		SELECT $1, 'bulk-' || g, 'bulk-' || g, 'order.paid', 'bulk-' || g, '{}'
		FROM generate_series($2::int, $3::int) g`, endpoint, from, to)
	exec(`INSERT INTO hk.entities (endpoint, entity_key, state)
		SELECT $1, 'bulk-' || g, 'paid' FROM generate_series($2::int, $3::int) g`, endpoint, from, to)
}
