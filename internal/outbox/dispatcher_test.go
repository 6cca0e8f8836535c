package outbox

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/metrics"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// Three dispatchers race over 1,000 rows of 50 entities: every row arrives, exactly
// once (no lease expires here), in order per entity, never two of one entity at once.
func TestRacingDispatchersDeliverOncePerEntityInOrder(t *testing.T) {
	db := newTestDB(t)
	const entities, perEntity = 50, 20
	rows := db.insertInterleaved(t, entities, perEntity)
	// A little random latency so that, without the ordering rule, rows of one entity
	// would overtake each other.
	s := newSink(t, func(a arrival, _ int) int {
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		return http.StatusOK
	})
	for range 3 {
		opts := db.options(t, s.srv.URL)
		// More slots than entities, so the claim query alone must keep an entity's
		// rows apart.
		opts.Concurrency = 32
		start(t, db.pool, opts)
	}
	testsupport.Eventually(t, 60*time.Second, 10*time.Millisecond, "all rows delivered", func() bool {
		return db.count(t, "delivered_at IS NOT NULL") == len(rows)
	})

	got := map[string][]int{}
	keys := map[string]int{}
	for _, a := range s.snapshot() {
		got[a.Entity] = append(got[a.Entity], a.Seq)
		keys[a.Key]++
	}
	for _, r := range rows {
		if keys[r.key()] != 1 {
			t.Errorf("row %s arrived %d times, want 1", r.key(), keys[r.key()])
		}
	}
	for e, seqs := range got {
		for i, seq := range seqs {
			if seq != i {
				t.Errorf("entity %s arrived in order %v, want 0..%d", e, seqs, perEntity-1)
				break
			}
		}
	}
	if len(got) != entities {
		t.Errorf("deliveries for %d entities, want %d", len(got), entities)
	}
	if len(s.overlap) > 0 {
		t.Errorf("entities with two deliveries in flight at once: %v", s.overlap)
	}
	if n := db.count(t, "attempts <> 1 OR lease_until IS NOT NULL"); n != 0 {
		t.Errorf("%d rows with attempts != 1 or a lease left behind", n)
	}
}

