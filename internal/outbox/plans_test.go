package outbox

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// PostgreSQL plans the claim once per connection (its generic plan) and keeps the plan
// until the outbox is next analyzed. Planned on a small outbox, as a new endpoint's is,
// the PerEntity check must still probe outbox_entity_pending_idx once per candidate:
// scanning the table, or every entry of outbox_due_idx, per candidate makes a claim
// cost the whole backlog times the batch (12 ms for 16 rows measured in make bench,
// where this probe takes microseconds).
func TestPerEntityClaimProbesTheEntityIndex(t *testing.T) {
	t.Parallel()
	db := newTestDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rows []outboxRow
	for i := range 300 {
		rows = append(rows, outboxRow{Entity: fmt.Sprintf("order-%d", i%20), Seq: i})
	}
	db.insert(t, rows...)
	if _, err := db.pool.Exec(ctx, "ANALYZE "+db.tables.Outbox); err != nil {
		t.Fatal(err)
	}

	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// The plan PostgreSQL reuses for the connection from the sixth execution on.
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.Exec(context.Background(), "RESET plan_cache_mode") }()
	claim := newQueries(db.tables, v1alpha1.OrderingPerEntity).claim
	if _, err := conn.Conn().Prepare(ctx, "claim", claim); err != nil {
		t.Fatalf("prepare the claim: %v", err)
	}
	defer func() { _ = conn.Conn().Deallocate(context.Background(), "claim") }()
	// EXPLAIN takes no bind parameters: the endpoint is a literal.
	literal := "'" + strings.ReplaceAll(testEndpoint, "'", "''") + "'"
	res, err := conn.Query(ctx, "EXPLAIN (COSTS OFF) EXECUTE claim("+literal+", 16, 1000, false)")
	if err != nil {
		t.Fatalf("explain the claim: %v", err)
	}
	plan, err := pgx.CollectRows(res, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("read the plan: %v", err)
	}
	text := strings.Join(plan, "\n")
	sub := strings.Index(text, "SubPlan")
	if sub < 0 {
		t.Fatalf("the claim has no per-candidate subplan:\n%s", text)
	}
	if subplan := text[sub:]; !strings.Contains(subplan, "outbox_entity_pending_idx") ||
		strings.Contains(subplan, "Seq Scan") || strings.Contains(subplan, "outbox_due_idx") {
		t.Errorf("the PerEntity check must probe outbox_entity_pending_idx; the claim's generic plan is:\n%s", text)
	}
}

// The claim, the result update and the backlog reading must not scan the outbox however
// small it was when the connection planned them: its delivered rows stay for a week,
// and a plan made on a new endpoint's few hundred rows and kept by the connection would
// scan all of them on every call. Planned on such an outbox, the result update was a
// hash join over a sequential scan and the backlog reading scanned it twice; each runs
// after store.PlanOnIndexes in its own round trip (onIndexes), and this test fails
// without it.
func TestDispatcherStatementsNeverScanTheOutbox(t *testing.T) {
	t.Parallel()
	db := newTestDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	outbox := db.tables.Outbox
	testsupport.Settle(t, ctx, db.url, func(exec testsupport.Exec) {
		// No analyze may change the plans during the test.
		exec("ALTER TABLE " + outbox + " SET (autovacuum_enabled = false)")
		// 300 pending rows of 20 entities, analyzed as autovacuum does a new endpoint's
		// tables early on.
		exec(`INSERT INTO `+outbox+` (endpoint, dedupe_key, entity_key, event_type, source_event_id, payload)
			SELECT $1, 'evt-' || g, 'order-' || (g % 20), 'order.paid', 'evt-' || g, '{}'
			FROM generate_series(1, 300) g`, testEndpoint)
		exec("ANALYZE " + outbox)
	})
	before := testsupport.TableStats(t, ctx, db.pool, "seq_scan", outbox)[outbox]
	updated := testsupport.TableStats(t, ctx, db.pool, "n_tup_upd", outbox)[outbox]

	// One connection that uses each statement's generic plan from its first execution,
	// as PostgreSQL does from the sixth.
	cfg, err := pgxpool.ParseConfig(db.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET plan_cache_mode = force_generic_plan")
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // closed below already unless the test stops early
	q := newQueries(db.tables, v1alpha1.OrderingPerEntity)
	const rounds = 3
	for range rounds {
		claimed, err := q.claimRows(ctx, pool, testEndpoint, 16, time.Minute, false)
		if err != nil || len(claimed) != 16 {
			t.Fatalf("claim: %d rows, %v", len(claimed), err)
		}
		results := make([]rowResult, len(claimed))
		for i, r := range claimed {
			results[i] = rowResult{ID: r.ID, Attempt: r.Attempt, Result: resultDelivered, Done: time.Now()}
		}
		if recorded, _, err := q.recordResults(ctx, pool, testEndpoint, results, 5, time.Second); err != nil || len(recorded) != 16 {
			t.Fatalf("record: %d rows, %v", len(recorded), err)
		}
		if _, err := readBacklog(ctx, pool, q.gauges, testEndpoint); err != nil {
			t.Fatal(err)
		}
	}
	pool.Close() // the backend reports its table statistics as it exits
	// Each round's claim and result update each changed 16 rows: the signal that the
	// closed connection's figures have arrived.
	testsupport.WaitForTableStat(t, ctx, db.url, outbox, "n_tup_upd", updated+rounds*2*16)
	if n := testsupport.TableStats(t, ctx, db.pool, "seq_scan", outbox)[outbox] - before; n != 0 {
		t.Errorf("%d sequential scans of the outbox by %d claims, result updates and backlog readings; each must use an index", n, rounds)
	}
}
