package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

const (
	testSchema   = "hookkeeper"
	testEndpoint = "shop/orders"
)

func TestMain(m *testing.M) { testsupport.Main(m) }

// testDB is a migrated database with a pool on it.
type testDB struct {
	url    string
	pool   *pgxpool.Pool
	tables store.Tables
}

func newTestDB(t *testing.T) *testDB {
	t.Helper()
	url, pool := testsupport.MigratedPool(t, testSchema, 16)
	return &testDB{url: url, pool: pool, tables: store.TablesIn(testSchema)}
}

// outboxRow is a row a test inserts; Key doubles as dedupe key and source event id.
type outboxRow struct {
	Entity string
	Seq    int
}

func (r outboxRow) key() string { return fmt.Sprintf("evt-%s-%04d", r.Entity, r.Seq) }

// insertInterleaved inserts perEntity rows of each of entities entities ("ent00", ...),
// the entities taking turns, so that every entity's rows are spread over the table, and
// returns the rows.
func (db *testDB) insertInterleaved(t *testing.T, entities, perEntity int) []outboxRow {
	t.Helper()
	var rows []outboxRow
	for seq := range perEntity {
		for e := range entities {
			rows = append(rows, outboxRow{Entity: fmt.Sprintf("ent%02d", e), Seq: seq})
		}
	}
	db.insert(t, rows...)
	return rows
}

// insert adds rows in the given order (ids follow it) and returns their ids.
func (db *testDB) insert(t *testing.T, rows ...outboxRow) []int64 {
	t.Helper()
	keys := make([]string, len(rows))
	entities := make([]string, len(rows))
	payloads := make([]string, len(rows))
	for i, r := range rows {
		keys[i], entities[i] = r.key(), r.Entity
		payloads[i] = fmt.Sprintf(`{"entity":%q,"seq":%d}`, r.Entity, r.Seq)
	}
	q := fmt.Sprintf(`
INSERT INTO %s (endpoint, dedupe_key, entity_key, event_type, source_event_id, payload, occurred_at)
SELECT $1, k, e, 'order.paid', k, p::jsonb, '2026-01-02T03:04:05Z'
FROM unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS x(k, e, p, n)
ORDER BY n
RETURNING id`, db.tables.Outbox)
	res, err := db.pool.Query(context.Background(), q, testEndpoint, keys, entities, payloads)
	if err != nil {
		t.Fatalf("insert outbox rows: %v", err)
	}
	var ids []int64
	for res.Next() {
		var id int64
		if err := res.Scan(&id); err != nil {
			t.Fatalf("scan id: %v", err)
		}
		ids = append(ids, id)
	}
	if err := res.Err(); err != nil {
		t.Fatalf("insert outbox rows: %v", err)
	}
	return ids
}

// state is one outbox row as the database has it.
type state struct {
	Attempts    int
	Delivered   bool
	Dead        bool
	Leased      bool
	LastError   string
	AvailableAt time.Time
}

func (db *testDB) state(t *testing.T, id int64) state {
	t.Helper()
	var s state
	err := db.pool.QueryRow(context.Background(), fmt.Sprintf(`
SELECT attempts, delivered_at IS NOT NULL, dead_at IS NOT NULL, lease_until IS NOT NULL,
       COALESCE(last_error, ''), available_at
FROM %s WHERE id = $1`, db.tables.Outbox), id).
		Scan(&s.Attempts, &s.Delivered, &s.Dead, &s.Leased, &s.LastError, &s.AvailableAt)
	if err != nil {
		t.Fatalf("read outbox row %d: %v", id, err)
	}
	return s
}

// count returns how many of the endpoint's rows match cond (SQL).
func (db *testDB) count(t *testing.T, cond string) int {
	t.Helper()
	return testsupport.NewRows(db.pool, db.tables).Count(t, db.tables.Outbox, "endpoint = $1 AND "+cond, testEndpoint)
}

// arrival is one request the sink received.
type arrival struct {
	Key      string
	Entity   string
	Seq      int
	At       time.Time
	Header   http.Header
	Body     []byte
	Envelope Envelope
}

// flights is what a test sink knows of the requests it received: each arrival, the
// requests in flight per entity, and each time an entity had two in flight at once. The
// sink holds its mutex around it.
type flights struct {
	arrivals []arrival
	inFlight map[string]int
	overlap  []string // "entity (at key)" for each request that began while another of its entity ran
}

// begin records a's arrival and that its request is in flight, and returns how many
// requests have arrived.
func (f *flights) begin(a arrival) int {
	f.arrivals = append(f.arrivals, a)
	if f.inFlight == nil {
		f.inFlight = map[string]int{}
	}
	f.inFlight[a.Entity]++
	if f.inFlight[a.Entity] > 1 {
		f.overlap = append(f.overlap, fmt.Sprintf("%s (at %s)", a.Entity, a.Key))
	}
	return len(f.arrivals)
}

