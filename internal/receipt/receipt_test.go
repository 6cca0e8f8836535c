package receipt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/outbox"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestConcurrentCopiesOfOneEventApplyOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, nil))
	f.managedEntity("order-1", "payment_pending", 1000)
	e := ev("evt_cap", "payment_intent.succeeded", "order-1", 1000, t0)

	const n = 64
	results := make([]Result, n)
	errs := make([]error, n)
	atOnce(n, func(i int) { results[i], errs[i] = f.rec.Record(f.ctx, e) })

	applied, dups := 0, 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("copy %d: %v", i, errs[i])
		}
		switch {
		case results[i].Duplicate:
			dups++
		case results[i].Outcome == OutcomeApplied:
			applied++
		default:
			t.Fatalf("copy %d: unexpected result %+v", i, results[i])
		}
	}
	if applied != 1 || dups != n-1 {
		t.Fatalf("applied %d, duplicates %d; want 1 and %d", applied, dups, n-1)
	}
	if got := f.rows.Receipts(t); got != 1 {
		t.Fatalf("receipts = %d, want 1", got)
	}
	if got := f.rows.Outbox(t); got != 1 {
		t.Fatalf("outbox rows = %d, want 1", got)
	}
	if got := f.count(`SELECT version FROM hk.entities WHERE entity_key = 'order-1'`); got != 1 {
		t.Fatalf("entity version = %d, want 1 (one transition)", got)
	}
	if got := f.str(`SELECT state FROM hk.entities WHERE entity_key = 'order-1'`); got != "paid" {
		t.Fatalf("state = %s", got)
	}
	wantKey := DedupeKey("shop/orders", "evt_cap", "order.paid")
	if got := f.str(`SELECT dedupe_key FROM hk.outbox`); got != wantKey {
		t.Fatalf("dedupe key = %s, want %s", got, wantKey)
	}
	payload := f.str(`SELECT payload::text FROM hk.outbox`)
	for _, want := range []string{`"transition": "capture"`, `"from": "payment_pending"`, `"to": "paid"`, `"event": {"id": "evt_cap"`, `"type": "payment_intent.succeeded"`} {
		if !strings.Contains(payload, want) {
			t.Fatalf("outbox payload %s lacks %s", payload, want)
		}
	}
}

func TestAmountMismatchRecordsGuardFailedOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, nil))
	f.managedEntity("order-3", "payment_pending", 1000)
	r := f.record(ev("evt_bad", "payment_intent.succeeded", "order-3", 999, t0))
	if r.Outcome != OutcomeGuardFailed || !strings.Contains(r.Detail, "capture") {
		t.Fatalf("result = %+v", r)
	}
	if got := f.str(`SELECT state || ':' || version || ':' || (last_event_at IS NULL) FROM hk.entities`); got != "payment_pending:0:true" {
		t.Fatalf("entity changed: %s", got)
	}
	if got := f.rows.Outbox(t); got != 0 {
		t.Fatalf("outbox rows = %d", got)
	}
	if got := f.str(`SELECT outcome FROM hk.webhook_events WHERE event_id = 'evt_bad'`); got != "guard_failed" {
		t.Fatalf("stored outcome = %s", got)
	}
}

const ordersTable = `CREATE TABLE public.orders (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	tenant_id text NOT NULL,
	client_txn_id text NOT NULL,
	status text NOT NULL,
	expected_amount_paise bigint NOT NULL,
	UNIQUE (tenant_id, client_txn_id))`

func ordersBinding() *v1alpha1.EntityTableSpec {
	return &v1alpha1.EntityTableSpec{
		Schema: "public", Name: "orders", KeyColumn: "client_txn_id", StateColumn: "status",
		AmountColumn: "expected_amount_paise", Tenant: &v1alpha1.TenantSpec{Column: "tenant_id", Value: "acme"},
	}
}