// Chaos on the delivery side: two dispatchers race; the sink receives a request and
// then answers too late (the dispatcher's attempt times out after the sink got it) for
// the first attempt of every third row, and answers 503 to the first attempt of every
// fifth; one dispatcher is stopped while requests hang in the sink. Every row must
// reach the sink, every repeat must carry the same Idempotency-Key (and envelope id),
// and one entity's rows must be first received in id order.
func TestDispatchersUnderTimeoutsAndAStopKeepKeysAndOrder(t *testing.T) {
	db := newTestDB(t)
	const entities, perEntity = 12, 8
	rows := db.insertInterleaved(t, entities, perEntity)

	var mu sync.Mutex
	attempts := map[string]int{}
	var s *sink
	s = newSink(t, func(a arrival, _ int) int {
		mu.Lock()
		attempts[a.Key]++
		n := attempts[a.Key]
		mu.Unlock()
		switch {
		case n == 1 && a.Seq%3 == 1:
			// Received, processed, answer lost: longer than the attempt timeout.
			select {
			case <-time.After(700 * time.Millisecond):
			case <-s.release:
			}
			return http.StatusOK
		case n == 1 && a.Seq%5 == 2:
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	opts := db.options(t, s.srv.URL)
	opts.Timeout = 300 * time.Millisecond
	opts.Concurrency = 4
	opts.SinkDownAfter = 1000 // the injected failures are not an outage
	opts.ShutdownGrace = 100 * time.Millisecond
	_, stopFirst := start(t, db.pool, opts)
	start(t, db.pool, db.options(t, s.srv.URL))

	testsupport.Eventually(t, 30*time.Second, 10*time.Millisecond, "some rows delivered", func() bool {
		return db.count(t, "delivered_at IS NOT NULL") > len(rows)/4
	})
	stopFirst()
	testsupport.Eventually(t, 60*time.Second, 20*time.Millisecond, "all rows delivered", func() bool {
		return db.count(t, "delivered_at IS NOT NULL") == len(rows)
	})

	checkArrivals(t, s.snapshot(), len(rows))
	// s.overlap is not checked: a sink that goes on processing a request after the
	// dispatcher gave up on it overlaps with the retry by construction.
}

// A sink that fails three times then succeeds gets exactly four attempts; with the
// jitter pinned to its ceiling the gaps grow strictly (about 50, 100, 200 ms).
func TestRetryBackoffGrows(t *testing.T) {
	for _, tc := range []struct {
		name   string
		random func() float64
	}{
		{"ceiling", func() float64 { return 0.999 }},
		{"random", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newTestDB(t)
			ids := db.insert(t, outboxRow{Entity: "ord_1", Seq: 0})
			s := newSink(t, func(_ arrival, n int) int {
				if n <= 3 {
					return http.StatusServiceUnavailable
				}
				return http.StatusOK
			})
			opts := db.options(t, s.srv.URL)
			opts.BackoffInitial, opts.BackoffMax = 50*time.Millisecond, 150*time.Millisecond
			opts.MaxAttempts = 10
			opts.PollInterval = 5 * time.Second // retries must wake the loop themselves
			opts.Random = tc.random
			start(t, db.pool, opts)
			testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "delivery", func() bool { return db.state(t, ids[0]).Delivered })

			arr := s.snapshot()
			if len(arr) != 4 {
				t.Fatalf("%d attempts, want 4", len(arr))
			}
			ceilings := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond}
			var gaps []time.Duration
			for i := 1; i < len(arr); i++ {
				gap := arr[i].At.Sub(arr[i-1].At)
				gaps = append(gaps, gap)
				// The gap is the delay plus recording and claiming; the delay never exceeds
				// the ceiling of its attempt.
				if gap > ceilings[i-1]+time.Second {
					t.Errorf("gap %d = %s, more than ceiling %s (+1s slack)", i, gap, ceilings[i-1])
				}
				if arr[i].Key != arr[0].Key {
					t.Errorf("attempt %d key %q, want %q", i+1, arr[i].Key, arr[0].Key)
				}
			}
			if tc.random != nil {
				// With the jitter pinned at its ceiling, each gap is at least its growing
				// delay (50, 100, 150 ms): a backoff that did not grow fails the third.
				// Gaps are not compared with each other: on a loaded machine recording an
				// attempt can take longer than the 50 ms the delays differ by.
				for i, g := range gaps {
					if g < ceilings[i]*99/100 {
						t.Errorf("gap %d = %s, below the pinned delay %s (gaps %v)", i+1, g, ceilings[i], gaps)
					}
				}
			}
			if st := db.state(t, ids[0]); st.Attempts != 4 || st.LastError != "sink answered 503" {
				t.Errorf("row: %+v", st)
			}
		})
	}
}