// end records that a's request is no longer in flight.
func (f *flights) end(a arrival) { f.inFlight[a.Entity]-- }

// sink is a real HTTP server that records every request. respond decides the status
// (and may block); it runs after the arrival is recorded.
type sink struct {
	srv *httptest.Server
	t   *testing.T

	mu sync.Mutex
	flights
	respond func(a arrival, n int) int

	release chan struct{} // closed at cleanup so blocked handlers return
}

func newSink(t *testing.T, respond func(a arrival, n int) int) *sink {
	t.Helper()
	s := &sink{t: t, respond: respond, release: make(chan struct{})}
	s.srv = httptest.NewServer(arrivalHandler(s.serve))
	t.Cleanup(func() {
		close(s.release)
		s.srv.Close()
	})
	return s
}

func (s *sink) serve(w http.ResponseWriter, _ *http.Request, a arrival) {
	s.mu.Lock()
	n := s.begin(a)
	respond := s.respond
	s.mu.Unlock()

	status := http.StatusOK
	if respond != nil {
		status = respond(a, n)
	}
	s.mu.Lock()
	s.end(a)
	s.mu.Unlock()
	w.WriteHeader(status)
}

func (s *sink) snapshot() []arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]arrival(nil), s.arrivals...)
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.arrivals)
}

// block waits until ch is closed or the sink shuts down.
func (s *sink) block(ch <-chan struct{}) {
	select {
	case <-ch:
	case <-s.release:
	}
}

// newBlockingSink holds every request until unstall (or the sink's release) is closed,
// then answers 200.
func newBlockingSink(t *testing.T, unstall <-chan struct{}) *sink {
	var s *sink
	s = newSink(t, func(arrival, int) int {
		s.block(unstall)
		return http.StatusOK
	})
	return s
}

// testOptions are fast options for tests against sinkURL.
func (db *testDB) options(t *testing.T, sinkURL string) Options {
	return Options{
		Endpoint:       testEndpoint,
		Tables:         db.tables,
		SinkURL:        sinkURL,
		MaxAttempts:    5,
		BackoffInitial: 20 * time.Millisecond,
		BackoffMax:     200 * time.Millisecond,
		Timeout:        5 * time.Second,
		Concurrency:    8,
		PollInterval:   50 * time.Millisecond,
		GaugeInterval:  200 * time.Millisecond,
		ShutdownGrace:  2 * time.Second,
		Logger:         testr.NewWithOptions(t, testr.Options{LogTimestamp: true}),
	}
}

// probingOptions are options for a sink-outage test: backoff and probes so frequent
// that an outage begins and ends within a test's seconds.
func (db *testDB) probingOptions(t *testing.T, sinkURL string) Options {
	opts := db.options(t, sinkURL)
	opts.BackoffInitial, opts.BackoffMax = 20*time.Millisecond, 100*time.Millisecond
	opts.ProbeIntervalMax = 50 * time.Millisecond
	opts.PollInterval = 20 * time.Millisecond
	return opts
}

// awaitSinkHealth waits until the test endpoint's sink health (what) satisfies cond, and
// returns it.
func (db *testDB) awaitSinkHealth(t *testing.T, what string, cond func(SinkHealth) bool) SinkHealth {
	t.Helper()
	var h SinkHealth
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, what, func() bool {
		var err error
		h, err = ReadSinkHealth(context.Background(), db.pool, db.tables, testEndpoint)
		return err == nil && cond(h)
	})
	return h
}