func TestAppTableBinding(t *testing.T) {
	t.Parallel()
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, ordersBinding()), ordersTable,
		`INSERT INTO public.orders (tenant_id, client_txn_id, status, expected_amount_paise) VALUES
		 ('acme', 'txn-1', 'payment_pending', 125000),
		 ('globex', 'txn-1', 'payment_pending', 125000),
		 ('acme', 'txn-2', 'payment_pending', 5000)`)

	r := f.record(ev("evt_1", "payment_intent.succeeded", "txn-1", 125000, t0))
	if r.Outcome != OutcomeApplied || r.OutboxKey == "" {
		t.Fatalf("capture: %+v", r)
	}
	if r := f.record(ev("evt_1", "payment_intent.succeeded", "txn-1", 125000, t0)); !r.Duplicate {
		t.Fatalf("duplicate: %+v", r)
	}
	if r := f.record(ev("evt_2", "payment_intent.succeeded", "txn-2", 4999, t0)); r.Outcome != OutcomeGuardFailed {
		t.Fatalf("mismatch: %+v", r)
	}
	if r := f.record(ev("evt_3", "payment_intent.succeeded", "txn-404", 1, t0)); r.Outcome != OutcomeUnmatched {
		t.Fatalf("unknown order: %+v", r)
	}
	// Stale detection works for app tables through entity_clocks.
	if r := f.record(ev("evt_4", "charge.dispute.created", "txn-1", 0, t0.Add(-time.Hour))); r.Outcome != OutcomeIgnoredState || r.Detail != "stale" {
		t.Fatalf("stale dispute: %+v", r)
	}
	got := f.str(`SELECT string_agg(tenant_id || '/' || client_txn_id || '=' || status, ',' ORDER BY id) FROM public.orders`)
	if want := "acme/txn-1=paid,globex/txn-1=payment_pending,acme/txn-2=payment_pending"; got != want {
		t.Fatalf("orders = %s, want %s", got, want)
	}
	if got := f.rows.Outbox(t); got != 1 {
		t.Fatalf("outbox rows = %d", got)
	}
	if got := f.rows.Entities(t); got != 0 {
		t.Fatalf("managed entities written in app-table mode: %d", got)
	}
	if got := f.rows.Count(t, f.rows.Tables.EntityClocks, "entity_key = $1", "txn-1"); got != 1 {
		t.Fatalf("entity clock rows = %d", got)
	}
}

func TestAppTableWithEnumStateAndIntegerKey(t *testing.T) {
	t.Parallel()
	table := &v1alpha1.EntityTableSpec{Schema: "shop data", Name: "Orders", KeyColumn: "order id", StateColumn: "state"}
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, table),
		`CREATE SCHEMA "shop data"`,
		`CREATE TYPE public.order_state AS ENUM ('payment_pending', 'paid', 'failed', 'refunded', 'disputed')`,
		`CREATE TABLE "shop data"."Orders" ("order id" bigint PRIMARY KEY, state public.order_state NOT NULL)`,
		`INSERT INTO "shop data"."Orders" VALUES (42, 'payment_pending')`)
	// No amount column: entity.amount is null, so the amount guard fails closed.
	if r := f.record(ev("evt_a", "payment_intent.succeeded", "42", 10, t0)); r.Outcome != OutcomeGuardFailed {
		t.Fatalf("capture without amount column: %+v", r)
	}
	if r := f.record(ev("evt_b", "payment_intent.payment_failed", "42", 0, t0)); r.Outcome != OutcomeApplied || r.ToState != "failed" {
		t.Fatalf("fail: %+v", r)
	}
	if got := f.str(`SELECT state::text FROM "shop data"."Orders" WHERE "order id" = 42`); got != "failed" {
		t.Fatalf("state = %s", got)
	}
}

