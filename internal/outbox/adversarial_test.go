package outbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// docs/concepts.md: a failed row is retried "never before the sink's Retry-After". A
// sink that rate-limits answers one row 429 with Retry-After: 3, which (SinkDownAfter
// 1) takes the sink down; the probe then takes another row, which the sink accepts, and
// the outage ends. Ending the outage makes the rows held back by their own backoff due
// at once, but the rate-limited row must still wait out the 3 s its sink asked for.
func TestAdversarialRetryAfterOutlivesTheOutageEnd(t *testing.T) {
	db := newTestDB(t)
	limited := db.insert(t, outboxRow{Entity: "limited", Seq: 0})[0]
	limitedKey := outboxRow{Entity: "limited", Seq: 0}.key()
	const retryAfter = 3 * time.Second
	var mu sync.Mutex
	var at []time.Time // arrivals of the rate-limited row
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(HeaderIdempotencyKey) != limitedKey {
			return // 200
		}
		mu.Lock()
		at = append(at, time.Now())
		first := len(at) == 1
		mu.Unlock()
		if first {
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(s.Close)
	// A row whose own backoff (an hour) ran into the outage: its end makes it due at once.
	backedOff := db.insert(t, outboxRow{Entity: "backedoff", Seq: 0})[0]
	if _, err := db.pool.Exec(context.Background(), fmt.Sprintf(`UPDATE %s SET attempts = 1,
		available_at = now() + interval '1 hour', last_error = 'sink answered 503' WHERE id = $1`, db.tables.Outbox), backedOff); err != nil {
		t.Fatal(err)
	}
	opts := db.probingOptions(t, s.URL)
	opts.SinkDownAfter = 1
	start(t, db.pool, opts)
	db.awaitSinkHealth(t, "the 429 takes the sink down", func(h SinkHealth) bool { return h.Down })
	other := db.insert(t, outboxRow{Entity: "other", Seq: 0})[0]
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "the probe delivers the other row", func() bool {
		return db.state(t, other).Delivered
	})
	db.awaitSinkHealth(t, "the outage ends", func(h SinkHealth) bool { return !h.Down && h.RecoveredAt != nil })
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "the backed-off row made due and delivered", func() bool {
		return db.state(t, backedOff).Delivered
	})
	testsupport.Eventually(t, 15*time.Second, 10*time.Millisecond, "the rate-limited row delivered", func() bool {
		return db.state(t, limited).Delivered
	})
	mu.Lock()
	defer mu.Unlock()
	if len(at) != 2 {
		t.Fatalf("the rate-limited row was sent %d times, want 2", len(at))
	}
	// The row's due time is PostgreSQL's now() (the wall clock) and the gap is Go's
	// monotonic clock; a wall clock stepped by a few milliseconds between the two
	// arrivals (seen once: 2.989 s) must not fail the test. The defect this catches
	// re-sent the row about 30 ms after its 429.
	const clockSlack = 100 * time.Millisecond
	if gap := at[1].Sub(at[0]); gap < retryAfter-clockSlack {
		t.Errorf("the rate-limited row was re-sent %s after its 429 with Retry-After: 3, when the outage ended", gap.Round(time.Millisecond))
	}
}