// An always-failing sink dead-letters the row after maxAttempts; a dry-run replay changes
// nothing; a replay re-drives it with the same key once the sink recovers; a second
// replay is a no-op.
func TestDeadLetterAndReplay(t *testing.T) {
	db := newTestDB(t)
	ids := db.insert(t, outboxRow{Entity: "ord_1", Seq: 0}, outboxRow{Entity: "ord_2", Seq: 0})
	var mu sync.Mutex
	healthy := false
	s := newSink(t, func(a arrival, _ int) int {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case healthy:
			return http.StatusOK
		case a.Entity == "ord_2":
			return http.StatusGone
		default:
			return http.StatusInternalServerError
		}
	})
	opts := db.options(t, s.srv.URL)
	opts.MaxAttempts = 3
	d, _ := start(t, db.pool, opts)
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "dead letters", func() bool { return db.count(t, "dead_at IS NOT NULL") == 2 })

	if st := db.state(t, ids[0]); st.Attempts != 3 || st.LastError != "sink answered 500" || st.Delivered || st.Leased {
		t.Errorf("dead row after maxAttempts: %+v", st)
	}
	if st := db.state(t, ids[1]); st.Attempts != 1 || st.LastError != "sink answered 410" {
		t.Errorf("row answered 410: %+v, want dead after 1 attempt", st)
	}
	if n := s.count(); n != 4 {
		t.Errorf("sink saw %d requests, want 3 + 1", n)
	}
	testsupport.Eventually(t, 5*time.Second, 10*time.Millisecond, "backlog gauges", func() bool {
		b, err := d.Backlog(context.Background())
		return err == nil && b.Dead == 2 && b.Pending == 0 &&
			testutil.ToFloat64(metrics.OutboxDead.WithLabelValues(testEndpoint)) == 2 &&
			testutil.ToFloat64(metrics.OutboxBacklog.WithLabelValues(testEndpoint)) == 0
	})

	ctx := context.Background()
	sel := Selection{Endpoint: testEndpoint}
	var listed []ReplayItem
	before := db.state(t, ids[0])
	rep, err := RedriveDeadLetters(ctx, db.pool, db.tables, sel, ReplayOptions{DryRun: true, Each: func(it ReplayItem) { listed = append(listed, it) }})
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if rep.Selected != 2 || rep.Replayed != 0 || len(listed) != 2 || listed[0].Key != (outboxRow{Entity: "ord_1"}).key() {
		t.Errorf("dry run report %+v, listed %+v", rep, listed)
	}
	if after := db.state(t, ids[0]); after != before {
		t.Errorf("dry run changed the row: %+v -> %+v", before, after)
	}

	mu.Lock()
	healthy = true
	mu.Unlock()
	var progress []string
	rep, err = RedriveDeadLetters(ctx, db.pool, db.tables, Selection{Endpoint: testEndpoint, IDs: []int64{ids[0]}},
		ReplayOptions{Progress: func(done, total int) { progress = append(progress, fmt.Sprintf("%d/%d", done, total)) }})
	if err != nil || rep.Selected != 1 || rep.Replayed != 1 {
		t.Fatalf("replay by id: %+v, %v", rep, err)
	}
	if strings.Join(progress, ",") != "1/1" {
		t.Errorf("progress %v", progress)
	}
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "re-driven row delivered", func() bool { return db.state(t, ids[0]).Delivered })
	if st := db.state(t, ids[1]); !st.Dead {
		t.Errorf("row outside the selection was re-driven: %+v", st)
	}
	arr := s.snapshot()
	if last := arr[len(arr)-1]; last.Key != (outboxRow{Entity: "ord_1"}).key() {
		t.Errorf("re-delivery key %q", last.Key)
	}

	// The rest by time range, then again: nothing left.
	rep, err = RedriveDeadLetters(ctx, db.pool, db.tables, Selection{Endpoint: testEndpoint, Since: time.Now().Add(-time.Hour), Until: time.Now().Add(time.Minute)}, ReplayOptions{})
	if err != nil || rep.Replayed != 1 {
		t.Fatalf("replay by time: %+v, %v", rep, err)
	}
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "second row delivered", func() bool { return db.state(t, ids[1]).Delivered })
	n := s.count()
	rep, err = RedriveDeadLetters(ctx, db.pool, db.tables, sel, ReplayOptions{})
	if err != nil || rep.Selected != 0 || rep.Replayed != 0 {
		t.Errorf("second replay: %+v, %v; want a no-op", rep, err)
	}
	if s.count() != n {
		t.Errorf("second replay caused deliveries")
	}
}

// An entity whose delivery stalls holds back only its own later rows.
func TestSlowEntityDoesNotBlockOthers(t *testing.T) {
	db := newTestDB(t)
	ids := db.insert(t,
		outboxRow{Entity: "A", Seq: 0}, outboxRow{Entity: "A", Seq: 1},
		outboxRow{Entity: "B", Seq: 0}, outboxRow{Entity: "B", Seq: 1}, outboxRow{Entity: "B", Seq: 2},
		outboxRow{Entity: "C", Seq: 0})
	unstall := make(chan struct{})
	var s *sink
	s = newSink(t, func(a arrival, _ int) int {
		if a.Entity == "A" {
			s.block(unstall)
		}
		return http.StatusOK
	})
	start(t, db.pool, db.options(t, s.srv.URL))
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "B and C delivered while A stalls", func() bool {
		return db.count(t, "entity_key IN ('B', 'C') AND delivered_at IS NOT NULL") == 4
	})
	if st := db.state(t, ids[1]); st.Attempts != 0 {
		t.Errorf("A's second row was claimed while its first was in flight: %+v", st)
	}
	close(unstall)
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "A delivered", func() bool { return db.count(t, "delivered_at IS NOT NULL") == len(ids) })
	var order []string
	for _, a := range s.snapshot() {
		if a.Entity == "A" {
			order = append(order, a.Key)
		}
	}
	if len(order) != 2 || order[0] != (outboxRow{Entity: "A", Seq: 0}).key() {
		t.Errorf("A arrived as %v", order)
	}
}