func TestOnUnmatched(t *testing.T) {
	t.Parallel()
	t.Run("Record", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, nil))
		r := f.record(ev("evt_u", "payment_intent.succeeded", "order-x", 10, t0))
		if r.Outcome != OutcomeUnmatched || r.ReceiptID == 0 {
			t.Fatalf("result = %+v", r)
		}
		if got := f.rows.ReceiptsWithOutcome(t, OutcomeUnmatched); got != 1 {
			t.Fatalf("unmatched receipts = %d", got)
		}
	})
	// A copy of an applied event whose entity the app deleted since is a duplicate: it
	// is stored, and refusing it would make the provider retry it until it gives up.
	t.Run("Retry, a copy after the entity is gone", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRetry, ordersBinding()), ordersTable,
			`INSERT INTO public.orders (tenant_id, client_txn_id, status, expected_amount_paise) VALUES ('acme', 'txn-1', 'payment_pending', 100)`)
		if r := f.record(ev("evt_1", "payment_intent.succeeded", "txn-1", 100, t0)); r.Outcome != OutcomeApplied {
			t.Fatalf("first delivery: %+v", r)
		}
		f.exec(`DELETE FROM public.orders WHERE client_txn_id = 'txn-1'`)
		// Another replica's Recorder: this one would answer from its memory of the id.
		for _, rec := range []*Recorder{NewRecorder(f.pool, f.ep), NewRecorder(f.pool, f.ep, WithGroupCommit(GroupCommit{MaxEvents: 1}))} {
			r, err := rec.Record(f.ctx, ev("evt_1", "payment_intent.succeeded", "txn-1", 100, t0))
			if err != nil || !r.Duplicate {
				t.Fatalf("copy after the order was deleted: %+v, %v; want a duplicate", r, err)
			}
		}
		if got := f.rows.Receipts(t); got != 1 {
			t.Fatalf("receipts = %d, want 1", got)
		}
	})
	t.Run("Retry", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRetry, nil))
		_, err := f.rec.Record(f.ctx, ev("evt_u", "payment_intent.succeeded", "order-x", 10, t0))
		if !errors.Is(err, ErrRetryLater) {
			t.Fatalf("err = %v, want ErrRetryLater", err)
		}
		if got := f.rows.Receipts(t); got != 0 {
			t.Fatalf("receipts = %d, want 0 (rolled back)", got)
		}
		f.managedEntity("order-x", "payment_pending", 10)
		if r := f.record(ev("evt_u", "payment_intent.succeeded", "order-x", 10, t0)); r.Outcome != OutcomeApplied {
			t.Fatalf("retry after the entity exists: %+v", r)
		}
	})
	t.Run("Create", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, endpointSpec(v1alpha1.UnmatchedCreate, nil))
		r := f.record(ev("evt_c", "payment_intent.succeeded", "order-new", 700, t0))
		if r.Outcome != OutcomeApplied || !strings.Contains(r.Detail, DetailCreated) {
			t.Fatalf("result = %+v", r)
		}
		if got := f.str(`SELECT state || ':' || amount FROM hk.entities WHERE entity_key = 'order-new'`); got != "paid:700" {
			t.Fatalf("entity = %s", got)
		}
		// A second event on the existing entity is not "created".
		r = f.record(ev("evt_c2", "charge.refunded", "order-new", 700, t0.Add(time.Second)))
		if r.Outcome != OutcomeApplied || strings.Contains(r.Detail, DetailCreated) {
			t.Fatalf("refund = %+v", r)
		}
		// Concurrent first events of one new entity create it once.
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = f.rec.Record(f.ctx, ev(fmt.Sprintf("evt_p%d", i), "payment_intent.payment_failed", "order-race", 0, t0))
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if got := f.rows.Count(t, f.rows.Tables.Events, "entity_key = $1 AND outcome = $2", "order-race", string(OutcomeApplied)); got != 1 {
			t.Fatalf("applied fail transitions = %d, want 1", got)
		}
		// A copy of a recorded event whose entity has since been deleted is a duplicate
		// and leaves no trace: the entity its lock re-created is deleted again, whether
		// the copy would apply or not.
		f.exec(`DELETE FROM hk.entities WHERE entity_key IN ('order-new', 'order-race')`)
		for _, e := range []Event{
			ev("evt_c", "payment_intent.succeeded", "order-new", 700, t0),
			ev("evt_p0", "payment_intent.payment_failed", "order-race", 0, t0),
		} {
			if r := f.record(e); !r.Duplicate {
				t.Fatalf("copy of %s after its entity was deleted = %+v, want a duplicate", e.ID, r)
			}
		}
		if got := f.rows.Count(t, f.rows.Tables.Entities, "entity_key IN ($1, $2)", "order-new", "order-race"); got != 0 {
			t.Fatalf("entities re-created by duplicates = %d, want 0", got)
		}
		if got := f.rows.Outbox(t); got != 2 {
			t.Fatalf("outbox rows = %d, want 2 (paid, refunded)", got)
		}
	})
}

