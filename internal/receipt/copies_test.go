package receipt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// TestCopiesOfCommittedEventsSkipTheDatabase: a copy of an event this Recorder committed
// is answered without a round trip; a delivery with any event it has not seen goes to
// the database, and only committed events are remembered.
func TestCopiesOfCommittedEventsSkipTheDatabase(t *testing.T) {
	t.Parallel()
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRetry, nil))
	f.managedEntity("order-1", "payment_pending", 100)
	f.managedEntity("order-2", "payment_pending", 100)
	first := ev("evt_1", "payment_intent.succeeded", "order-1", 100, t0)
	if r := f.record(first); r.Outcome != OutcomeApplied {
		t.Fatalf("first delivery: %+v", r)
	}

	before := f.writes.Load()
	for i := range 3 {
		if r := f.record(first); !r.Duplicate {
			t.Fatalf("copy %d: %+v, want a duplicate", i, r)
		}
	}
	if got := f.writes.Load() - before; got != 0 {
		t.Fatalf("copies of a committed event wrote %d times to the database, want 0", got)
	}

	// A batch with one unseen event is decided by the database, the seen one included.
	res, err := f.rec.RecordBatch(f.ctx, []Event{first, ev("evt_2", "payment_intent.succeeded", "order-2", 100, t0)})
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Duplicate || res[1].Outcome != OutcomeApplied {
		t.Fatalf("batch results %+v, want a duplicate and an applied event", res)
	}
	if f.writes.Load() == before {
		t.Fatal("a batch with an unseen event did not reach the database")
	}

	// An event turned away (nothing committed) is not remembered: once its entity
	// exists, its retry applies.
	later := ev("evt_3", "payment_intent.succeeded", "order-3", 100, t0)
	if _, err := f.rec.Record(f.ctx, later); !errors.Is(err, ErrRetryLater) {
		t.Fatalf("err = %v, want ErrRetryLater", err)
	}
	f.managedEntity("order-3", "payment_pending", 100)
	if r := f.record(later); r.Outcome != OutcomeApplied {
		t.Fatalf("retry once the entity exists: %+v, want applied", r)
	}
	if got := f.rows.Receipts(t); got != 3 {
		t.Fatalf("receipts = %d, want 3", got)
	}

	// A copy the database found recorded (another replica wrote the receipt) is not
	// remembered: this process does not know how old that receipt is.
	other := ev("evt_4", "payment_intent.succeeded", "order-3", 100, t0)
	if r, err := NewRecorder(f.pool, f.ep).Record(f.ctx, other); err != nil || r.Outcome != OutcomeIgnoredState {
		t.Fatalf("another replica's delivery: %+v, %v", r, err)
	}
	for i := range 2 {
		before := f.writes.Load()
		if r := f.record(other); !r.Duplicate {
			t.Fatalf("copy %d of another replica's event: %+v, want a duplicate", i, r)
		}
		if f.writes.Load() == before {
			t.Fatalf("copy %d of another replica's event was answered without the database", i)
		}
	}
}

// TestRecentEventsForgetBeforeTheDedupeWindowEnds: an id is not answered for once it is
// as old as retention's dedupeFor less recentMargin, when retention could have deleted
// its receipt; with dedupeFor 0 (kept forever) it is remembered until crowded out.
func TestRecentEventsForgetBeforeTheDedupeWindowEnds(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	s := newRecentEvents(8)
	s.now = func() time.Time { return now }
	s = s.forgetAfter(time.Hour)
	s.add("evt_1")
	known := func() bool { return s.hasAll([]Event{{ID: "evt_1"}}) }
	now = now.Add(time.Hour - recentMargin - time.Second)
	if !known() {
		t.Fatal("forgotten before dedupeFor less the margin")
	}
	now = now.Add(time.Second)
	if known() {
		t.Fatal("remembered at dedupeFor less the margin")
	}

	forever := newRecentEvents(8).forgetAfter(0)
	forever.now = func() time.Time { return now }
	forever.add("evt_1")
	now = now.Add(100 * 365 * 24 * time.Hour)
	if !forever.hasAll([]Event{{ID: "evt_1"}}) {
		t.Fatal("with dedupeFor 0 an id was forgotten by age")
	}

	// A window within the margin leaves nothing to remember (0 would mean no limit).
	if newRecentEvents(8).forgetAfter(recentMargin) != nil {
		t.Fatal("a dedupeFor of recentMargin kept the memory")
	}
}

// TestRecentEventsForgetOldestFirst: the set holds the last max ids added.
func TestRecentEventsForgetOldestFirst(t *testing.T) {
	t.Parallel()
	s := newRecentEvents(3)
	for i := range 5 {
		s.add(fmt.Sprintf("evt_%d", i))
	}
	s.add("evt_4") // already there: takes no second place
	for i, want := range []bool{false, false, true, true, true} {
		if got := s.hasAll([]Event{{ID: fmt.Sprintf("evt_%d", i)}}); got != want {
			t.Errorf("evt_%d remembered = %v, want %v", i, got, want)
		}
	}
	if got := len(s.set); got != 3 {
		t.Errorf("%d ids held, want 3", got)
	}
	if newRecentEvents(0).hasAll([]Event{{ID: "evt_4"}}) {
		t.Error("a Recorder with WithRecentEvents(0) remembered an event")
	}
}

