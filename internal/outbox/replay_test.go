package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// An unmatched receipt is re-run through the real receipt transaction once its entity
// exists: it applies and writes one outbox row; a dry run before changes nothing and a
// second run selects nothing.
func TestReplayReceipts(t *testing.T) {
	db := newTestDB(t)
	ctx := context.Background()
	we := testsupport.StripeCaptureEndpoint(testsupport.SecretRef("s", "k"), testsupport.SecretRef("db", "k"))
	we.Name, we.Namespace = "orders", "shop"
	we.Spec.Database.Schema = testSchema
	env := map[string]string{config.EnvDatabaseURL: db.url, config.EnvSigningSecretPrefix + "0": "whsec_dGVzdA=="}
	ep, err := config.Compile(we, func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("compile endpoint: %v", err)
	}
	if ep.Key() != testEndpoint {
		t.Fatalf("endpoint key %q", ep.Key())
	}
	rec := receipt.NewRecorder(db.pool, ep)
	amount := int64(300)
	var receiptIDs []int64
	for i := range 3 {
		res, err := rec.Record(ctx, receipt.Event{
			ID: fmt.Sprintf("evt_%d", i), Type: "payment_intent.succeeded", EntityKey: fmt.Sprintf("order-%d", i),
			Amount: &amount, Payload: json.RawMessage(`{"id":"evt"}`),
		})
		if err != nil || res.Outcome != receipt.OutcomeUnmatched {
			t.Fatalf("record: %+v, %v", res, err)
		}
		receiptIDs = append(receiptIDs, res.ReceiptID)
	}
	calls := 0
	reprocess := func(ctx context.Context, id int64) error {
		calls++
		_, err := rec.Reprocess(ctx, id)
		return err
	}
	sel := Selection{Endpoint: testEndpoint, Since: time.Now().Add(-time.Hour)}

	var listed []ReplayItem
	rep, err := ReplayReceipts(ctx, db.pool, db.tables, sel, nil, ReplayOptions{DryRun: true, Each: func(it ReplayItem) { listed = append(listed, it) }})
	if err != nil || rep.Selected != 3 || rep.Replayed != 0 || len(listed) != 3 || listed[0].State != "unmatched" {
		t.Fatalf("dry run: %+v, %v, listed %+v", rep, err, listed)
	}
	if n := db.count(t, "true"); n != 0 {
		t.Fatalf("dry run wrote %d outbox rows", n)
	}

	// Two of the three orders now exist.
	for _, key := range []string{"order-0", "order-2"} {
		if _, err := db.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (endpoint, entity_key, state, amount) VALUES ($1, $2, 'payment_pending', 300)`,
			db.tables.Entities), testEndpoint, key); err != nil {
			t.Fatal(err)
		}
	}
	var progress []string
	rep, err = ReplayReceipts(ctx, db.pool, db.tables, sel, reprocess, ReplayOptions{BatchSize: 2,
		Progress: func(done, total int) { progress = append(progress, fmt.Sprintf("%d/%d", done, total)) }})
	if err != nil || rep.Selected != 3 || rep.Replayed != 3 || rep.Outcomes["applied"] != 2 || rep.Outcomes["unmatched"] != 1 {
		t.Fatalf("replay: %+v, %v", rep, err)
	}
	if fmt.Sprint(progress) != "[2/3 3/3]" {
		t.Errorf("progress %v", progress)
	}
	if n := db.count(t, "event_type = 'order.paid'"); n != 2 {
		t.Errorf("%d outbox rows, want 2", n)
	}

	// Again: only the still-unmatched receipt is selected, and nothing new is written.
	calls = 0
	rep, err = ReplayReceipts(ctx, db.pool, db.tables, sel, reprocess, ReplayOptions{})
	if err != nil || rep.Selected != 1 || calls != 1 || rep.Outcomes["unmatched"] != 1 {
		t.Errorf("second replay: %+v, %v, %d calls", rep, err, calls)
	}
	if n := db.count(t, "true"); n != 2 {
		t.Errorf("second replay changed the outbox: %d rows", n)
	}
	// By id, outside the time range: nothing.
	rep, err = ReplayReceipts(ctx, db.pool, db.tables, Selection{Endpoint: testEndpoint, IDs: receiptIDs[1:2], Until: time.Now().Add(-time.Hour)}, reprocess, ReplayOptions{})
	if err != nil || rep.Selected != 0 {
		t.Errorf("replay outside the range: %+v, %v", rep, err)
	}
}

// Discarding dead letters: a reason and an actor are required; a dry run lists and
// changes nothing; a discard keeps the rows, records who, when, why and how many, takes
// them out of the dead-letter count and out of replay; a second run discards nothing
// and records nothing.
func TestDiscardDeadLetters(t *testing.T) {
	db := newTestDB(t)
	ctx := context.Background()
	ids := db.insert(t, outboxRow{Entity: "ord_1", Seq: 0}, outboxRow{Entity: "ord_2", Seq: 0}, outboxRow{Entity: "ord_3", Seq: 0})
	if _, err := db.pool.Exec(ctx, fmt.Sprintf(`UPDATE %s SET dead_at = now(), attempts = 12, last_error = 'sink answered 500' WHERE id = ANY($1)`,
		db.tables.Outbox), ids); err != nil {
		t.Fatal(err)
	}
	d := NewDispatcher(db.pool, db.options(t, "http://127.0.0.1:1/"))
	discards := func() (n, rows int) {
		t.Helper()
		err := db.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*), COALESCE(sum(rows), 0) FROM %s WHERE endpoint = $1`, db.tables.DeadLetterDiscards), testEndpoint).Scan(&n, &rows)
		if err != nil {
			t.Fatal(err)
		}
		return n, rows
	}
	sel := Selection{Endpoint: testEndpoint, IDs: ids[:2]}
	for _, bad := range []Discard{{Actor: "alice"}, {Actor: "alice", Reason: "  "}, {Reason: "test orders"}, {Actor: "alice", Reason: strings.Repeat("x", MaxDiscardReason+1)}} {
		if _, err := DiscardDeadLetters(ctx, db.pool, db.tables, sel, bad, ReplayOptions{}); err == nil {
			t.Errorf("discard %+v succeeded", bad)
		}
	}
	why := Discard{Actor: "alice", Reason: "test orders from the staging provider account"}

	var listed []ReplayItem
	rep, err := DiscardDeadLetters(ctx, db.pool, db.tables, sel, why, ReplayOptions{DryRun: true, Each: func(it ReplayItem) { listed = append(listed, it) }})
	if err != nil || rep.Selected != 2 || rep.Replayed != 0 || len(listed) != 2 || listed[0].State != "sink answered 500" {
		t.Fatalf("dry run: %+v, %+v, %v", rep, listed, err)
	}
	if n, _ := discards(); n != 0 || db.count(t, "discarded_at IS NOT NULL") != 0 {
		t.Fatalf("the dry run discarded or recorded something")
	}

	rep, err = DiscardDeadLetters(ctx, db.pool, db.tables, sel, why, ReplayOptions{BatchSize: 1})
	if err != nil || rep.Selected != 2 || rep.Replayed != 2 {
		t.Fatalf("discard: %+v, %v", rep, err)
	}
	if n, rows := discards(); n != 1 || rows != 2 {
		t.Errorf("%d discard records for %d rows, want 1 for 2", n, rows)
	}
	var actor, reason string
	var at time.Time
	if err := db.pool.QueryRow(ctx, fmt.Sprintf(`SELECT actor, reason, discarded_at FROM %s WHERE endpoint = $1`, db.tables.DeadLetterDiscards),
		testEndpoint).Scan(&actor, &reason, &at); err != nil || actor != why.Actor || reason != why.Reason || time.Since(at) > time.Minute {
		t.Errorf("discard record: %q %q %s, %v", actor, reason, at, err)
	}
	if n := db.count(t, fmt.Sprintf("id = ANY('{%d,%d}') AND dead_at IS NOT NULL AND discarded_at IS NOT NULL AND discard_id IS NOT NULL", ids[0], ids[1])); n != 2 {
		t.Errorf("%d discarded rows kept with their discard, want 2", n)
	}
	if b, err := d.Backlog(ctx); err != nil || b.Dead != 1 {
		t.Errorf("dead letters after the discard: %+v, %v; want the one not discarded", b, err)
	}

	rep, err = DiscardDeadLetters(ctx, db.pool, db.tables, sel, why, ReplayOptions{})
	if err != nil || rep.Selected != 0 || rep.Replayed != 0 {
		t.Errorf("second discard: %+v, %v; want nothing", rep, err)
	}
	if n, _ := discards(); n != 1 {
		t.Errorf("the second discard was recorded: %d records", n)
	}
	rep, err = RedriveDeadLetters(ctx, db.pool, db.tables, Selection{Endpoint: testEndpoint}, ReplayOptions{})
	if err != nil || rep.Selected != 1 || rep.Replayed != 1 {
		t.Errorf("replay after the discard: %+v, %v; want only the row not discarded", rep, err)
	}
	if st := db.state(t, ids[0]); !st.Dead {
		t.Errorf("a discarded row was re-driven: %+v", st)
	}
}