// openPool opens another pool on the test database, of at most maxConns connections,
// with configure (when not nil) applied to its config: a dispatcher's own pool, which a
// test can tell apart or make send its statements otherwise. It closes when the test
// ends.
func (db *testDB) openPool(t *testing.T, maxConns int32, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	if configure != nil {
		configure(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// fencedRow is one row of ord_1 that two dispatchers claimed (claimTwice): late's
// lease has ended, newer's runs.
type fencedRow struct {
	db          *testDB
	q           queries
	id          int64
	late, newer row
}

// claimTwice inserts one row of ord_1 in a new database and claims it twice, as two
// dispatchers would: first with a lease that ends at once (its worker is late: its
// database was unreachable, its process paused), then again once that lease has ended.
// batch is each claim's batch size.
func claimTwice(t *testing.T, batch int) *fencedRow {
	t.Helper()
	db := newTestDB(t)
	f := &fencedRow{db: db, q: newQueries(db.tables, v1alpha1.OrderingPerEntity), id: db.insert(t, outboxRow{Entity: "ord_1", Seq: 0})[0]}
	ctx := context.Background()
	first, err := f.q.claimRows(ctx, db.pool, testEndpoint, batch, time.Millisecond, false)
	if err != nil || len(first) != 1 || first[0].Attempt != 1 {
		t.Fatalf("first claim: %+v, %v", first, err)
	}
	var second []row
	testsupport.Eventually(t, 5*time.Second, 10*time.Millisecond, "the first claim's lease ends and the row is claimed again", func() bool {
		second, err = f.claim(batch)
		return err == nil && len(second) == 1
	})
	f.late, f.newer = first[0], second[0]
	return f
}

// claim claims up to batch rows of the endpoint with a lease of a minute.
func (f *fencedRow) claim(batch int) ([]row, error) {
	return f.q.claimRows(context.Background(), f.db.pool, testEndpoint, batch, time.Minute, false)
}

// record records r as the row's result (r.ID is set to it) and returns the results the
// fence accepted.
func (f *fencedRow) record(r rowResult) ([]recorded, error) {
	r.ID = f.id
	acc, _, err := f.q.recordResults(context.Background(), f.db.pool, testEndpoint, []rowResult{r}, DefaultSinkDownAfter, time.Second)
	return acc, err
}

// start runs a dispatcher until the test ends (or stop is called) and reports Run's error.
func start(t *testing.T, pool *pgxpool.Pool, opts Options) (d *Dispatcher, stop func()) {
	t.Helper()
	d = NewDispatcher(pool, opts)
	run := testsupport.Run(t, context.Background(), "dispatcher", 30*time.Second, d.Run)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			if err := run.Stop(t); err != nil {
				t.Errorf("dispatcher Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return d, stop
}

// arrivalHandler is a test sink's handler: it reads each request as an arrival
// (readArrival), answers 400 to one it cannot read, and hands the others to serve.
func arrivalHandler(serve func(w http.ResponseWriter, r *http.Request, a arrival)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, err := readArrival(r)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		serve(w, r, a)
	})
}

// readArrival reads a request a sink received, with its body: the envelope and, from
// the envelope's data, the test row's entity and sequence number.
func readArrival(r *http.Request) (arrival, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return arrival{}, fmt.Errorf("read the request body: %w", err)
	}
	a := arrival{At: time.Now(), Header: r.Header.Clone(), Body: body, Key: r.Header.Get(HeaderIdempotencyKey)}
	if err := json.Unmarshal(body, &a.Envelope); err == nil {
		var data struct {
			Entity string `json:"entity"`
			Seq    int    `json:"seq"`
		}
		_ = json.Unmarshal(a.Envelope.Data, &data)
		a.Entity, a.Seq = data.Entity, data.Seq
	}
	return a, nil
}

// checkArrivals checks what a sink received of rows test rows: every request carries
// its row's dedupe key as Idempotency-Key and envelope id, each entity's rows first
// arrived in sequence order, and every row arrived.
func checkArrivals(t *testing.T, arrivals []arrival, rows int) {
	t.Helper()
	first := map[string][]int{}
	seen := map[string]bool{}
	for _, a := range arrivals {
		want := (outboxRow{Entity: a.Entity, Seq: a.Seq}).key()
		if a.Key != want || a.Envelope.ID != want {
			t.Errorf("row %s/%d sent with Idempotency-Key %q and envelope id %q, want %q", a.Entity, a.Seq, a.Key, a.Envelope.ID, want)
		}
		if !seen[want] {
			seen[want] = true
			first[a.Entity] = append(first[a.Entity], a.Seq)
		}
	}
	for e, seqs := range first {
		for i, seq := range seqs {
			if seq != i {
				t.Errorf("entity %s first received in order %v", e, seqs)
				break
			}
		}
	}
	if len(seen) != rows {
		t.Errorf("%d distinct rows received, want %d", len(seen), rows)
	}
}

// runChildDispatcher runs a dispatcher of the test endpoint on $CHILD_DATABASE_URL,
// delivering to $CHILD_SINK_URL with o's concurrency, batch size, lease and timeout,
// until the parent test kills the process (a minute at most).
func runChildDispatcher(t *testing.T, o Options) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := store.Open(ctx, os.Getenv("CHILD_DATABASE_URL"), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	o.Endpoint, o.Tables, o.SinkURL = testEndpoint, store.TablesIn(testSchema), os.Getenv("CHILD_SINK_URL")
	o.PollInterval, o.Logger = 50*time.Millisecond, logr.Discard()
	_ = NewDispatcher(pool, o).Run(ctx)
}
