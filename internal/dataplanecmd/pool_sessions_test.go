package dataplanecmd_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// startSpread is how long after its start a pooled endpoint's periodic tasks may begin
// (dataplanecmd's pooledStartSpread, the 10 s poll interval).
const startSpread = 10 * time.Second

// backendSampler watches the sessions of one database from the server's
// pg_stat_activity: which backends exist and when each started.
type backendSampler struct {
	t      *testing.T
	admin  *pgx.Conn
	dbName string
}

// newBackendSampler watches the sessions of the database dbURL names, from a
// connection to the server's maintenance database.
func newBackendSampler(t *testing.T, dbURL string) backendSampler {
	t.Helper()
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return backendSampler{t: t, admin: connect(t, testsupport.ServerURL(t)), dbName: cfg.Database}
}

type backend struct {
	pid     int32
	started time.Time
}

func (s backendSampler) sample() []backend {
	s.t.Helper()
	rows, err := s.admin.Query(context.Background(),
		`SELECT pid, backend_start FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, s.dbName)
	if err != nil {
		s.t.Fatalf("read pg_stat_activity: %v", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (backend, error) {
		var b backend
		return b, r.Scan(&b.pid, &b.started)
	})
	if err != nil {
		s.t.Fatalf("read pg_stat_activity: %v", err)
	}
	return list
}

// Quiet endpoints of a receiver pool open no database sessions: their periodic work
// (heartbeats, readiness checks, the dispatcher's polls and gauges, the parking sweep)
// runs on the few sessions of the housekeeping pool their database shares, which stay
// open, while each endpoint's own pool, which closes idle connections after a second,
// stays empty. Before, every tick of every endpoint connected anew: with a heartbeat
// every 1.5 s, 8 endpoints opened about 5 sessions a second. A webhook still goes
// through the endpoint's own pool, and is delivered.
func TestPoolQuietEndpointsOpenNoSessions(t *testing.T) {
	const endpoints = 8
	db := testsupport.MigratedDatabase(t, "quiet")
	var delivered atomic.Int32
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
		delivered.Add(1)
	}))
	t.Cleanup(sink.Close)
	vol := newSecretVolume(t)
	for i := range endpoints {
		name := fmt.Sprintf("quiet-%d", i)
		vol.setMember(poolEndpoint{name: name, schema: "quiet", sinkURL: sink.URL}, db, "whsec_"+name)
	}
	started := time.Now()
	p := startPool(t, vol.dir, "--heartbeat-interval", "1500ms")
	for i := range endpoints {
		name := fmt.Sprintf("quiet-%d", i)
		if c := p.post(t, "/"+name+"/", "whsec_"+name); c != http.StatusOK {
			t.Fatalf("/%s/: %d, want 200", name, c)
		}
	}
	awaitDeliveries := func(want int32) {
		testsupport.Eventually(t, 30*time.Second, 50*time.Millisecond, "the deliveries", func() error {
			if n := delivered.Load(); n < want {
				return fmt.Errorf("%d of %d delivered", n, want)
			}
			return nil
		})
	}
	awaitDeliveries(endpoints)

	watch := newBackendSampler(t, db)
	// Settled: the pool's tasks have all started (they start spread over the 10 s poll
	// interval) and the endpoints' own connections have idled out, so no session is
	// younger than 3 s. The retention pruner's first run, at its task's start, is one of
	// them: it runs on the endpoint's own pool (one session a run, every 10 minutes).
	testsupport.Eventually(t, time.Minute, 250*time.Millisecond, "no session younger than 3 s", func() error {
		if since := time.Since(started); since < startSpread {
			return fmt.Errorf("the pool's tasks start within %s of its start, %s ago", startSpread, since.Round(time.Millisecond))
		}
		for _, b := range watch.sample() {
			if age := time.Since(b.started); age < 3*time.Second {
				return fmt.Errorf("session %d opened %s ago", b.pid, age.Round(time.Millisecond))
			}
		}
		return nil
	})

	// A quiet window of four heartbeats: every endpoint beats on the shared sessions and
	// none is opened. (Clocks: pg_stat_activity's backend_start is the server's, this
	// machine's.)
	windowStart := time.Now()
	window := 6 * time.Second
	opened := map[int32]bool{}
	most := 0
	for time.Since(windowStart) < window {
		list := watch.sample()
		most = max(most, len(list))
		for _, b := range list {
			if b.started.After(windowStart) {
				opened[b.pid] = true
			}
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-t.Context().Done():
			return
		}
	}
	if len(opened) > 0 {
		t.Errorf("%d sessions opened in a quiet window of %s, want none", len(opened), window)
	}
	// The housekeeping pool's 3 sessions and the shared LISTEN.
	if most > 4 {
		t.Errorf("up to %d sessions open at once, want at most 4", most)
	}
	conn := connect(t, db)
	if n := count(t, conn, `SELECT count(*) FROM quiet.receiver_heartbeats WHERE seen_at > $1`, windowStart); n != endpoints {
		t.Errorf("%d endpoints beat during the window, want %d", n, endpoints)
	}

	// A webhook after the quiet spell is recorded and delivered.
	if c := p.post(t, "/quiet-0/", "whsec_quiet-0"); c != http.StatusOK {
		t.Fatalf("/quiet-0/ after the quiet window: %d, want 200", c)
	}
	awaitDeliveries(endpoints + 1)
}
