package outbox

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// docs/concepts.md: "spec.delivery.ordering: PerEntity (the default) delivers one
// entity's outbox rows one at a time, in order". A dead letter re-driven while a later
// row of the same entity is being delivered is the entity's first pending row again, so
// the claim's head check alone would pass while the later row is leased and in flight:
// the re-drive holds the row until that lease ends, and the sink never has two requests
// of one entity at once.
func TestRedriveWhileLaterRowInFlightKeepsPerEntityOneAtATime(t *testing.T) {
	db := newTestDB(t)
	ids := db.insert(t, outboxRow{Entity: "ord_1", Seq: 0}, outboxRow{Entity: "ord_1", Seq: 1})
	unstall := make(chan struct{})
	var s *sink
	s = newSink(t, func(a arrival, n int) int {
		switch {
		case a.Seq == 0 && n == 1:
			return http.StatusGone // the first row dies at once
		case a.Seq == 1:
			s.block(unstall) // the second row is in flight until the test lets it go
		}
		return http.StatusOK
	})
	opts := db.options(t, s.srv.URL)
	opts.Ordering = v1alpha1.OrderingPerEntity
	start(t, db.pool, opts)

	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "first row dead, second in flight", func() bool {
		return db.state(t, ids[0]).Dead && s.count() == 2
	})
	rep, err := RedriveDeadLetters(context.Background(), db.pool, db.tables, Selection{Endpoint: testEndpoint}, ReplayOptions{})
	if err != nil || rep.Replayed != 1 {
		t.Fatalf("redrive: %+v, %v", rep, err)
	}
	// Give the dispatcher (poll 50 ms, woken by the redrive's NOTIFY) time to claim the
	// re-driven row while the second is still held by the sink.
	err = testsupport.Poll(context.Background(), 2*time.Second, 20*time.Millisecond, func() error {
		if s.count() > 2 {
			return nil
		}
		return errors.New("not re-sent yet")
	})
	close(unstall)
	if err == nil {
		s.mu.Lock()
		overlap := append([]string(nil), s.overlap...)
		s.mu.Unlock()
		t.Errorf("the re-driven row of ord_1 was sent while ord_1's next row was in flight (entities with two requests in flight: %v)", overlap)
	}
}

// The record statement fences a result on the claim it belongs to, so a late worker
// cannot overwrite a newer claim's result. Re-driving a dead letter resets attempts to
// 0, so attempt numbers are handed out again: a late result of the row's first life
// carries the same attempt number as the first claim of its second life. Were it
// accepted, it would clear that claim's lease while its POST runs, and another
// dispatcher would claim and post the same row concurrently. The fence is the claim's
// lease_until, which never repeats.
func TestRedriveKeepsTheFenceMonotonic(t *testing.T) {
	// Dispatcher A claims attempt 1; its lease runs out before it records. Dispatcher B
	// claims attempt 2 and the sink answers 410: dead.
	f := claimTwice(t, 1)
	a, b := f.late, f.newer
	if acc, err := f.record(rowResult{Attempt: b.Attempt, Lease: b.Lease, Result: resultDead, Error: "sink answered 410"}); err != nil || len(acc) != 1 {
		t.Fatalf("record B: %+v, %v", acc, err)
	}
	// An operator re-drives it; dispatcher C claims it and is posting.
	if _, err := RedriveDeadLetters(context.Background(), f.db.pool, f.db.tables, Selection{Endpoint: testEndpoint}, ReplayOptions{}); err != nil {
		t.Fatalf("redrive: %v", err)
	}
	c, err := f.claim(1)
	if err != nil || len(c) != 1 {
		t.Fatalf("claim C: %+v, %v", c, err)
	}
	// A finally records its old result.
	acc, err := f.record(rowResult{Attempt: a.Attempt, Lease: a.Lease, Result: resultAbandoned})
	if err != nil {
		t.Fatalf("record A: %v", err)
	}
	if len(acc) != 0 {
		t.Errorf("A's result from before the redrive (attempt %d) was accepted over C's claim (attempt %d)", a.Attempt, c[0].Attempt)
	}
	if d, err := f.claim(1); err != nil || len(d) != 0 {
		t.Errorf("the row was claimed again while C's lease runs: %+v, %v", d, err)
	}
}