func TestUnhandledAndKeylessEvents(t *testing.T) {
	t.Parallel()
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRetry, nil))
	if r := f.record(ev("evt_n", "customer.created", "cus_1", 0, t0)); r.Outcome != OutcomeUnhandled {
		t.Fatalf("unhandled: %+v", r)
	}
	if r := f.record(ev("evt_n", "customer.created", "cus_1", 0, t0)); !r.Duplicate {
		t.Fatalf("unhandled duplicate: %+v", r)
	}
	// No entity key: recorded as unmatched even under Retry, which could never succeed.
	if r := f.record(ev("evt_k", "payment_intent.succeeded", "", 0, t0)); r.Outcome != OutcomeUnmatched || r.Detail != DetailNoKey {
		t.Fatalf("keyless: %+v", r)
	}
}

func TestReprocessAppliesOnceAfterTheEntityAppears(t *testing.T) {
	t.Parallel()
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, nil))
	r := f.record(ev("evt_late", "payment_intent.succeeded", "order-9", 300, t0))
	if r.Outcome != OutcomeUnmatched {
		t.Fatalf("first delivery: %+v", r)
	}
	id := r.ReceiptID
	// Still no entity: stays unmatched.
	if r, err := f.rec.Reprocess(f.ctx, id); err != nil || r.Outcome != OutcomeUnmatched {
		t.Fatalf("reprocess without entity: %+v %v", r, err)
	}
	f.managedEntity("order-9", "payment_pending", 300)
	r, err := f.rec.Reprocess(f.ctx, id)
	if err != nil || r.Outcome != OutcomeApplied || r.OutboxKey != DedupeKey("shop/orders", "evt_late", "order.paid") {
		t.Fatalf("reprocess: %+v %v", r, err)
	}
	r, err = f.rec.Reprocess(f.ctx, id)
	if err != nil || !r.Duplicate || r.Outcome != OutcomeApplied {
		t.Fatalf("second reprocess: %+v %v", r, err)
	}
	if got := f.rows.Outbox(t); got != 1 {
		t.Fatalf("outbox rows = %d", got)
	}
	if got := f.str(`SELECT outcome || ':' || (processed_at IS NOT NULL) FROM hk.webhook_events WHERE id = $1`, id); got != "applied:true" {
		t.Fatalf("receipt = %s", got)
	}
	if _, err := f.rec.Reprocess(f.ctx, id+1000); !errors.Is(err, ErrReceiptNotFound) {
		t.Fatalf("missing receipt: err = %v", err)
	}
}

