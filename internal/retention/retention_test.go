package retention_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/internal/outbox"
	"github.com/hookkeeper/hookkeeper/internal/retention"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

const (
	schema   = "hookkeeper"
	endpoint = "shop/orders"
	// other is a second endpoint sharing the schema: retention never touches its rows.
	other = "shop/refunds"
)

func TestMain(m *testing.M) { testsupport.Main(m) }

// db is a migrated database of its own, with rows a test places at chosen ages.
type db struct {
	pool   *pgxpool.Pool
	tables store.Tables
	now    time.Time
}

func newDB(t *testing.T) *db {
	t.Helper()
	_, pool := testsupport.MigratedPool(t, schema, 4)
	return &db{pool: pool, tables: store.TablesIn(schema), now: time.Now().UTC().Truncate(time.Second)}
}

// receipt inserts a receipt of ep received age ago and returns its event id.
func (d *db) receipt(t *testing.T, ep, id, entity, outcome string, age time.Duration) string {
	t.Helper()
	_, err := d.pool.Exec(context.Background(), fmt.Sprintf(`INSERT INTO %s
  (endpoint, event_id, event_type, entity_key, payload, headers, received_at, outcome)
VALUES ($1, $2, 'payment_intent.succeeded', $3, '{"card":"4242"}', '{"user-agent":"Stripe/1.0"}', $4, $5)`, d.tables.Events),
		ep, id, entity, d.now.Add(-age), outcome)
	if err != nil {
		t.Fatalf("insert receipt %s: %v", id, err)
	}
	return id
}

// delivery is an outbox row's settled state.
type delivery string

const (
	delivered delivery = "delivered"
	pending   delivery = "pending"
	dead      delivery = "dead"
	discarded delivery = "discarded"
)

// outboxRow inserts an outbox row of ep created age ago, in state s (settled when it
// was created), and returns its dedupe key.
func (d *db) outboxRow(t *testing.T, ep, key, entity string, s delivery, age time.Duration) string {
	t.Helper()
	at := d.now.Add(-age)
	var deliveredAt, deadAt, discardedAt *time.Time
	switch s {
	case delivered:
		deliveredAt = &at
	case dead:
		deadAt = &at
	case discarded:
		deadAt, discardedAt = &at, &at
	}
	_, err := d.pool.Exec(context.Background(), fmt.Sprintf(`INSERT INTO %s
  (endpoint, dedupe_key, entity_key, event_type, source_event_id, payload, created_at, available_at, delivered_at, dead_at, discarded_at)
VALUES ($1, $2, $3, 'order.paid', $2, '{"card":"4242"}', $4, $4, $5, $6, $7)`, d.tables.Outbox),
		ep, key, entity, at, deliveredAt, deadAt, discardedAt)
	if err != nil {
		t.Fatalf("insert outbox row %s: %v", key, err)
	}
	return key
}

