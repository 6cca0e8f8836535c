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
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// PostgreSQL plans a statement once per connection (its generic plan) and keeps the plan
// until the outbox is next analyzed. Planned on a small outbox, as a new endpoint's is,
// the PerEntity check must still probe outbox_entity_pending_idx once per candidate:
// scanning the table, outbox_pkey or every entry of outbox_due_idx per candidate makes a
// claim cost the backlog or the delivered history times the batch (docs/benchmarks.md,
// Dispatcher).
func TestPerEntityClaimProbesTheEntityIndex(t *testing.T) {
	t.Parallel()
	conn := smallAnalyzedOutbox(t)
	plan := genericPlan(t, conn, newQueries(conn.tables, v1alpha1.OrderingPerEntity).claim, endpointLiteral, "16", "1000", "false")
	sub := strings.Index(plan, "SubPlan")
	if sub < 0 {
		t.Fatalf("the claim has no per-candidate subplan:\n%s", plan)
	}
	if subplan := plan[sub:]; !strings.Contains(subplan, "outbox_entity_pending_idx") ||
		strings.Contains(subplan, "Seq Scan") || strings.Contains(subplan, "outbox_due_idx") {
		t.Errorf("the PerEntity check must probe outbox_entity_pending_idx; the claim's generic plan is:\n%s", plan)
	}
}

// The result update and the backlog gauges, planned on a small outbox, must not scan it:
// its delivered rows stay for retention's 7 days, and a scan per batch of results or per
// gauge reading grows with them. The pools receivers open plan on indexes
// (store.PlanOnIndexes); without it both plans scan the outbox.
func TestDispatcherStatementsNeverScanTheOutbox(t *testing.T) {
	t.Parallel()
	conn := smallAnalyzedOutbox(t)
	q := newQueries(conn.tables, v1alpha1.OrderingPerEntity)
	for name, plan := range map[string]string{
		"record": genericPlan(t, conn, q.record, "'{1,2,3}'", "'{1,1,1}'", "'{delivered,delivered,delivered}'",
			"'{0,0,0}'", "'{\"\",\"\",\"\"}'", endpointLiteral, "'{false,false,false}'",
			"NULL", "NULL", "NULL", "NULL", "NULL", "NULL"), // the sink's tally does not touch the outbox
		"gauges": genericPlan(t, conn, q.gauges, endpointLiteral),
	} {
		if strings.Contains(plan, "Seq Scan on outbox") {
			t.Errorf("the %s statement scans the outbox; its generic plan is:\n%s", name, plan)
		}
	}
}

// endpointLiteral is testEndpoint as an SQL literal: EXPLAIN takes no bind parameters.
var endpointLiteral = "'" + strings.ReplaceAll(testEndpoint, "'", "''") + "'"

// planConn is a pool connection that plans every prepared statement generically, as
// PostgreSQL does for a connection's prepared statements from their sixth execution on.
type planConn struct {
	*pgxpool.Conn
	tables store.Tables
	ctx    context.Context
}

// smallAnalyzedOutbox fills a new outbox with 300 pending rows of 20 entities, analyzes
// it (autovacuum's first visit to a new endpoint) and returns a connection of a pool
// built as the receivers build theirs.
func smallAnalyzedOutbox(t *testing.T) *planConn {
	t.Helper()
	db := newTestDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
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
	t.Cleanup(conn.Release)
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), "RESET plan_cache_mode") })
	return &planConn{Conn: conn, tables: db.tables, ctx: ctx}
}

// genericPlan prepares sql and returns the plan EXPLAIN shows for it with args (SQL
// literals, one per parameter).
func genericPlan(t *testing.T, c *planConn, sql string, args ...string) string {
	t.Helper()
	name := fmt.Sprintf("plan_%d", len(sql))
	if _, err := c.Conn.Conn().Prepare(c.ctx, name, sql); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	defer func() { _ = c.Conn.Conn().Deallocate(context.Background(), name) }()
	res, err := c.Query(c.ctx, "EXPLAIN (COSTS OFF) EXECUTE "+name+"("+strings.Join(args, ", ")+")")
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	plan, err := pgx.CollectRows(res, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("read the plan: %v", err)
	}
	return strings.Join(plan, "\n")
}