// startChildDispatcher runs the child test named test (TestChildDispatcherProcess of
// dispatcher_test.go: lease 5 s, timeout 3 s, concurrency 4; or
// TestAdversarialChildDispatcher) in a process of its own against sinkURL, and returns
// a function that kills it with SIGKILL and waits for it to exit.
func startChildDispatcher(t *testing.T, db *testDB, test, sinkURL string) (kill func()) {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v")
	child.Env = append(os.Environ(), childEnv+"=1", adversarialChildEnv+"=1",
		"CHILD_DATABASE_URL="+db.url, "CHILD_SINK_URL="+sinkURL)
	out := &strings.Builder{}
	child.Stdout, child.Stderr = out, out
	if err := child.Start(); err != nil {
		t.Fatalf("start child: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = child.Wait(); close(exited) }()
	var once sync.Once
	kill = func() {
		once.Do(func() {
			_ = child.Process.Signal(syscall.SIGKILL)
			<-exited
		})
	}
	t.Cleanup(func() {
		kill()
		if t.Failed() {
			t.Logf("child output:\n%s", out)
		}
	})
	return kill
}

// lockingSink answers a row's first request 2xx only after it has locked the row in a
// transaction of its own, so that the dispatcher's record of that 2xx waits for the lock
// until the test releases it (or the test ends); later requests of the row it answers
// 2xx at once.
type lockingSink struct {
	*sink
	db *testDB

	mu    sync.Mutex
	locks map[string]pgx.Tx // by row (dedupe key); nil once released
	errs  []error
}

func newLockingSink(t *testing.T, db *testDB) *lockingSink {
	s := &lockingSink{db: db, locks: map[string]pgx.Tx{}}
	s.sink = newSink(t, s.lock)
	t.Cleanup(func() { _ = s.release() })
	return s
}

func (s *lockingSink) lock(a arrival, _ int) int {
	ctx := context.Background()
	s.mu.Lock()
	defer s.mu.Unlock()
	row := a.Envelope.ID
	if _, seen := s.locks[row]; seen {
		return http.StatusOK
	}
	tx, err := s.db.pool.Begin(ctx)
	if err == nil {
		_, err = tx.Exec(ctx, fmt.Sprintf(`SELECT 1 FROM %s WHERE dedupe_key = $1 FOR UPDATE`, s.db.tables.Outbox), row)
	}
	if err != nil {
		s.errs = append(s.errs, err)
		return http.StatusInternalServerError
	}
	s.locks[row] = tx
	return http.StatusOK
}

// release rolls back every lock the sink holds.
func (s *lockingSink) release() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for row, tx := range s.locks {
		if tx == nil {
			continue
		}
		if err := tx.Rollback(context.Background()); err != nil {
			errs = append(errs, fmt.Errorf("release the lock of %s: %w", row, err))
		}
		s.locks[row] = nil
	}
	return errors.Join(errs...)
}

// waitingRecords selects, from pg_stat_activity, the dispatcher's record statements in
// the test database that wait for a row lock.
const waitingRecords = `FROM pg_stat_activity WHERE datname = current_database()
	AND wait_event_type = 'Lock' AND query LIKE '%WITH async AS%sink AS (%'`

// awaitRecordWaiting waits until the sink has answered each of rows rows 2xx and a record
// statement among waiting (a FROM clause such as waitingRecords) waits for a lock.
func (s *lockingSink) awaitRecordWaiting(t *testing.T, rows int, waiting string) {
	t.Helper()
	testsupport.Eventually(t, 20*time.Second, 10*time.Millisecond, "every row answered 2xx and a record waiting for the lock", func() error {
		s.mu.Lock()
		n, errs := len(s.locks), s.errs
		s.mu.Unlock()
		if len(errs) > 0 {
			return testsupport.Final(fmt.Errorf("lock a row: %v", errs))
		}
		if n != rows {
			return fmt.Errorf("%d of %d rows answered", n, rows)
		}
		var w int
		if err := s.db.pool.QueryRow(context.Background(), `SELECT count(*) `+waiting).Scan(&w); err != nil {
			return err
		}
		if w == 0 {
			return errors.New("no record statement waits for the row lock yet")
		}
		return nil
	})
}

// A dispatcher that crashes after the sink answered 2xx, before it recorded the
// delivery: the sink has the effect, the outbox does not know. The record statement is
// held on a row lock the sink takes before it answers, and the dispatcher process is
// killed while the statement waits. Every row stays leased and undelivered, and is
// delivered again once the lease ends, by another dispatcher, with the same
// Idempotency-Key and the same body, so that a sink that dedupes on the key applies
// it once. (TestKilledDispatcherProcess kills before any answer.)
func TestAdversarialCrashBetweenTheSinks2xxAndTheRecord(t *testing.T) {
	db := newTestDB(t)
	rows := []outboxRow{{Entity: "A", Seq: 0}, {Entity: "B", Seq: 0}, {Entity: "C", Seq: 0}}
	ids := db.insert(t, rows...)
	ctx := context.Background()

	s := newLockingSink(t, db)
	kill := startChildDispatcher(t, db, "TestChildDispatcherProcess", s.srv.URL)
	s.awaitRecordWaiting(t, len(rows), waitingRecords)
	kill()
	// PostgreSQL notices a lost client only when it writes to it: the waiting statement
	// would still commit once the lock is released. The crash took the dispatcher's
	// sessions with it, its statement unfinished.
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "the crashed dispatcher's record statements ended", func() error {
		var left int
		err := db.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) `+waitingRecords).Scan(&left)
		if err == nil && left > 0 {
			err = fmt.Errorf("%d record statements were waiting", left)
		}
		return err
	})
	if err := s.release(); err != nil {
		t.Error(err)
	}
	for _, id := range ids {
		if st := db.state(t, id); st.Delivered || !st.Leased || st.Attempts != 1 {
			t.Fatalf("row %d after the crash: %+v, want leased and undelivered after 1 attempt", id, st)
		}
	}

	start(t, db.pool, db.options(t, s.srv.URL))
	testsupport.Eventually(t, 20*time.Second, 10*time.Millisecond, "re-delivery after the lease", func() bool {
		return db.count(t, "delivered_at IS NOT NULL") == len(rows)
	})
	byKey := map[string][]arrival{}
	for _, a := range s.snapshot() {
		byKey[a.Envelope.ID] = append(byKey[a.Envelope.ID], a)
	}
	for i, r := range rows {
		got := byKey[r.key()]
		if len(got) != 2 {
			t.Errorf("row %s arrived %d times, want 2 (the unrecorded 2xx and the re-delivery)", r.key(), len(got))
			continue
		}
		for n, a := range got {
			if a.Key != r.key() {
				t.Errorf("row %s, request %d: Idempotency-Key %q", r.key(), n+1, a.Key)
			}
		}
		if !bytes.Equal(got[0].Body, got[1].Body) {
			t.Errorf("row %s: the re-delivery's body differs:\n%s\n%s", r.key(), got[0].Body, got[1].Body)
		}
		if gap := got[1].At.Sub(got[0].At); gap < 4500*time.Millisecond {
			t.Errorf("key %s re-delivered %s after the unrecorded 2xx, before the 5s lease ended", r.key(), gap)
		}
		if st := db.state(t, ids[i]); st.Attempts != 2 || st.Leased {
			t.Errorf("row %d: %+v, want delivered on attempt 2", ids[i], st)
		}
	}
	if len(byKey) != len(rows) {
		t.Errorf("the sink saw %d rows, want %d", len(byKey), len(rows))
	}
}

// adversarialChildEnv runs TestAdversarialChildDispatcher.
const adversarialChildEnv = "HOOKKEEPER_OUTBOX_ADVERSARIAL_CHILD"

// TestAdversarialChildDispatcher is the replica TestAdversarialTwoReplicasOneCrashesMidDelivery
// kills: it runs only when re-executed with adversarialChildEnv, until it is killed.
// Its attempts outlast the test's wait for the kill (timeout 6 s, lease 8 s), and it
// claims two rows at a time so that the other replica finds rows too.
func TestAdversarialChildDispatcher(t *testing.T) {
	if os.Getenv(adversarialChildEnv) != "1" {
		t.Skip("runs only as the child process of TestAdversarialTwoReplicasOneCrashesMidDelivery")
	}
	runChildDispatcher(t, Options{Concurrency: 4, BatchSize: 2, Lease: 8 * time.Second, Timeout: 6 * time.Second})
}

// replicaSink is a sink for two replicas: it tells the crashing replica's requests
// (path /child) from the survivor's, holds the crashing replica's first holdChild
// requests until their connection dies, and tracks per entity the requests in flight
// (a request ends when the handler returns, or when its client is gone).
type replicaSink struct {
	srv       *httptest.Server
	holdChild int

	mu sync.Mutex
	flights
	child []arrival // the crashing replica's requests
	held  int       // of them, held now
}

func newReplicaSink(t *testing.T, holdChild int) *replicaSink {
	s := &replicaSink{holdChild: holdChild}
	s.srv = httptest.NewServer(arrivalHandler(s.serve))
	t.Cleanup(func() {
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
	return s
}

func (s *replicaSink) serve(_ http.ResponseWriter, r *http.Request, a arrival) {
	fromChild := r.URL.Path == "/child"
	s.mu.Lock()
	s.begin(a)
	hold := false
	if fromChild {
		s.child = append(s.child, a)
		hold = len(s.child) <= s.holdChild
		if hold {
			s.held++
		}
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.end(a)
		if hold {
			s.held--
		}
		s.mu.Unlock()
	}()
	if hold {
		// Until the replica dies (or its attempt times out: then it is not held).
		<-r.Context().Done()
		return
	}
	select { // a little latency, so that the replicas overlap in time
	case <-time.After(time.Duration(len(a.Key)%5) * time.Millisecond):
	case <-r.Context().Done():
	}
}

// Two replicas on one outbox (PerEntity), one killed (SIGKILL) in the middle of its
// deliveries while the sink holds some of its requests: every row is delivered, every
// request of a row carries the row's key as Idempotency-Key and envelope id, each
// entity's rows are first received in id order, and no entity ever has two requests in
// flight at once at the sink (the survivor takes the dead replica's rows only after
// their lease, when the requests they belong to are gone).
func TestAdversarialTwoReplicasOneCrashesMidDelivery(t *testing.T) {
	db := newTestDB(t)
	const entities, perEntity = 8, 5
	rows := db.insertInterleaved(t, entities, perEntity)
	s := newReplicaSink(t, 3)

	kill := startChildDispatcher(t, db, "TestAdversarialChildDispatcher", s.srv.URL+"/child")
	testsupport.Eventually(t, 20*time.Second, 10*time.Millisecond, "the crashing replica's requests held", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.held == s.holdChild
	})
	opts := db.options(t, s.srv.URL)
	opts.Timeout, opts.Lease = 2*time.Second, 4*time.Second
	opts.Concurrency = 4
	start(t, db.pool, opts)
	testsupport.Eventually(t, 20*time.Second, 10*time.Millisecond, "deliveries by both replicas", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.child) > s.holdChild && len(s.arrivals)-len(s.child) >= 3
	})
	s.mu.Lock()
	held := s.held
	s.mu.Unlock()
	kill()
	t.Logf("killed the replica with %d requests held", held)
	testsupport.Eventually(t, 60*time.Second, 20*time.Millisecond, "all rows delivered", func() bool {
		return db.count(t, "delivered_at IS NOT NULL") == len(rows)
	})

	s.mu.Lock()
	defer s.mu.Unlock()
	t.Logf("%d requests, %d from the crashed replica", len(s.arrivals), len(s.child))
	checkArrivals(t, s.arrivals, len(rows))
	if n := len(s.overlap); n > 0 {
		t.Errorf("%d times an entity had two requests in flight at once, first: %v", n, s.overlap[:min(n, 5)])
	}
}

// Retry-After values a hostile sink may send with a 503, beyond those
// TestRetryAfterForms covers: delay-seconds in the billions and an HTTP date in the
// year 9999 hold the row for the 24 h cap, no more, without an overflow turning them
// into "now" or into a dead letter; a date in the past and zero are no delay at all,
// and the row is retried at once (the jitter is pinned to 0).
func TestAdversarialHostileRetryAfterValues(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		capped      bool
	}{
		{"billions of seconds", "99999999999", true},
		{"the year 9999", "Fri, 31 Dec 9999 23:59:59 GMT", true},
		{"a date in the past", "Sun, 06 Nov 1994 08:49:37 GMT", false},
		{"zero", "0", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newTestDB(t)
			id := db.insert(t, outboxRow{Entity: "ord_1", Seq: 0})[0]
			var mu sync.Mutex
			var at []time.Time
			var keys []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				at = append(at, time.Now())
				keys = append(keys, r.Header.Get(HeaderIdempotencyKey))
				n := len(at)
				mu.Unlock()
				if n == 1 {
					w.Header().Set("Retry-After", tc.value)
					w.WriteHeader(http.StatusServiceUnavailable)
				}
			}))
			t.Cleanup(srv.Close)
			opts := db.options(t, srv.URL)
			opts.Random = func() float64 { return 0 }
			opts.SinkDownAfter = 100 // one 503 is not an outage here
			start(t, db.pool, opts)
			if tc.capped {
				var st state
				testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "the failed attempt recorded", func() bool {
					st = db.state(t, id)
					return st.LastError != "" && !st.Leased
				})
				var wait time.Duration
				if err := db.pool.QueryRow(context.Background(), fmt.Sprintf(
					`SELECT (extract(epoch FROM available_at - now()) * 1e6)::bigint * interval '1 microsecond' FROM %s WHERE id = $1`,
					db.tables.Outbox), id).Scan(&wait); err != nil {
					t.Fatal(err)
				}
				if st.Delivered || st.Dead || st.Attempts != 1 || wait < maxRetryAfter-time.Minute || wait > maxRetryAfter {
					t.Errorf("Retry-After %q: row %+v due in %s, want pending after 1 attempt, due in the 24h cap", tc.value, st, wait)
				}
				mu.Lock()
				defer mu.Unlock()
				if len(at) != 1 {
					t.Errorf("Retry-After %q: %d requests, want 1", tc.value, len(at))
				}
				return
			}
			testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "delivered on the second attempt", func() bool { return db.state(t, id).Delivered })
			mu.Lock()
			defer mu.Unlock()
			if len(at) != 2 || keys[0] != keys[1] {
				t.Fatalf("Retry-After %q: requests with keys %v, want 2 with one key", tc.value, keys)
			}
			if gap := at[1].Sub(at[0]); gap > 2*time.Second {
				t.Errorf("Retry-After %q: retried after %s, want at once", tc.value, gap.Round(time.Millisecond))
			}
		})
	}
}

// rawSink speaks HTTP/1.1 by hand over TCP so that it can cut an answer anywhere:
// answer(key, n) gives the bytes to send for the n-th request (1-based) with that
// Idempotency-Key; the connection is closed after them.
type rawSink struct {
	ln     net.Listener
	answer func(key string, n int) string
	// closed ends the silence after an answer that ends in holdOpen.
	closed chan struct{}

	mu   sync.Mutex
	keys []string
	conn sync.WaitGroup
}

func newRawSink(t *testing.T, answer func(key string, n int) string) *rawSink {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawSink{ln: ln, answer: answer, closed: make(chan struct{})}
	s.conn.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conn.Go(func() { s.serve(c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		close(s.closed)
		s.conn.Wait()
	})
	return s
}

// holdOpen ends an answer after which the raw sink says nothing more but keeps the
// connection open until the test ends.
const holdOpen = "<hold open>"

func (s *rawSink) url() string { return "http://" + s.ln.Addr().String() + "/" }

func (s *rawSink) serve(c net.Conn) {
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, req.Body)
	key := req.Header.Get(HeaderIdempotencyKey)
	s.mu.Lock()
	s.keys = append(s.keys, key)
	n := 0
	for _, k := range s.keys {
		if k == key {
			n++
		}
	}
	s.mu.Unlock()
	answer := s.answer(key, n)
	hold := strings.HasSuffix(answer, holdOpen)
	_, _ = io.WriteString(c, strings.TrimSuffix(answer, holdOpen))
	if hold {
		<-s.closed
	}
}

func (s *rawSink) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...)
}

// A sink that closes the connection in the middle of its answer. Cut after a 2xx status
// line and its headers (a short body, a broken chunked body): the sink answered 2xx and
// the row is delivered, once. Cut inside the status line, or before a status: no
// answer, a failed attempt, and the next attempt carries the same key. An interim 1xx
// is not the answer (the 200 after it is); a 101 is no 2xx. Whatever the sink does
// after its status, the attempt ends within its timeout (then the worker is free, and
// Run stops when asked).
func TestAdversarialAnswerCutOff(t *testing.T) {
	const ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
	for _, tc := range []struct {
		name, first string
		delivered   bool // by the first request
	}{
		{"body shorter than its length", "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\npartial", true},
		{"broken chunked body", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", true},
		{"inside the status line", "HTTP/1.1 20", false},
		{"inside the headers", "HTTP/1.1 200 OK\r\nContent-Le", false},
		{"before any byte", "", false},
		{"after an interim 102", "HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true},
		{"101 switching protocols", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: hostile\r\nConnection: Upgrade\r\n\r\n", false},
		{"101 switching protocols, then silence", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: hostile\r\nConnection: Upgrade\r\n\r\n" + holdOpen, false},
		{"200 headers, then silence", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n" + holdOpen, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := newTestDB(t)
			id := db.insert(t, outboxRow{Entity: "ord_1", Seq: 0})[0]
			s := newRawSink(t, func(_ string, n int) string {
				if n == 1 {
					return tc.first
				}
				return ok
			})
			opts := db.options(t, s.url())
			opts.Timeout, opts.Lease = time.Second, 6*time.Second
			_, stop := start(t, db.pool, opts)
			// Well within the lease: a first attempt that outlived its timeout would leave
			// the row to the claim after the lease.
			testsupport.Eventually(t, 5*time.Second, 10*time.Millisecond, "delivered", func() bool { return db.state(t, id).Delivered })
			began := time.Now()
			stop()
			if took := time.Since(began); took > opts.ShutdownGrace+time.Second {
				t.Errorf("Run took %s to stop, with nothing in flight", took.Round(time.Millisecond))
			}
			st, keys := db.state(t, id), s.requests()
			want := outboxRow{Entity: "ord_1", Seq: 0}.key()
			for i, k := range keys {
				if k != want {
					t.Errorf("request %d: Idempotency-Key %q, want %q", i+1, k, want)
				}
			}
			if tc.delivered && (st.Attempts != 1 || len(keys) != 1) {
				t.Errorf("%+v after %d requests, want delivered by the first", st, len(keys))
			}
			if !tc.delivered && (st.Attempts != 2 || len(keys) != 2) {
				t.Errorf("%+v after %d requests, want a failed attempt, then delivered by the second", st, len(keys))
			}
		})
	}
}

// The sink answered 2xx, and the statement recording it fails (its database session is
// terminated while it waits for a row lock the sink holds). The dispatcher keeps the
// result and records it again: each row is delivered once, on its first attempt, and
// never sent again.
func TestAdversarialFailedRecordOfA2xxIsRetriedNotResent(t *testing.T) {
	db := newTestDB(t)
	rows := []outboxRow{{Entity: "A", Seq: 0}, {Entity: "B", Seq: 0}}
	ids := db.insert(t, rows...)
	ctx := context.Background()
	const app = "hookkeeper-adversarial-dispatcher"
	pool := db.openPool(t, 8, func(cfg *pgxpool.Config) { cfg.ConnConfig.RuntimeParams["application_name"] = app })

	s := newLockingSink(t, db)
	start(t, pool, db.options(t, s.srv.URL))

	waiting := waitingRecords + ` AND application_name = '` + app + `'`
	s.awaitRecordWaiting(t, len(rows), waiting)
	var killed int
	if err := db.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) `+waiting).Scan(&killed); err != nil || killed == 0 {
		t.Fatalf("terminate the record statement: %d, %v", killed, err)
	}
	// The retry (100 ms on) waits for the lock again; then the sink lets go.
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "the record retried", func() bool {
		var w int
		return db.pool.QueryRow(ctx, `SELECT count(*) `+waiting).Scan(&w) == nil && w > 0
	})
	if err := s.release(); err != nil {
		t.Error(err)
	}
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "both rows delivered", func() bool {
		return db.count(t, "delivered_at IS NOT NULL") == len(rows)
	})
	for _, id := range ids {
		if st := db.state(t, id); st.Attempts != 1 || st.Leased {
			t.Errorf("row %d: %+v, want delivered on attempt 1", id, st)
		}
	}
	if n := s.count(); n != len(rows) {
		t.Errorf("the sink got %d requests for %d rows, want each once", n, len(rows))
	}
}