// strings returns the first column of query's rows, sorted.
func (d *db) strings(t *testing.T, query string, args ...any) []string {
	t.Helper()
	rows, err := d.pool.Query(context.Background(), query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	slices.Sort(got)
	return got
}

func (d *db) withPayload(t *testing.T) []string {
	return d.strings(t, fmt.Sprintf(`SELECT event_id FROM %s WHERE payload IS NOT NULL AND headers IS NOT NULL`, d.tables.Events))
}

func (d *db) receipts(t *testing.T) []string {
	return d.strings(t, fmt.Sprintf(`SELECT event_id FROM %s`, d.tables.Events))
}

func (d *db) outboxKeys(t *testing.T) []string {
	return d.strings(t, fmt.Sprintf(`SELECT dedupe_key FROM %s`, d.tables.Outbox))
}

func (d *db) prune(t *testing.T, p retention.Policy, batch int) retention.Report {
	t.Helper()
	rep, err := retention.Prune(context.Background(), d.pool, retention.Options{
		Endpoint: endpoint, Tables: d.tables, Policy: p, BatchSize: batch, Pause: -1,
		Now: func() time.Time { return d.now },
	})
	if err != nil {
		t.Fatalf("prune: %v", err)
	}
	return rep
}

func sorted(s ...string) []string {
	slices.Sort(s)
	return s
}

const day = 24 * time.Hour

// TestPruneRemovesExactlyWhatIsOlderThanItsLimit places rows on both sides of each
// limit, in every state, and checks each kind goes on its own clock: payloads older
// than payloadFor (not parked ones), dedupe records older than dedupeFor (not parked
// ones), delivered outbox rows older than deliveredFor (never pending, dead or
// discarded ones), and nothing of another endpoint. Batches of 2 make every step run
// several statements.
func TestPruneRemovesExactlyWhatIsOlderThanItsLimit(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	p := retention.Policy{PayloadFor: 30 * day, DedupeFor: 400 * day, DeliveredFor: 7 * day}

	// Receipts, inserted oldest first as a receiver records them (ids follow time):
	// ages around 400 days (dedupe record) and 30 days (payload).
	parked := d.receipt(t, endpoint, "evt_parked_500d", "o3", "parked", 500*day)
	otherOld := d.receipt(t, other, "evt_other_500d", "o6", "applied", 500*day)
	ancient1 := d.receipt(t, endpoint, "evt_401d_a", "o4", "applied", 401*day)
	ancient2 := d.receipt(t, endpoint, "evt_401d_b", "o4", "applied", 401*day)
	ancient3 := d.receipt(t, endpoint, "evt_401d_c", "o4", "applied", 401*day)
	// Inserted after younger rows but older: ids and times need not agree exactly.
	lateID := d.receipt(t, endpoint, "evt_late_id_402d", "o5", "applied", 402*day)
	old1 := d.receipt(t, endpoint, "evt_100d_a", "o2", "unmatched", 100*day)
	old2 := d.receipt(t, endpoint, "evt_100d_b", "o2", "ignored_state", 100*day)
	justOld := d.receipt(t, endpoint, "evt_30d_plus_1s", "o1", "applied", 30*day+time.Second)
	justKept := d.receipt(t, endpoint, "evt_30d_minus_1s", "o1", "applied", 30*day-time.Second)
	young := d.receipt(t, endpoint, "evt_young", "o1", "applied", 29*day)

	// Outbox rows around 7 days, in every state, oldest first.
	dOld3 := d.outboxRow(t, endpoint, "del_90d", "o2", delivered, 90*day)
	pOld := d.outboxRow(t, endpoint, "pending_90d", "o2", pending, 90*day)
	deadOld := d.outboxRow(t, endpoint, "dead_90d", "o2", dead, 90*day)
	discOld := d.outboxRow(t, endpoint, "discarded_90d", "o2", discarded, 90*day)
	otherDel := d.outboxRow(t, other, "other_del_90d", "o6", delivered, 90*day)
	dOld1 := d.outboxRow(t, endpoint, "del_8d_a", "o1", delivered, 8*day)
	dOld2 := d.outboxRow(t, endpoint, "del_8d_b", "o1", delivered, 8*day)
	dYoung := d.outboxRow(t, endpoint, "del_6d", "o1", delivered, 6*day)

	rep := d.prune(t, p, 2)
	if rep.Skipped {
		t.Fatal("the run was skipped: nobody else holds the lock")
	}
	// Payloads removed: justOld, old1, old2 (the 401/402-day rows go whole).
	if got, want := d.withPayload(t), sorted(young, justKept, parked, otherOld); !slices.Equal(got, want) {
		t.Errorf("receipts with a payload: %v, want %v", got, want)
	}
	if got, want := d.receipts(t), sorted(young, justKept, justOld, old1, old2, parked, otherOld); !slices.Equal(got, want) {
		t.Errorf("receipts kept: %v, want %v (ancient %v %v %v %v deleted)", got, want, ancient1, ancient2, ancient3, lateID)
	}
	if got, want := d.outboxKeys(t), sorted(dYoung, pOld, deadOld, discOld, otherDel); !slices.Equal(got, want) {
		t.Errorf("outbox rows kept: %v, want %v (%v %v %v deleted)", got, want, dOld1, dOld2, dOld3)
	}
	// Payload pruning runs before dedupe pruning, so the 401/402-day receipts lost their
	// payloads and then their rows.
	if rep.Payloads != 7 || rep.Receipts != 4 || rep.Deliveries != 3 {
		t.Errorf("report %+v, want 7 payloads, 4 receipts, 3 deliveries", rep)
	}

	// A second run finds nothing.
	if again := d.prune(t, p, 2); again.Removed() != 0 {
		t.Errorf("second run removed %+v, want nothing", again)
	}

	// Zero keeps forever: with every window at 0 even the oldest rows stay.
	d.receipt(t, endpoint, "evt_forever", "o7", "applied", 5000*day)
	if rep := d.prune(t, retention.Policy{}, 2); rep.Removed() != 0 {
		t.Errorf("a policy of zeros removed %+v", rep)
	}
}

// TestPrunedReceiptsAreNotReplayed: a receipt replay selects only receipts that still
// have their payload; one whose payload retention removed is not re-run with nothing.
func TestPrunedReceiptsAreNotReplayed(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	d.receipt(t, endpoint, "evt_unmatched_old", "o1", "unmatched", 40*day)
	kept := d.receipt(t, endpoint, "evt_unmatched_new", "o1", "unmatched", day)
	d.prune(t, retention.Policy{PayloadFor: 30 * day}, 10)

	var seen []string
	rep, err := outbox.ReplayReceipts(context.Background(), d.pool, d.tables, outbox.Selection{Endpoint: endpoint}, nil,
		outbox.ReplayOptions{DryRun: true, Each: func(it outbox.ReplayItem) { seen = append(seen, it.Key) }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Selected != 1 || !slices.Equal(seen, []string{kept}) {
		t.Errorf("replay selected %d %v, want only %s", rep.Selected, seen, kept)
	}
}

// TestOneReplicaPrunesAtATime: while another session holds the endpoint's retention
// lock, a run is skipped and removes nothing; once it is released the next run prunes.
func TestOneReplicaPrunesAtATime(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	d.receipt(t, endpoint, "evt_old", "o1", "applied", 40*day)
	ctx := context.Background()
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lockKey := "hookkeeper.retention " + d.tables.Schema + " " + endpoint
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, lockKey); err != nil {
		t.Fatal(err)
	}
	p := retention.Policy{PayloadFor: 30 * day}
	if rep := d.prune(t, p, 10); !rep.Skipped || rep.Removed() != 0 {
		t.Errorf("run while another replica prunes: %+v, want skipped", rep)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, lockKey); err != nil {
		t.Fatal(err)
	}
	conn.Release()
	if rep := d.prune(t, p, 10); rep.Skipped || rep.Payloads != 1 {
		t.Errorf("run after the lock was released: %+v, want 1 payload", rep)
	}
}
