package outbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// The PerEntity check must probe outbox_entity_pending_idx once per candidate, however
// PostgreSQL estimated the outbox when it planned the claim: scanning the table, or every
// entry of outbox_due_idx, per candidate makes a claim cost the whole backlog times the
// batch. Two estimates led there:
//   - a small analyzed outbox (a new endpoint's), where the claim's generic plan is kept
//     by the connection until the next analyze (12 ms for 16 rows measured in make bench,
//     where the probe takes microseconds);
//   - an outbox never analyzed, where both indexes are estimated at one row and cost the
//     same to a hundredth: with entity keys long enough to make the entity index a level
//     deeper, the check read every pending row through outbox_due_idx and sorted them, for
//     every candidate (30 to 60 ms a claim in make bench). store.PlanOnIndexes, sent with
//     the claim, turns the sort off; this case fails without it.
func TestPerEntityClaimProbesTheEntityIndex(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		fill    string
		analyze bool
	}{{
		name: "small analyzed outbox",
		fill: `SELECT $1, 'evt-' || g, 'order-' || (g % 20), 'order.paid', 'evt-' || g, '{}'
			FROM generate_series(1, 300) g`,
		analyze: true,
	}, {
		name: "never analyzed outbox with long entity keys",
		fill: `SELECT $1, 'evt-' || g, repeat('o', 120) || (g % 2000), 'order.paid', 'evt-' || g, '{}'
			FROM generate_series(1, 20000) g ORDER BY random()`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := newTestDB(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			setup := []string{"ALTER TABLE " + db.tables.Outbox + " SET (autovacuum_enabled = false)",
				"INSERT INTO " + db.tables.Outbox + " (endpoint, dedupe_key, entity_key, event_type, source_event_id, payload) " + tc.fill}
			if tc.analyze {
				setup = append(setup, "ANALYZE "+db.tables.Outbox)
			}
			for _, sql := range setup {
				args := []any{}
				if strings.HasPrefix(sql, "INSERT") {
					args = append(args, testEndpoint)
				}
				if _, err := db.pool.Exec(ctx, sql, args...); err != nil {
					t.Fatal(err)
				}
			}
			plan := claimPlan(t, ctx, db)
			sub := strings.Index(plan, "SubPlan")
			if sub < 0 {
				t.Fatalf("the claim has no per-candidate subplan:\n%s", plan)
			}
			if subplan := plan[sub:]; !strings.Contains(subplan, "outbox_entity_pending_idx") ||
				strings.Contains(subplan, "Seq Scan") || strings.Contains(subplan, "outbox_due_idx") {
				t.Errorf("the PerEntity check must probe outbox_entity_pending_idx; the claim's generic plan is:\n%s", plan)
			}
		})
	}
}

// claimPlan returns the generic plan of the PerEntity claim (the plan PostgreSQL reuses
// for a connection from the sixth execution on), made as the dispatcher's claims are:
// after store.PlanOnIndexes in the same transaction.
func claimPlan(t *testing.T, ctx context.Context, db *testDB) string {
	t.Helper()
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	for _, sql := range []string{"SET LOCAL plan_cache_mode = force_generic_plan", store.PlanOnIndexes} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	claim := newQueries(db.tables, v1alpha1.OrderingPerEntity).claim
	if _, err := tx.Conn().Prepare(ctx, "claim", claim); err != nil {
		t.Fatalf("prepare the claim: %v", err)
	}
	defer func() { _ = tx.Conn().Deallocate(context.Background(), "claim") }()
	// EXPLAIN takes no bind parameters: the endpoint is a literal.
	literal := "'" + strings.ReplaceAll(testEndpoint, "'", "''") + "'"
	res, err := tx.Query(ctx, "EXPLAIN (COSTS OFF) EXECUTE claim("+literal+", 16, 1000, false)")
	if err != nil {
		t.Fatalf("explain the claim: %v", err)
	}
	plan, err := pgx.CollectRows(res, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("read the plan: %v", err)
	}
	return strings.Join(plan, "\n")
}

// The claim, the result update and the backlog reading must not scan the outbox however
// small it was when the connection planned them: its delivered rows stay for a week,
// and a plan made on a new endpoint's few hundred rows and kept by the connection would
// scan all of them on every call. Planned on such an outbox, the result update was a
// hash join over a sequential scan and the backlog reading scanned it twice; each runs
// after store.PlanOnIndexes in its own round trip (store.OnIndexes), and this test fails
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
	pool := testsupport.GenericPlanPool(t, ctx, db.url)
	q := newQueries(db.tables, v1alpha1.OrderingPerEntity)
	const rounds = 3
	// Each round's claim and result update each change 16 rows: the signal that the
	// closed connection's figures have arrived.
	updated := testsupport.Signal{Table: outbox, Column: "n_tup_upd", Grows: rounds * 2 * 16}
	scans := testsupport.SeqScansDuring(t, ctx, db.url, []string{outbox}, updated, func() {
		for range rounds {
			claimed, err := q.claimRows(ctx, pool, testEndpoint, 16, time.Minute, false)
			if err != nil || len(claimed) != 16 {
				t.Fatalf("claim: %d rows, %v", len(claimed), err)
			}
			results := make([]rowResult, len(claimed))
			for i, r := range claimed {
				results[i] = rowResult{ID: r.ID, Attempt: r.Attempt, Lease: r.Lease, Result: resultDelivered, Done: time.Now()}
			}
			if recorded, _, err := q.recordResults(ctx, pool, testEndpoint, results, 5, time.Second); err != nil || len(recorded) != 16 {
				t.Fatalf("record: %d rows, %v", len(recorded), err)
			}
			if _, err := readBacklog(ctx, pool, q.gauges, testEndpoint); err != nil {
				t.Fatal(err)
			}
		}
		pool.Close() // the backend reports its table statistics as it exits
	})
	if n := scans[outbox]; n != 0 {
		t.Errorf("%d sequential scans of the outbox by %d claims, result updates and backlog readings; each must use an index", n, rounds)
	}
}
