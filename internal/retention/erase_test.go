package retention_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/retention"
)

type erasureRecord struct {
	Actor, Reason, Entity      string
	Receipts, Deliveries, Kept int
}

func (d *db) erasures(t *testing.T) []erasureRecord {
	t.Helper()
	rows, err := d.pool.Query(context.Background(), fmt.Sprintf(
		`SELECT actor, reason, entity_key, receipts, deliveries, kept FROM %s ORDER BY id`, d.tables.Erasures))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []erasureRecord
	for rows.Next() {
		var r erasureRecord
		if err := rows.Scan(&r.Actor, &r.Reason, &r.Entity, &r.Receipts, &r.Deliveries, &r.Kept); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func (d *db) outboxWithPayload(t *testing.T) []string {
	return d.strings(t, fmt.Sprintf(`SELECT dedupe_key FROM %s WHERE payload IS NOT NULL`, d.tables.Outbox))
}

// TestEraseRemovesPayloadsAndKeepsDedupe: erasing an entity removes its receipts'
// payloads and headers and its settled deliveries' payloads, keeps every dedupe record
// (so redeliveries stay duplicates), keeps what still needs its payload (parked events,
// undelivered rows) and says so, touches no other entity or endpoint, records who and
// why, and is idempotent. A dry run counts and changes nothing.
func TestEraseRemovesPayloadsAndKeepsDedupe(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ctx := context.Background()
	const subject = "order-alice"
	applied := d.receipt(t, endpoint, "evt_a1", subject, "applied", 3*day)
	refunded := d.receipt(t, endpoint, "evt_a2", subject, "applied", 2*day)
	parked := d.receipt(t, endpoint, "evt_a3", subject, "parked", day)
	bob := d.receipt(t, endpoint, "evt_b1", "order-bob", "applied", day)
	otherEP := d.receipt(t, other, "evt_other_alice", subject, "applied", day)
	del := d.outboxRow(t, endpoint, "del_a1", subject, delivered, 3*day)
	disc := d.outboxRow(t, endpoint, "disc_a2", subject, discarded, 2*day)
	pend := d.outboxRow(t, endpoint, "pend_a2", subject, pending, time.Hour)
	bobDel := d.outboxRow(t, endpoint, "del_b1", "order-bob", delivered, day)

	req := retention.Erasure{Endpoint: endpoint, EntityKey: subject, Actor: "alice@example.com", Reason: "GDPR request 42", DryRun: true}
	dry, err := retention.Erase(ctx, d.pool, d.tables, req)
	if err != nil {
		t.Fatal(err)
	}
	want := retention.ErasureReport{Receipts: 2, Deliveries: 2, KeptParked: 1, KeptUndelivered: 1}
	if dry != want {
		t.Errorf("dry run: %+v, want %+v", dry, want)
	}
	if got := d.withPayload(t); len(got) != 5 || len(d.erasures(t)) != 0 {
		t.Fatalf("a dry run changed something: payloads %v, erasures %v", got, d.erasures(t))
	}

	req.DryRun = false
	rep, err := retention.Erase(ctx, d.pool, d.tables, req)
	if err != nil {
		t.Fatal(err)
	}
	want.ID = rep.ID
	if rep != want || rep.ID == 0 {
		t.Errorf("erase: %+v, want %+v with a record id", rep, want)
	}
	if got, w := d.withPayload(t), sorted(parked, bob, otherEP); !slices.Equal(got, w) {
		t.Errorf("receipts with a payload: %v, want %v (%s, %s erased)", got, w, applied, refunded)
	}
	if got, w := d.receipts(t), sorted(applied, refunded, parked, bob, otherEP); !slices.Equal(got, w) {
		t.Errorf("dedupe records: %v, want every one kept: %v", got, w)
	}
	if got, w := d.outboxWithPayload(t), sorted(pend, bobDel); !slices.Equal(got, w) {
		t.Errorf("outbox rows with a payload: %v, want %v (%s, %s erased)", got, w, del, disc)
	}
	var removedAt int
	if err := d.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE payload_removed_at IS NOT NULL`, d.tables.Events)).Scan(&removedAt); err != nil || removedAt != 2 {
		t.Errorf("receipts with payload_removed_at: %d (%v), want 2", removedAt, err)
	}

	again, err := retention.Erase(ctx, d.pool, d.tables, req)
	if err != nil {
		t.Fatal(err)
	}
	if again.Receipts != 0 || again.Deliveries != 0 || again.ID == rep.ID {
		t.Errorf("second erase: %+v, want nothing removed and a new record", again)
	}
	records := d.erasures(t)
	wantRecords := []erasureRecord{
		{Actor: req.Actor, Reason: req.Reason, Entity: subject, Receipts: 2, Deliveries: 2, Kept: 2},
		{Actor: req.Actor, Reason: req.Reason, Entity: subject, Kept: 2},
	}
	if !slices.Equal(records, wantRecords) {
		t.Errorf("erasure records %+v, want %+v", records, wantRecords)
	}
}

// TestEraseRefusesAnIncompleteRequest: without an entity, actor or reason nothing runs.
func TestEraseRefusesAnIncompleteRequest(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	d.receipt(t, endpoint, "evt_1", "", "applied", day)
	for _, e := range []retention.Erasure{
		{Endpoint: endpoint, Actor: "a", Reason: "r"},
		{Endpoint: endpoint, EntityKey: "o1", Reason: "r"},
		{Endpoint: endpoint, EntityKey: "o1", Actor: "a"},
		{EntityKey: "o1", Actor: "a", Reason: "r"},
	} {
		if _, err := retention.Erase(context.Background(), d.pool, d.tables, e); err == nil || !strings.Contains(err.Error(), "is empty") {
			t.Errorf("Erase(%+v): %v, want an error naming what is empty", e, err)
		}
	}
	if got := d.withPayload(t); len(got) != 1 {
		t.Errorf("an incomplete request erased something: %v", got)
	}
}