func TestReprocessGuardFailedAfterFix(t *testing.T) {
	t.Parallel()
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, ordersBinding()), ordersTable,
		`INSERT INTO public.orders (tenant_id, client_txn_id, status, expected_amount_paise) VALUES ('acme', 'txn-7', 'payment_pending', 100)`)
	r := f.record(ev("evt_7", "payment_intent.succeeded", "txn-7", 150, t0))
	if r.Outcome != OutcomeGuardFailed {
		t.Fatalf("first: %+v", r)
	}
	f.exec(`UPDATE public.orders SET expected_amount_paise = 150 WHERE client_txn_id = 'txn-7'`)
	r, err := f.rec.Reprocess(f.ctx, r.ReceiptID)
	if err != nil || r.Outcome != OutcomeApplied {
		t.Fatalf("reprocess: %+v %v", r, err)
	}
	if got := f.str(`SELECT status FROM public.orders WHERE client_txn_id = 'txn-7'`); got != "paid" {
		t.Fatalf("status = %s", got)
	}
}

// A transition for a new event type reaches the replicas one by one: a replica still on
// the old machine stores the type's events as unhandled. A replay under the new machine
// applies them, once, with the dedupe key a first delivery would have had.
func TestReprocessUnhandledAfterATransitionIsAdded(t *testing.T) {
	t.Parallel()
	before := endpointSpec(v1alpha1.UnmatchedRecord, nil)
	before.Spec.StateMachine.Transitions = slices.DeleteFunc(before.Spec.StateMachine.Transitions,
		func(tr v1alpha1.Transition) bool { return tr.Name == "fail" })
	f := newFixture(t, before)
	f.managedEntity("order-4", "payment_pending", 0)
	r := f.record(ev("evt_fail", "payment_intent.payment_failed", "order-4", 0, t0))
	if r.Outcome != OutcomeUnhandled {
		t.Fatalf("under the old machine: %+v", r)
	}
	if got, err := f.rec.Reprocess(f.ctx, r.ReceiptID); err != nil || got.Outcome != OutcomeUnhandled {
		t.Fatalf("replayed under the old machine: %+v %v, want unhandled again", got, err)
	}
	// `hookkeeper replay --receipts --outcome unhandled` under the new machine.
	after := NewRecorder(f.pool, f.compile(endpointSpec(v1alpha1.UnmatchedRecord, nil)))
	sel := outbox.Selection{Endpoint: f.ep.Key(), Outcomes: []string{string(OutcomeUnhandled)}}
	var got Result
	reprocess := func(ctx context.Context, id int64) (err error) { got, err = after.Reprocess(ctx, id); return err }
	rep, err := outbox.ReplayReceipts(f.ctx, f.pool, store.TablesIn(schema), sel, reprocess, outbox.ReplayOptions{})
	if err != nil || rep.Selected != 1 || got.Outcome != OutcomeApplied || got.ToState != "failed" {
		t.Fatalf("replayed under the new machine: %+v, report %+v, %v", got, rep, err)
	}
	if again, err := after.Reprocess(f.ctx, r.ReceiptID); err != nil || !again.Duplicate || again.Outcome != OutcomeApplied {
		t.Fatalf("second replay: %+v %v", again, err)
	}
	if state := f.str(`SELECT state FROM hk.entities WHERE entity_key = 'order-4'`); state != "failed" {
		t.Fatalf("entity state = %s, want failed", state)
	}
}

