package receipt

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// A new endpoint's tables start empty, and PostgreSQL plans a prepared statement once
// for the connection (its generic plan) after five executions. Planned on an empty
// table, a point lookup is a sequential scan, and that plan stays until the table is
// next analyzed: up to a minute of autovacuum's naptime, or longer when autovacuum lags.
// Meanwhile every receipt would scan the whole table it is filling. The receipt
// transaction turns sequential scans off for its own statements, so they are planned
// on their indexes however small the table is; this test fails without it.
func TestReceiptStatementsNeverScanTheirTables(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		table  *v1alpha1.EntityTableSpec
		setup  []string
		entity func(exec execFunc, endpoint, key string)
		tables []string
	}{{
		name: "managed entities",
		entity: func(exec execFunc, endpoint, key string) {
			exec(`INSERT INTO hk.entities (endpoint, entity_key, state, amount)
				VALUES ($1, $2, 'payment_pending', 100)`, endpoint, key)
		},
		tables: []string{"hk.webhook_events", "hk.entities", "hk.outbox"},
	}, {
		name:  "app table",
		table: ordersBinding(),
		setup: []string{ordersTable},
		entity: func(exec execFunc, _, key string) {
			exec(`INSERT INTO public.orders (tenant_id, client_txn_id, status, expected_amount_paise)
				VALUES ('acme', $1, 'payment_pending', 100)`, key)
		},
		tables: []string{"hk.webhook_events", "hk.entity_clocks", "hk.outbox", "public.orders"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, tc.table))
			settle(t, f, func(exec execFunc) {
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
			before := seqScans(t, f, tc.tables)

			// One connection, so every statement is planned on it and its plans are reused.
			cfg, err := pgxpool.ParseConfig(f.url)
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = 1
			pool, err := pgxpool.NewWithConfig(f.ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close) // closed below already unless the test stops early
			rec := NewRecorder(pool, f.ep)
			record := func(id, key string) {
				t.Helper()
				res, err := rec.Record(f.ctx, ev(id, "payment_intent.succeeded", key, 100, t0))
				if err != nil || res.Outcome != OutcomeApplied {
					t.Fatalf("Record(%s): %+v, %v", id, res, err)
				}
			}

			// More than five executions of every statement: PostgreSQL makes its
			// generic plan for the connection.
			for i := range 8 {
				key := fmt.Sprintf("first-%d", i)
				record("evt-"+key, key)
			}
			// The tables grow by 20,000 receipts behind the receiver's back, with no
			// analyze, as during a busy endpoint's first minute.
			bulk(f.exec, f.ep.Key(), 301, 20300)
			for i := range 8 {
				key := fmt.Sprintf("later-%d", i)
				record("evt-"+key, key)
			}
			pool.Close() // the backend reports its table statistics as it exits

			after := waitForSeqScans(t, f, tc.tables, before)
			for _, table := range tc.tables {
				if n := after[table] - before[table]; n != 0 {
					t.Errorf("%s: %d sequential scans by 16 receipts; every receipt statement must use an index", table, n)
				}
			}
		})
	}
}

// settle runs setup on a connection of its own and returns once that connection's table
// statistics have arrived (a backend reports them as it exits, after its client has
// gone), so that counters read afterwards do not move with them.
func settle(t *testing.T, f *fixture, setup func(exec execFunc)) {
	t.Helper()
	conn, err := pgx.Connect(f.ctx, f.url)
	if err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(f.ctx, sql, args...); err != nil {
			t.Fatalf("exec %q: %v", sql, err)
		}
	}
	setup(exec)
	exec("CREATE TABLE public.settled (x int)")
	exec("INSERT INTO public.settled VALUES (1)")
	if err := conn.Close(f.ctx); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 30*time.Second, 50*time.Millisecond, "the setup connection's table statistics", func() error {
		var n int64
		if err := f.pool.QueryRow(f.ctx, `SELECT COALESCE(n_tup_ins, 0) FROM pg_stat_user_tables
			WHERE relid = 'public.settled'::regclass`).Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("public.settled shows %d inserted rows, want 1", n)
		}
		return nil
	})
}

// bulk writes receipts from..to (and their clocks and outbox rows) of applied events,
// as earlier receipts would have.
func bulk(exec execFunc, endpoint string, from, to int) {
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

// execFunc runs one statement and fails the test when it fails.
type execFunc func(sql string, args ...any)

// seqScans reads the sequential scans counted on each table.
func seqScans(t *testing.T, f *fixture, tables []string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, table := range tables {
		var n int64
		if err := f.pool.QueryRow(f.ctx, `SELECT COALESCE(seq_scan, 0) FROM pg_stat_user_tables
			WHERE relid = $1::regclass`, table).Scan(&n); err != nil {
			t.Fatalf("read the scans of %s: %v", table, err)
		}
		out[table] = n
	}
	return out
}

// waitForSeqScans reads the scan counters once the closed connection's statistics have
// arrived: its backend reports them as it exits, after the client has gone. The 16
// receipts it inserted into webhook_events are the signal.
func waitForSeqScans(t *testing.T, f *fixture, tables []string, before map[string]int64) map[string]int64 {
	t.Helper()
	testsupport.Eventually(t, 30*time.Second, 50*time.Millisecond, "the closed connection's table statistics", func() error {
		var inserted int64
		if err := f.pool.QueryRow(f.ctx, `SELECT n_tup_ins FROM pg_stat_user_tables
			WHERE relid = 'hk.webhook_events'::regclass`).Scan(&inserted); err != nil {
			return err
		}
		if want := int64(20300 + 16); inserted < want {
			return fmt.Errorf("webhook_events shows %d inserted rows, want %d", inserted, want)
		}
		return nil
	})
	return seqScans(t, f, tables)
}