// With PerEntity ordering off, an entity's rows go out concurrently.
func TestOrderingNoneDoesNotSerialise(t *testing.T) {
	db := newTestDB(t)
	db.insert(t, outboxRow{Entity: "A", Seq: 0}, outboxRow{Entity: "A", Seq: 1}, outboxRow{Entity: "A", Seq: 2})
	unstall := make(chan struct{})
	s := newBlockingSink(t, unstall)
	opts := db.options(t, s.srv.URL)
	opts.Ordering = v1alpha1.OrderingNone
	start(t, db.pool, opts)
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "three A rows in flight at once", func() bool { return s.count() == 3 })
	close(unstall)
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "delivered", func() bool { return db.count(t, "delivered_at IS NOT NULL") == 3 })
}

// A Notifier's NOTIFY, sent after the insert commits, wakes a dispatcher long before its
// 30 s poll; the insert alone (no trigger since migration 00003) would not.
func TestNotifyWakesBeforePoll(t *testing.T) {
	db := newTestDB(t)
	startPollingRarely(t, db)
	notifier := NewNotifier(db.pool, testEndpoint, logr.Discard())
	run := testsupport.Run(t, context.Background(), "notifier", 30*time.Second, notifier.Run)
	t.Cleanup(func() {
		if err := run.Stop(t); err != nil {
			t.Errorf("notifier Run: %v", err)
		}
	})
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "LISTEN session", func() bool {
		n, _ := listenSessions(t, db)
		return n == 1
	})
	for seq := range 3 {
		ids := db.insert(t, outboxRow{Entity: "ord_1", Seq: seq})
		begin := time.Now()
		notifier.Notify()
		notifier.Notify() // folds into the first
		testsupport.Eventually(t, beforePoll, 10*time.Millisecond, "delivery after the NOTIFY", func() bool { return db.state(t, ids[0]).Delivered })
		t.Logf("insert %d delivered after %s", seq, time.Since(begin))
	}
}

// startPollingRarely runs a dispatcher, delivering to a sink that answers 200, whose
// poll interval (30 s) no test waits out: what it delivers sooner, a wake-up made it
// claim.
func startPollingRarely(t *testing.T, db *testDB) *Dispatcher {
	t.Helper()
	opts := db.options(t, newSink(t, nil).srv.URL)
	opts.PollInterval = 30 * time.Second
	d, _ := start(t, db.pool, opts)
	return d
}

// listenSessions counts the sessions LISTENing on NotifyChannel in the test database,
// and returns the newest one's pid (0 if none).
func listenSessions(t *testing.T, db *testDB) (n, newest int) {
	t.Helper()
	err := db.pool.QueryRow(context.Background(), `SELECT count(*), COALESCE(max(pid), 0) FROM pg_stat_activity
		WHERE datname = current_database() AND query = 'LISTEN `+NotifyChannel+`'`).Scan(&n, &newest)
	if err != nil {
		t.Fatalf("find the LISTEN session: %v", err)
	}
	return n, newest
}

// beforePoll bounds a woken delivery in the tests whose poll interval is 30 s: only a
// wake-up meets it, and it leaves room for the hold-back after a claim that found
// nothing (ten times that claim's time), which reaches seconds on a loaded machine. (A
// 2 s bound failed once under a full make test: most likely the wake-up after the LISTEN
// reconnect claimed before the test's insert, and the NOTIFY then waited out the
// hold-back.)
const beforePoll = 10 * time.Second

// Wake, the in-process path the receiver takes after a commit, needs no NOTIFY at all.
func TestWakeBeforePoll(t *testing.T) {
	db := newTestDB(t)
	d := startPollingRarely(t, db)
	for seq := range 3 {
		ids := db.insert(t, outboxRow{Entity: "ord_1", Seq: seq})
		d.Wake()
		testsupport.Eventually(t, beforePoll, 10*time.Millisecond, "delivery after Wake", func() bool { return db.state(t, ids[0]).Delivered })
	}
}

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

// A LISTEN connection that the server drops is re-established, and NOTIFY works again.
func TestListenReconnects(t *testing.T) {
	db := newTestDB(t)
	startPollingRarely(t, db)
	var first int
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "LISTEN session", func() bool {
		_, first = listenSessions(t, db)
		return first != 0
	})
	if _, err := db.pool.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, first); err != nil {
		t.Fatalf("terminate the LISTEN session: %v", err)
	}
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "a new LISTEN session", func() bool {
		_, pid := listenSessions(t, db)
		return pid != 0 && pid != first
	})
	ids := db.insert(t, outboxRow{Entity: "ord_1", Seq: 0})
	if err := Notify(context.Background(), db.pool, testEndpoint); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, beforePoll, 10*time.Millisecond, "delivery after the NOTIFY", func() bool { return db.state(t, ids[0]).Delivered })
}