func TestRecordBatchIsOneTransaction(t *testing.T) {
	t.Parallel()
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, nil))
	f.managedEntity("o1", "payment_pending", 10)
	f.managedEntity("o2", "payment_pending", 20)
	res, err := f.rec.RecordBatch(f.ctx, []Event{
		ev("a", "payment_intent.succeeded", "o1", 10, t0),
		ev("b", "customer.updated", "", 0, t0),
		ev("c", "charge.refunded", "o1", 10, t0.Add(time.Second)), // same entity, after a
		ev("a", "payment_intent.succeeded", "o1", 10, t0),         // duplicate inside the batch
		ev("d", "payment_intent.succeeded", "o2", 21, t0),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"applied", "unhandled", "applied", "dup", "guard_failed"}
	for i, r := range res {
		got := string(r.Outcome)
		if r.Duplicate {
			got = "dup"
		}
		if got != want[i] {
			t.Fatalf("item %d: %+v, want %s", i, r, want[i])
		}
	}
	if got := f.str(`SELECT string_agg(entity_key || '=' || state, ',' ORDER BY entity_key) FROM hk.entities`); got != "o1=refunded,o2=payment_pending" {
		t.Fatalf("entities = %s", got)
	}

	// A batch with an item that must be retried stores nothing at all.
	f2 := newFixture(t, endpointSpec(v1alpha1.UnmatchedRetry, nil))
	f2.managedEntity("o1", "payment_pending", 10)
	_, err = f2.rec.RecordBatch(f2.ctx, []Event{
		ev("a", "payment_intent.succeeded", "o1", 10, t0),
		ev("b", "payment_intent.succeeded", "missing", 10, t0),
	})
	if !errors.Is(err, ErrRetryLater) {
		t.Fatalf("err = %v", err)
	}
	if got := f2.rows.Receipts(t) + f2.rows.Outbox(t); got != 0 {
		t.Fatalf("rows after a rolled-back batch = %d", got)
	}
	if got := f2.str(`SELECT state FROM hk.entities`); got != "payment_pending" {
		t.Fatalf("entity = %s", got)
	}
}

// A connection lost mid-transaction (the backend terminated while Record waits for the
// entity lock, after its receipt insert) commits nothing. A cancelled context (the
// provider's request timed out) answers an error at once; a predicted group's batch,
// COMMIT included, may already be at the server, where it goes on when the lock frees
// (pgx closes the socket; PostgreSQL notices only when it writes). Either way the event
// is applied at most once, and once the provider's retry is answered, exactly once.
func TestDatabaseFailureMidTransactionCommitsNothing(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"terminate", "cancel"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, ordersBinding()), ordersTable,
				`INSERT INTO public.orders (tenant_id, client_txn_id, status, expected_amount_paise) VALUES ('acme', 'txn-1', 'payment_pending', 100)`)

			// Another session holds the order's row lock.
			holder, err := f.pool.Begin(f.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = holder.Rollback(context.Background()) }()
			if _, err := holder.Exec(f.ctx, `SELECT 1 FROM public.orders WHERE client_txn_id = 'txn-1' FOR UPDATE`); err != nil {
				t.Fatal(err)
			}

			ctx, cancel := context.WithCancel(f.ctx)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := f.rec.Record(ctx, ev("evt_x", "payment_intent.succeeded", "txn-1", 100, t0))
				done <- err
			}()

			// Wait until Record's backend is blocked on the lock, inside its transaction.
			var pid int
			deadline := time.Now().Add(20 * time.Second)
			for {
				err := f.pool.QueryRow(f.ctx, `SELECT pid FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%FOR UPDATE%'`).Scan(&pid)
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Record never blocked on the entity lock: %v", err)
				}
				select {
				case err := <-done:
					t.Fatalf("Record finished before blocking: %v", err)
				case <-time.After(20 * time.Millisecond):
				}
			}
			if how == "terminate" {
				f.exec(`SELECT pg_terminate_backend($1)`, pid)
			} else {
				cancel()
			}
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("Record succeeded after its transaction was broken")
				}
				if errors.Is(err, ErrRetryLater) {
					t.Fatalf("err = %v, want a database error", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Record did not return")
			}
			if how == "terminate" {
				if got := f.rows.Receipts(t) + f.rows.Outbox(t) + f.rows.Clocks(t); got != 0 {
					t.Fatalf("rows after a failed transaction = %d, want 0", got)
				}
			}
			if err := holder.Rollback(f.ctx); err != nil {
				t.Fatal(err)
			}
			if how == "terminate" {
				if got := f.rows.Receipts(t) + f.rows.Outbox(t) + f.rows.Clocks(t); got != 0 {
					t.Fatalf("rows after a failed transaction = %d, want 0", got)
				}
				if got := f.str(`SELECT status FROM public.orders`); got != "payment_pending" {
					t.Fatalf("status = %s", got)
				}
			}
			// The provider's retry then succeeds: applied, or a duplicate of the batch
			// that went on without its caller.
			r := f.record(ev("evt_x", "payment_intent.succeeded", "txn-1", 100, t0))
			if cancelledCopy := how == "cancel" && r.Duplicate; r.Outcome != OutcomeApplied && !cancelledCopy {
				t.Fatalf("retry: %+v", r)
			}
			if got := f.rows.ReceiptsWithOutcome(t, OutcomeApplied); got != 1 {
				t.Fatalf("%d applied receipts after the retry, want 1", got)
			}
			if got := f.rows.Outbox(t); got != 1 {
				t.Fatalf("%d outbox rows after the retry, want 1", got)
			}
			if got := f.str(`SELECT status FROM public.orders`); got != "paid" {
				t.Fatalf("status after the retry = %s", got)
			}
		})
	}
}

