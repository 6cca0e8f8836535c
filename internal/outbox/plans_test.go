package outbox

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
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