// A late worker's result is fenced out by the attempt number of a newer claim.
func TestFenceRejectsStaleResult(t *testing.T) {
	f := claimTwice(t, 10)
	db, first, second := f.db, f.late, f.newer
	if second.Attempt != 2 {
		t.Fatalf("second claim attempt %d, want 2", second.Attempt)
	}
	if again, err := f.claim(10); err != nil || len(again) != 0 {
		t.Fatalf("a leased row was claimed: %+v, %v", again, err)
	}
	acc, err := f.record(rowResult{Attempt: 2, Lease: second.Lease, Result: resultRetry, Delay: time.Hour, Error: "newer"})
	if err != nil || len(acc) != 1 {
		t.Fatalf("record newer result: %+v, %v", acc, err)
	}
	for _, stale := range []result{resultDelivered, resultDead, resultUnsent, resultRetry} {
		acc, err = f.record(rowResult{Attempt: 1, Lease: first.Lease, Result: stale, Error: "stale"})
		if err != nil || len(acc) != 0 {
			t.Errorf("stale %s result accepted: %+v, %v", stale, acc, err)
		}
	}
	st := db.state(t, f.id)
	if st.Delivered || st.Dead || st.Attempts != 2 || st.LastError != "newer" || time.Until(st.AvailableAt) < 50*time.Minute {
		t.Errorf("row after stale results: %+v", st)
	}
	// A delivered row accepts no later result, not even from its own attempt.
	if _, err := db.pool.Exec(context.Background(), fmt.Sprintf(`UPDATE %s SET available_at = now(), lease_until = NULL WHERE id = $1`, db.tables.Outbox), f.id); err != nil {
		t.Fatal(err)
	}
	third, err := f.claim(10)
	if err != nil || len(third) != 1 || third[0].Attempt != 3 {
		t.Fatalf("third claim: %+v, %v", third, err)
	}
	if acc, err = f.record(rowResult{Attempt: 3, Lease: third[0].Lease, Result: resultDelivered}); err != nil || len(acc) != 1 {
		t.Fatalf("record delivery: %+v, %v", acc, err)
	}
	if acc, err = f.record(rowResult{Attempt: 3, Lease: third[0].Lease, Result: resultDead}); err != nil || len(acc) != 0 {
		t.Errorf("result after delivery accepted: %+v, %v", acc, err)
	}
}

// Shutdown stops claiming, waits (bounded) for the delivery in flight, then releases its
// lease so another dispatcher can retry at once; the attempt still counts.
func TestShutdownReleasesLeases(t *testing.T) {
	db := newTestDB(t)
	ids := db.insert(t, outboxRow{Entity: "ord_1", Seq: 0}, outboxRow{Entity: "ord_1", Seq: 1})
	unstall := make(chan struct{})
	s := newBlockingSink(t, unstall)
	opts := db.options(t, s.srv.URL)
	opts.ShutdownGrace = 300 * time.Millisecond
	_, stop := start(t, db.pool, opts)
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "request in flight", func() bool { return s.count() == 1 })
	begin := time.Now()
	stop()
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("shutdown took %s with a 300ms grace", took)
	}
	if st := db.state(t, ids[0]); st.Leased || st.Attempts != 1 || st.Delivered {
		t.Errorf("in-flight row after shutdown: %+v, want lease released, 1 attempt", st)
	}
	if st := db.state(t, ids[1]); st.Attempts != 0 || st.Leased {
		t.Errorf("queued row after shutdown: %+v", st)
	}
	close(unstall)
}

// Options that cannot work fail Run before anything is claimed.
func TestRunRejectsBadOptions(t *testing.T) {
	base := Options{Endpoint: testEndpoint, Tables: store.TablesIn(testSchema), SinkURL: "http://127.0.0.1:1/", Logger: logr.Discard()}
	for name, mutate := range map[string]func(*Options){
		"no endpoint":  func(o *Options) { o.Endpoint = "" },
		"relative url": func(o *Options) { o.SinkURL = "/events" },
		"ftp url":      func(o *Options) { o.SinkURL = "ftp://x/" },
		"bad key":      func(o *Options) { o.SigningKey = "whsec_***" },
		"bad ordering": func(o *Options) { o.Ordering = "Random" },
		"short lease":  func(o *Options) { o.Timeout, o.Lease = 10*time.Second, 11*time.Second },
	} {
		o := base
		mutate(&o)
		if err := NewDispatcher(nil, o).Run(context.Background()); err == nil {
			t.Errorf("%s: Run accepted the options", name)
		} else if o.SigningKey != "" && strings.Contains(err.Error(), "***") {
			t.Errorf("%s: error echoes the key: %v", name, err)
		}
	}
}