// TestRoundTrips counts client writes (pgx flushes each pipeline once) per event, after
// a warm-up that prepares the statements on the single connection.
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, ordersBinding()), ordersTable,
		`INSERT INTO public.orders (tenant_id, client_txn_id, status, expected_amount_paise)
		 SELECT 'acme', 'txn-' || g, 'payment_pending', 100 FROM generate_series(1, 12) g`)
	f.pool.Reset()
	// another is a second replica's Recorder on the same database: it has not seen what
	// f.rec committed, so copies of those reach the database.
	another := NewRecorder(f.pool, f.ep)
	// locked never predicts: it locks and reads, then writes.
	locked := NewRecorder(f.pool, f.ep, WithGroupCommit(GroupCommit{MaxEvents: 32, Transactions: 2, NoPrediction: true}))
	for i := 1; i <= 2; i++ { // warm-up: prepare every statement
		if _, err := locked.Record(f.ctx, ev(fmt.Sprintf("warm-l-%d", i), "payment_intent.succeeded", fmt.Sprintf("txn-%d", i+10), 100, t0)); err != nil {
			t.Fatal(err)
		}
		f.record(ev(fmt.Sprintf("warm-%d", i), "payment_intent.succeeded", fmt.Sprintf("txn-%d", i), 100, t0))
		f.record(ev(fmt.Sprintf("warm-u-%d", i), "customer.created", "", 0, t0))
		if r, err := another.Record(f.ctx, ev(fmt.Sprintf("warm-%d", i), "payment_intent.succeeded", fmt.Sprintf("txn-%d", i), 100, t0)); err != nil || !r.Duplicate {
			t.Fatalf("warm-up copy: %+v, %v", r, err)
		}
		f.record(ev(fmt.Sprintf("warm-g-%d", i), "payment_intent.succeeded", fmt.Sprintf("txn-%d", i+5), 1, t0))
	}
	measure := func(name string, want int64, e Event, check func(Result) bool, rec ...*Recorder) {
		t.Helper()
		before, dials := f.writes.Load(), f.dials.Load()
		recorder := f.rec
		if len(rec) > 0 {
			recorder = rec[0]
		}
		r, err := recorder.Record(f.ctx, e)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !check(r) {
			t.Fatalf("%s: result %+v", name, r)
		}
		if f.dials.Load() != dials {
			t.Fatalf("%s: a new connection was dialled; the count is not steady state", name)
		}
		got := f.writes.Load() - before
		t.Logf("%s: %d round trips", name, got)
		if got != want {
			t.Errorf("%s: %d round trips, want %d", name, got, want)
		}
	}
	applied := func(r Result) bool { return r.Outcome == OutcomeApplied }
	guardFailed := func(r Result) bool { return r.Outcome == OutcomeGuardFailed }
	// Predicted (predict.go): an order the recorder has not seen is predicted new, in
	// the initial state with the event's amount; one it wrote, as it left it.
	measure("applied, predicted new", 1, ev("e1", "payment_intent.succeeded", "txn-3", 100, t0), applied)
	measure("applied, predicted as this recorder left it", 1, ev("e1-r", "charge.refunded", "txn-3", 100, t0.Add(time.Second)),
		func(r Result) bool { return r.Outcome == OutcomeApplied && r.ToState == "refunded" })
	measure("guard_failed, mispredicted (the order's amount is not the event's)", 3,
		ev("e2", "payment_intent.succeeded", "txn-4", 1, t0), guardFailed)
	isDup := func(r Result) bool { return r.Duplicate }
	measure("duplicate this recorder committed", 0, ev("e1", "payment_intent.succeeded", "txn-3", 100, t0), isDup)
	measure("duplicate another replica committed", 1, ev("e2", "payment_intent.succeeded", "txn-4", 1, t0), isDup, another)
	measure("unhandled", 1, ev("e3", "customer.created", "", 0, t0), func(r Result) bool { return r.Outcome == OutcomeUnhandled })

	// Unpredicted: lock and read, then write.
	measure("applied, unpredicted", 2, ev("e4", "payment_intent.succeeded", "txn-8", 100, t0), applied, locked)
	measure("guard_failed, unpredicted", 2, ev("e5", "payment_intent.succeeded", "txn-9", 1, t0), guardFailed, locked)
}