// TestCopiesOfAnEventInAnUncommittedGroupWaitForItsOutcome: copies of an event that
// arrive while the original sits in a group transaction that has written its receipt
// but not committed are answered neither from the Recorder's memory nor by the context
// read: each waits in the database until the original's transaction ends. When it
// commits they are duplicates; when its session dies instead, exactly one delivery
// (a copy, or the original's own retry) applies the event, and nobody was told
// "duplicate" for an event that was not stored.
//
// The original's transaction is held in its write by a trigger that waits for an
// advisory lock the test holds; the original is delivered alone (through Record) or in
// a group of four (the grouper's run, so the group's membership is fixed).
func TestCopiesOfAnEventInAnUncommittedGroupWaitForItsOutcome(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		grouped bool
		die     bool
	}{
		{"alone, commits", false, false},
		{"alone, session dies", false, true},
		{"in a group, commits", true, false},
		{"in a group, session dies", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			copyInFlight(t, tc.grouped, tc.die)
		})
	}
}

func copyInFlight(t *testing.T, grouped, die bool) {
	const copies = 8
	const holdKey = 4242
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, nil))
	f.managedEntity("order-held", "payment_pending", 100)
	f.pendingOrders(3, 100)
	f.exec(fmt.Sprintf(`CREATE FUNCTION hk.hold_move() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- Polled rather than waited for: a lock wait would end at the group's lock_timeout.
  IF NEW.entity_key = 'order-held' THEN
    PERFORM set_config('application_name', 'hk-held-write', true);
    WHILE NOT pg_try_advisory_xact_lock_shared(%d) LOOP PERFORM pg_sleep(0.002); END LOOP;
  END IF;
  RETURN NEW;
END $$`, holdKey))
	f.exec(`CREATE TRIGGER hold_move BEFORE UPDATE ON hk.entities FOR EACH ROW EXECUTE FUNCTION hk.hold_move()`)

	holder, err := f.pool.Acquire(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := true
	release := func() {
		if held {
			held = false
			if _, err := holder.Exec(f.ctx, `SELECT pg_advisory_unlock($1)`, holdKey); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		if held {
			_, _ = holder.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, holdKey)
		}
		holder.Release()
	})
	if _, err := holder.Exec(f.ctx, `SELECT pg_advisory_lock($1)`, holdKey); err != nil {
		t.Fatal(err)
	}

	original := ev("evt_held", "payment_intent.succeeded", "order-held", 100, t0)
	type answer struct {
		who string
		res Result
		err error
	}
	answers := make(chan answer, copies+8)
	var wg sync.WaitGroup
	var others []*groupMember
	if grouped {
		members := []*groupMember{member(f.ctx, original)}
		for i := range 3 {
			members = append(members, member(f.ctx, ev(fmt.Sprintf("evt_%d", i), "payment_intent.succeeded", fmt.Sprintf("order-%d", i), 100, t0)))
		}
		others = members[1:]
		wg.Go(func() {
			f.rec.group.run(members, func() {}) // every member is answered when it returns
			rep := <-members[0].reply
			answers <- answer{"original", rep.res, rep.err}
		})
	} else {
		wg.Go(func() {
			res, err := f.rec.Record(f.ctx, original)
			answers <- answer{"original", res, err}
		})
	}
	// The original's transaction holds its receipt, uncommitted, waiting in its write.
	waiting := func(event string) int {
		return f.count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND wait_event = $1`, event)
	}
	inWrite := func() int {
		return f.count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND application_name = 'hk-held-write'`)
	}
	testsupport.Eventually(t, 15*time.Second, 2*time.Millisecond, "the original to wait in its write", func() bool { return inWrite() == 1 })
	if got := f.count(`SELECT count(*) FROM hk.webhook_events`); got != 0 {
		t.Fatalf("%d receipts visible before the original committed", got)
	}

	for i := range copies {
		wg.Go(func() {
			res, err := f.rec.Record(f.ctx, original)
			answers <- answer{fmt.Sprintf("copy %d", i), res, err}
		})
	}
	// Every copy reaches the database and waits there for the entity's lock: none was
	// answered from memory or decided while the original was uncommitted.
	testsupport.Eventually(t, 15*time.Second, 2*time.Millisecond, "every copy to wait for the entity's lock", func() error {
		select {
		case a := <-answers:
			return testsupport.Final(fmt.Errorf("%s answered while the original was uncommitted: %+v, %s", a.who, a.res, fmt.Sprint(a.err)))
		default:
		}
		if n := waiting("transactionid") + waiting("tuple"); n != copies {
			return fmt.Errorf("%d of %d copies wait for the entity's lock", n, copies)
		}
		return nil
	})
	select {
	case a := <-answers:
		t.Fatalf("%s answered while the original was uncommitted: %+v, %v", a.who, a.res, a.err)
	default:
	}

	if die {
		// The one session in the write is the original's: the copies wait for its lock.
		var killed int
		if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'hk-held-write') x`).Scan(&killed); err != nil || killed != 1 {
			t.Fatalf("terminated %d sessions (%v), want the original's", killed, err)
		}
	}
	release()

	applied, duplicates := 0, 0
	for range copies + 1 {
		var a answer
		select {
		case a = <-answers:
		case <-time.After(30 * time.Second):
			t.Fatal("a delivery never answered")
		}
		if a.err != nil && die {
			// A delivery whose transaction died is answered 503 (the original alone;
			// in a group, its own retry): the provider delivers it again.
			res, err := f.rec.Record(f.ctx, original)
			a = answer{a.who + ", delivered again", res, err}
		}
		switch {
		case a.err != nil:
			t.Errorf("%s: %v", a.who, a.err)
		case a.res.Duplicate:
			duplicates++
		case a.res.Outcome == OutcomeApplied:
			applied++
		default:
			t.Errorf("%s: %+v", a.who, a.res)
		}
	}
	wg.Wait()
	if applied != 1 || duplicates != copies {
		t.Errorf("%d applied and %d duplicates among the original and its %d copies, want 1 and %d", applied, duplicates, copies, copies)
	}
	for _, m := range others {
		if rep := awaitReply(t, m); rep.err != nil || rep.res.Outcome != OutcomeApplied {
			t.Errorf("group member %s: %+v, %v", m.ev.ID, rep.res, rep.err)
		}
	}
	if got := f.rows.ReceiptsOf(t, "evt_held"); got != 1 {
		t.Errorf("receipts of evt_held = %d, want 1", got)
	}
	if got := f.count(`SELECT count(*) FROM hk.outbox WHERE source_event_id = 'evt_held'`); got != 1 {
		t.Errorf("outbox rows of evt_held = %d, want 1", got)
	}
	if got := f.count(`SELECT count(*) FROM hk.entities WHERE entity_key = 'order-held' AND state = 'paid' AND version = 1`); got != 1 {
		t.Errorf("order-held is not paid by exactly one transition")
	}
	if res := f.record(original); !res.Duplicate {
		t.Errorf("a later copy: %+v, want a duplicate", res)
	}
}

// An event id re-sent with a different payload is deduplicated by its id and never
// re-applied, whatever changed: the amount (a guard_failed first copy stays
// guard_failed), the time, the type, or the entity key (with onUnmatched Create the
// entity the copy's lock created is removed again). Copies race on two replicas.
func TestResentIDWithAnotherPayloadIsADuplicate(t *testing.T) {
	t.Parallel()
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedCreate, nil))
	replicas := []*Recorder{NewRecorder(f.pool, f.ep, WithRecentEvents(0)), NewRecorder(f.pool, f.ep, WithRecentEvents(0))}
	for i := range 20 {
		key := fmt.Sprintf("o-%d", i)
		// The order fails; then the first version of evt- (a refund, ignored), then its
		// variants, concurrently.
		f.record(ev("first-"+key, "payment_intent.payment_failed", key, 500, t0))
		first := ev("evt-"+key, "charge.refunded", key, 500, t0.Add(time.Second))
		variants := []Event{
			ev("evt-"+key, "charge.refunded", key, 500, t0.Add(time.Hour)),
			ev("evt-"+key, "payment_intent.succeeded", key, 500, t0.Add(2*time.Second)),
			ev("evt-"+key, "payment_intent.succeeded", key+"-other", 500, t0.Add(2*time.Second)),
			ev("evt-"+key, "customer.updated", "", 0, time.Time{}),
		}
		f.record(first) // ignored: a failed order is never refunded
		var wg sync.WaitGroup
		for j, e := range variants {
			wg.Go(func() {
				if _, err := replicas[j%2].Record(f.ctx, e); err != nil {
					t.Errorf("%s: %v", e.ID, err)
				}
			})
		}
		wg.Wait()
	}
	if got := f.count(`SELECT count(*) FROM hk.webhook_events WHERE event_id LIKE 'evt-%'`); got != 20 {
		t.Errorf("%d receipts for 20 event ids", got)
	}
	if got := f.count(`SELECT count(*) FROM hk.entities WHERE entity_key LIKE '%-other'`); got != 0 {
		t.Errorf("%d entities created by copies with another entity key", got)
	}
	if got := f.count(`SELECT count(*) FROM hk.entities WHERE state <> 'failed'`); got != 0 {
		t.Errorf("%d entities moved by a copy (the first version could not apply: failed orders are never refunded or paid)", got)
	}
	if got := f.rows.Outbox(t); got != 0 {
		t.Errorf("%d outbox rows written by copies", got)
	}
}
