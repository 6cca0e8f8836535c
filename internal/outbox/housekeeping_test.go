package outbox

import (
	"context"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// With Options.Housekeeping set, claims that only the start or the poll timer asked for
// run on the housekeeping pool and woken claims on the dispatcher's own. The
// housekeeping pool here points at a closed port: a row waiting at start is not
// delivered however often the timer polls, and a Wake (what a commit that wrote outbox
// rows sends) delivers it through the dispatcher's own pool. In a receiver pool that
// keeps a busy endpoint's deliveries off the sessions its quiet neighbours share, and
// keeps a quiet endpoint's polls off sessions of its own.
func TestTimerClaimsUseTheHousekeepingPoolAndWokenClaimsTheOwn(t *testing.T) {
	db := newTestDB(t)
	ids := db.insert(t, outboxRow{Entity: "ord_1", Seq: 0})
	s := newSink(t, nil)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dead, err := store.NewPool(ctx, "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=1", store.PoolOptions{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dead.Close)
	// A Listener that never connects: no NOTIFY, and none of the wake-ups it sends
	// when it (re)connects, so only the timer and Wake ask for claims.
	silent, err := NewListener(db.url, db.options(t, "").Logger)
	if err != nil {
		t.Fatal(err)
	}
	opts := db.options(t, s.srv.URL)
	opts.Housekeeping, opts.Listener = dead, silent
	d, _ := start(t, db.pool, opts)

	// 20 poll intervals (50 ms each) on the dead housekeeping pool: nothing delivered.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if n := s.count(); n != 0 {
			t.Fatalf("%d deliveries from timer claims, which should run on the (dead) housekeeping pool", n)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}

	d.Wake()
	testsupport.Eventually(t, 10*time.Second, 20*time.Millisecond, "the woken claim to deliver the row", func() bool {
		return db.state(t, ids[0]).Delivered && s.count() == 1
	})
}