func TestLiveObjectFeedsTheGuard(t *testing.T) {
	t.Parallel()
	we := endpointSpec(v1alpha1.UnmatchedRecord, nil)
	we.Spec.Provider.Refetch = &v1alpha1.RefetchSpec{APIKeySecretRef: secretRef("stripe", "key"), Transitions: []string{"capture"}}
	we.Spec.StateMachine.Transitions[0].Guard = `live != null && live.status == "succeeded" && event.amount == entity.amount`
	f := newFixture(t, we)
	for _, k := range []string{"o-ok", "o-stale", "o-gone", "o-down", "o-none"} {
		f.managedEntity(k, "payment_pending", 10)
	}
	calls := 0
	rec := NewRecorder(f.pool, f.ep, WithLive(func(_ context.Context, e Event) (any, error) {
		calls++
		switch e.EntityKey {
		case "o-ok":
			return LiveValue{Value: map[string]any{"status": "succeeded"}, Detail: "refetch: pi is succeeded"}, nil
		case "o-stale":
			return map[string]any{"status": "processing"}, nil
		case "o-gone":
			return nil, &LiveRejected{Detail: "refetch: object not found"}
		case "o-down":
			return nil, errors.New("provider unavailable")
		}
		return nil, nil
	}))
	record := func(key string) (Result, error) {
		return rec.Record(f.ctx, ev("evt_"+key, "payment_intent.succeeded", key, 10, t0))
	}
	if r, err := record("o-ok"); err != nil || r.Outcome != OutcomeApplied || !strings.Contains(r.Detail, "pi is succeeded") {
		t.Fatalf("live succeeded: %+v %v", r, err)
	}
	if r, err := record("o-stale"); err != nil || r.Outcome != OutcomeGuardFailed {
		t.Fatalf("live processing: %+v %v", r, err)
	}
	if r, err := record("o-gone"); err != nil || r.Outcome != OutcomeGuardFailed || r.Detail != "refetch: object not found" {
		t.Fatalf("live rejected: %+v %v", r, err)
	}
	if _, err := record("o-down"); err == nil || !strings.Contains(err.Error(), "provider unavailable") {
		t.Fatalf("live error: err = %v, want it returned", err)
	}
	if got := f.rows.ReceiptsOf(t, "evt_o-down"); got != 0 {
		t.Fatalf("a failed fetch stored a receipt")
	}
	before := calls
	if r, err := rec.Record(f.ctx, ev("evt_r", "charge.refunded", "o-none", 10, t0)); err != nil || r.Outcome != OutcomeParked {
		t.Fatalf("refund: %+v %v", r, err)
	}
	if calls != before {
		t.Fatalf("an event whose transitions do not re-fetch was fetched")
	}
}
