package receipt

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

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