func TestBackoffFullJitterBounds(t *testing.T) {
	d := NewDispatcher(nil, Options{BackoffInitial: 100 * time.Millisecond, BackoffMax: time.Second, Random: func() float64 { return 0.999999 }})
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		got := d.backoff(i+1, 0)
		if got > w*time.Millisecond || got < w*time.Millisecond*99/100 {
			t.Errorf("attempt %d: %s, want just under %dms", i+1, got, w)
		}
	}
	if got := d.backoff(200, 0); got > time.Second {
		t.Errorf("attempt 200 overflowed: %s", got)
	}
	d.opts.Random = func() float64 { return 0 }
	if got := d.backoff(3, 700*time.Millisecond); got != 700*time.Millisecond {
		t.Errorf("Retry-After not honoured: %s", got)
	}
	// The sink's Retry-After is honoured beyond backoff.max: it said when it can take
	// the row (parseRetryAfter caps it at maxRetryAfter).
	if got := d.backoff(3, time.Hour); got != time.Hour {
		t.Errorf("Retry-After longer than backoff.max: %s, want the hour the sink asked for", got)
	}
}

// Child-process dispatcher for TestKilledDispatcherProcess; it runs only when re-executed
// with the env below, and until it is killed.
const childEnv = "HOOKKEEPER_OUTBOX_TEST_CHILD"

func TestChildDispatcherProcess(t *testing.T) {
	if os.Getenv(childEnv) != "1" {
		t.Skip("runs only as the child process of TestKilledDispatcherProcess")
	}
	runChildDispatcher(t, Options{Concurrency: 4, Lease: 5 * time.Second, Timeout: 3 * time.Second})
}

// A dispatcher process killed with SIGKILL mid-delivery leaves its rows leased; a new
// dispatcher re-delivers them after the lease with the same Idempotency-Key.
func TestKilledDispatcherProcess(t *testing.T) {
	db := newTestDB(t)
	rows := []outboxRow{{Entity: "A", Seq: 0}, {Entity: "B", Seq: 0}, {Entity: "C", Seq: 0}}
	ids := db.insert(t, rows...)
	var mu sync.Mutex
	blocking := true
	unstall := make(chan struct{})
	var s *sink
	s = newSink(t, func(arrival, int) int {
		mu.Lock()
		b := blocking
		mu.Unlock()
		if b {
			s.block(unstall)
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})

	kill := startChildDispatcher(t, db, "TestChildDispatcherProcess", s.srv.URL)
	testsupport.Eventually(t, 20*time.Second, 10*time.Millisecond, "the child's requests reach the sink", func() bool { return s.count() == len(rows) })
	kill()
	for _, id := range ids {
		if st := db.state(t, id); !st.Leased || st.Attempts != 1 || st.Delivered {
			t.Fatalf("row %d after the kill: %+v, want leased after 1 attempt", id, st)
		}
	}
	mu.Lock()
	blocking = false
	mu.Unlock()
	close(unstall)

	start(t, db.pool, db.options(t, s.srv.URL))
	testsupport.Eventually(t, 20*time.Second, 10*time.Millisecond, "re-delivery after the lease", func() bool {
		return db.count(t, "delivered_at IS NOT NULL") == len(rows)
	})
	byKey := map[string]int{}
	first := map[string]time.Time{}
	for _, a := range s.snapshot() {
		byKey[a.Key]++
		if f, ok := first[a.Key]; !ok {
			first[a.Key] = a.At
		} else if gap := a.At.Sub(f); gap < 4500*time.Millisecond {
			t.Errorf("key %s re-delivered %s after the killed attempt, before its 5s lease ended", a.Key, gap)
		}
	}
	for i, r := range rows {
		if byKey[r.key()] != 2 {
			t.Errorf("key %s arrived %d times, want 2 (killed attempt + re-delivery)", r.key(), byKey[r.key()])
		}
		if st := db.state(t, ids[i]); st.Attempts != 2 {
			t.Errorf("row %d attempts %d, want 2", ids[i], st.Attempts)
		}
	}
}
