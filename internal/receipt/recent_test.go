package receipt

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
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
