package dataplanecmd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/metrics"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// reloadCheckerApp is the application_name of the test's own sessions, left out when the
// pool's sessions are counted.
const reloadCheckerApp = "reload-checker"

// reloadTarget is one member endpoint the reload test sends to, and what its answers
// may be at a given moment.
type reloadTarget struct {
	name string
	db   string
	// secret is the signing secret the pool is known to serve: a rotation counts itself
	// in rotating before it writes the files, and stores the new secret and counts
	// itself in rotated once /endpoints shows the new version. A 401 is expected only
	// for a request sent while a rotation was pending or that one began meanwhile.
	secret            atomic.Pointer[string]
	rotating, rotated atomic.Int64
	// served: /endpoints lists the member (false for an endpoint not added yet);
	// removing: its files were removed (a 404 is expected from then on); removed: the
	// removal shows in /endpoints, so a request sent after it must be a 404.
	served, removing, removed atomic.Bool
	// refunds: the member serves the version with the refund transition; a capture
	// answered 200 is then followed by its refund.
	refunds atomic.Bool
	ok      atomic.Int64 // 200s
	gone    atomic.Int64 // 404s sent after the removal showed
}

// reloadEvent is one event the test sent, each copy's answer, and what a 200 promises.
type reloadEvent struct {
	target *reloadTarget
	id     string
	entity string
	emit   string
	codes  []int
}

// reloadLedger collects the events and every answer that breaks a promise.
type reloadLedger struct {
	mu       sync.Mutex
	events   []*reloadEvent
	problems []string
}

func (l *reloadLedger) problem(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.problems) < 50 {
		l.problems = append(l.problems, fmt.Sprintf(format, args...))
	}
}

// goroutineCounts counts this process's goroutines whose stack names each of what.
func goroutineCounts(what ...string) map[string]int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]int{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, w := range what {
			if strings.Contains(g, w) {
				out[w]++
			}
		}
	}
	return out
}

// What one endpoint version and one database of a pool hold while they are served:
// five task goroutines per unit (notifier, dispatcher, parking, retention, heartbeat),
// a health check per pgx pool (each unit's own and each database's housekeeping pool),
// a shared LISTEN per database; no group-commit leader while nothing is delivered.
const (
	stackUnitTask    = "dataplanecmd.(*endpointUnit).start.func"
	stackHealthCheck = "pgxpool.(*Pool).backgroundHealthCheck"
	stackListener    = "outbox.(*Listener).Run"
	stackLeader      = "receipt.(*grouper).lead"
)

// poolGoroutines are the counts of the stacks above.
func poolGoroutines() map[string]int {
	return goroutineCounts(stackUnitTask, stackHealthCheck, stackListener, stackLeader)
}

// settledGoroutines is poolGoroutines once two samples a little apart agree: what the
// process holds before the pool starts (the test's own pools, anything a previous test
// left running).
func settledGoroutines(t *testing.T) map[string]int {
	t.Helper()
	var last map[string]int
	testsupport.Eventually(t, 10*time.Second, 100*time.Millisecond, "the goroutine counts to settle", func() error {
		now := poolGoroutines()
		same := last != nil && maps.Equal(now, last)
		last = now
		if !same {
			return fmt.Errorf("%v", now)
		}
		return nil
	})
	return last
}

// expectPoolGoroutines holds the process to base plus units endpoint versions on
// databases databases.
func expectPoolGoroutines(base map[string]int, units, databases int) error {
	got := poolGoroutines()
	want := map[string]int{stackUnitTask: 5 * units, stackHealthCheck: units + databases, stackListener: databases, stackLeader: 0}
	for k, w := range want {
		if g := got[k] - base[k]; g != w {
			return fmt.Errorf("goroutines in %s: %d more than before the pool, want %d for %d endpoint versions on %d databases (now %v, before %v)",
				k, g, w, units, databases, got, base)
		}
	}
	return nil
}

// A receiver pool reloads its endpoints while signed deliveries for them are in flight
// and being grouped: an endpoint is added, one's signing secret rotated three times,
// one changed to a version with a new transition, and one (alone on its database)
// removed, while four senders per endpoint keep delivering fresh events, a quarter of
// them as two concurrent copies. Every answer must be one the moment allows: 200, or a
// 401 signed with a secret already rotated away, or a 404 for the endpoint not added
// yet or being removed; never a 503 or a dropped connection for a version being
// swapped out. Every 200 names an event committed when read back at once; in the end
// each event answered 200 is stored once, applied, with its entity moved and one
// outbox row, and an event never answered 200 left nothing; the new transition applies
// from the moment its version shows. Afterwards the process holds exactly the
// goroutines and database sessions of the versions it still serves: none of a retired
// version's tasks, pools or LISTEN, and no session on the removed endpoint's database.
func TestPoolReloadMidTrafficStoresEachAcknowledgedDeliveryOnce(t *testing.T) {
	db1 := testsupport.MigratedDatabase(t, "shared")
	db2 := testsupport.MigratedDatabase(t, "shared")
	db3 := testsupport.MigratedDatabase(t, "shared")
	checkers := map[string]*pgxpool.Pool{}
	for _, db := range []string{db1, db2, db3} {
		cfg, err := pgxpool.ParseConfig(db)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = 8
		cfg.ConnConfig.RuntimeParams["application_name"] = reloadCheckerApp
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		checkers[db] = pool
	}
	sink := testsupport.AcceptingSink(t)

	targets := map[string]*reloadTarget{}
	add := func(name, db, secret string) *reloadTarget {
		tg := &reloadTarget{name: name, db: db}
		tg.secret.Store(&secret)
		targets[name] = tg
		return tg
	}
	steady, rot, trans := add("steady", db1, "whsec_steady"), add("rot", db2, "whsec_rot_0"), add("trans", db1, "whsec_trans")
	gone, fresh := add("gone", db3, "whsec_gone"), add("fresh", db1, "whsec_fresh")
	transV1 := poolEndpoint{name: "trans", schema: "shared", sinkURL: sink}
	transV2 := mutate(transV1, func(d map[string]any) {
		sm := spec(d)["stateMachine"].(map[string]any)
		sm["states"] = []string{"payment_pending", "paid", "refunded"}
		sm["transitions"] = append(sm["transitions"].([]any), map[string]any{
			"name": "refund", "on": []string{"charge.refunded"}, "from": []string{"paid"}, "to": "refunded", "emit": "order.refunded",
		})
	})
	vol := newSecretVolume(t)
	for _, tg := range []*reloadTarget{steady, rot, gone} {
		vol.setMember(poolEndpoint{name: tg.name, schema: "shared", sinkURL: sink}, tg.db, *tg.secret.Load())
	}
	vol.setMember(transV1, db1, "whsec_trans")
	base := settledGoroutines(t)
	p := startPool(t, vol.dir)
	for _, tg := range []*reloadTarget{steady, rot, trans, gone} {
		if c := p.post(t, "/"+tg.name+"/", *tg.secret.Load()); c != http.StatusOK {
			t.Fatalf("warm-up of %s: %d", tg.name, c)
		}
		tg.served.Store(true)
	}
	// The formula the end is held to, checked where nothing has changed yet: four
	// versions on three databases.
	testsupport.Eventually(t, 15*time.Second, 50*time.Millisecond, "the pool's goroutines at start", func() error {
		return expectPoolGoroutines(base, 4, 3)
	})

	groupedBefore := reloadGroupedTransactions(t, "steady", "rot", "trans", "fresh")
	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	ledger := &reloadLedger{}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	stop := make(chan struct{})
	var senders sync.WaitGroup

	// send delivers one event (copies at once) and judges each answer by the state of
	// the target at the moment it was sent and answered.
	send := func(tg *reloadTarget, typ, id, entity, emit string, copies int) bool {
		ev := &reloadEvent{target: tg, id: id, entity: entity, emit: emit}
		ledger.mu.Lock()
		ledger.events = append(ledger.events, ev)
		ledger.mu.Unlock()
		body := demo.StripeEvent(id, typ, entity, 100, time.Now())
		rotating, rotated := tg.rotating.Load(), tg.rotated.Load()
		secret := *tg.secret.Load()
		servedBefore, removedBefore := tg.served.Load(), tg.removed.Load()
		codes := make([]int, copies)
		var wg sync.WaitGroup
		for i := range copies {
			wg.Go(func() {
				code, err := demo.PostStripeWith(ctx, client, p.webhook+"/"+tg.name+"/", secret, body)
				if err != nil && ctx.Err() == nil {
					ledger.problem("%s %s: %v", tg.name, id, err)
				}
				codes[i] = code
			})
		}
		wg.Wait()
		ledger.mu.Lock()
		ev.codes = codes
		ledger.mu.Unlock()
		acked := false
		for _, code := range codes {
			switch {
			case code == http.StatusOK:
				acked = true
				if removedBefore {
					ledger.problem("%s %s: 200 for a request sent after the endpoint's removal showed", tg.name, id)
				}
			case code == http.StatusUnauthorized && (rotating != rotated || tg.rotating.Load() != rotating):
				// Signed with a secret the pool may have rotated away meanwhile.
			case code == http.StatusNotFound && (!servedBefore || tg.removing.Load()):
				if removedBefore {
					tg.gone.Add(1)
				}
			case code == 0 && ctx.Err() != nil:
			default:
				ledger.problem("%s %s (%s): answered %d (served %v, removing %v)", tg.name, id, typ, code, servedBefore, tg.removing.Load())
			}
		}
		if !acked {
			return false
		}
		tg.ok.Add(1)
		// A 200 promises the event is committed: read it back at once.
		var n int
		if err := checkers[tg.db].QueryRow(ctx, `SELECT count(*) FROM shared.webhook_events WHERE endpoint = $1 AND event_id = $2`,
			"shop/"+tg.name, id).Scan(&n); err != nil {
			if ctx.Err() == nil {
				ledger.problem("read back %s: %v", id, err)
			}
		} else if n != 1 {
			ledger.problem("%s %s answered 200 but %d receipts read back", tg.name, id, n)
		}
		return true
	}
	for _, tg := range targets {
		for range 4 {
			senders.Go(func() {
				for {
					select {
					case <-stop:
						return
					case <-ctx.Done():
						return
					default:
					}
					id := nextEventID()
					entity := "ord-" + id
					copies := 1
					if rand.IntN(4) == 0 {
						copies = 2
					}
					refunds := tg.refunds.Load()
					if send(tg, "payment_intent.succeeded", id, entity, "order.paid", copies) && refunds {
						send(tg, "charge.refunded", "re_"+id, entity, "order.refunded", copies)
					}
					if !tg.served.Load() || tg.removing.Load() {
						// A 404 is answered at once: pace, as a provider's retries are.
						select {
						case <-stop:
						case <-time.After(5 * time.Millisecond):
						}
					}
				}
			})
		}
	}
	stopTraffic := sync.OnceFunc(func() {
		close(stop)
		senders.Wait()
	})
	defer stopTraffic()
	flowing := func(what string, want int64, tgs ...*reloadTarget) {
		t.Helper()
		from := map[*reloadTarget]int64{}
		for _, tg := range tgs {
			from[tg] = tg.ok.Load()
		}
		testsupport.Eventually(t, 15*time.Second, 10*time.Millisecond, what, func() error {
			for _, tg := range tgs {
				if n := tg.ok.Load() - from[tg]; n < want {
					return fmt.Errorf("%s: %d more 200s, want %d", tg.name, n, want)
				}
			}
			return nil
		})
	}
	hashOf := func(name string) string { return p.endpoints(t)[name].Hash }
	awaitNewHash := func(name, before string) {
		t.Helper()
		testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "a new version of "+name, func() error {
			if h := hashOf(name); h == before || h == "" {
				return fmt.Errorf("hash %q", h)
			}
			return nil
		})
	}
	flowing("traffic to every member", 20, steady, rot, trans, gone)

	// Added.
	vol.setMember(poolEndpoint{name: "fresh", schema: "shared", sinkURL: sink}, db1, "whsec_fresh")
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "the added endpoint to be listed", func() bool {
		return p.endpoints(t)["fresh"].Key == "shop/fresh"
	})
	fresh.served.Store(true)
	flowing("traffic to the added endpoint", 10, fresh)

	// Rotated, three times, with traffic in between.
	for i := 1; i <= 3; i++ {
		before := hashOf("rot")
		next := fmt.Sprintf("whsec_rot_%d", i)
		rot.rotating.Add(1)
		vol.setMember(poolEndpoint{name: "rot", schema: "shared", sinkURL: sink}, db2, next)
		awaitNewHash("rot", before)
		rot.secret.Store(&next)
		rot.rotated.Add(1)
		flowing(fmt.Sprintf("traffic after rotation %d", i), 10, rot)
	}

	// Changed: a new transition.
	before := hashOf("trans")
	vol.set("trans", transV2, poolEnv(db1, "whsec_trans"))
	awaitNewHash("trans", before)
	trans.refunds.Store(true)
	flowing("captures and refunds on the changed endpoint", 20, trans)

	// Removed.
	gone.removing.Store(true)
	vol.remove("gone")
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "the removed endpoint to leave /endpoints", func() bool {
		_, listed := p.endpoints(t)["gone"]
		return !listed
	})
	gone.removed.Store(true)
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "404s for the removed endpoint", func() bool {
		return gone.gone.Load() >= 10
	})
	flowing("traffic after the removal", 10, steady, rot, trans, fresh)
	stopTraffic()
	client.CloseIdleConnections()

	ledger.mu.Lock()
	problems := ledger.problems
	events := ledger.events
	ledger.mu.Unlock()
	for _, pr := range problems {
		t.Error(pr)
	}
	counts := map[string]string{}
	for _, tg := range targets {
		counts[tg.name] = fmt.Sprintf("%d ok", tg.ok.Load())
	}
	grouped := reloadGroupedTransactions(t, "steady", "rot", "trans", "fresh") - groupedBefore
	t.Logf("%d events sent; %v; %d 404s after the removal showed; %d receipt transactions shared by several deliveries",
		len(events), counts, gone.gone.Load(), grouped)
	if grouped == 0 {
		t.Error("no receipt transaction was shared: the deliveries were never grouped")
	}

	// Every event answered 200 once stored, applied, moved and queued; every other one
	// left nothing.
	type stored struct {
		outcome, state string
		effects        int
	}
	for _, ev := range events {
		acked := false
		for _, c := range ev.codes {
			acked = acked || c == http.StatusOK
		}
		var s stored
		err := checkers[ev.target.db].QueryRow(context.Background(), `SELECT
			COALESCE((SELECT string_agg(outcome, ',') FROM shared.webhook_events WHERE endpoint = $1 AND event_id = $2), ''),
			COALESCE((SELECT state FROM shared.entities WHERE endpoint = $1 AND entity_key = $3), ''),
			(SELECT count(*) FROM shared.outbox WHERE endpoint = $1 AND dedupe_key = $4)`,
			"shop/"+ev.target.name, ev.id, ev.entity, receipt.DedupeKey("shop/"+ev.target.name, ev.id, ev.emit)).Scan(&s.outcome, &s.state, &s.effects)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case acked && (s.outcome != "applied" || s.effects != 1 || s.state == "" || s.state == "payment_pending"):
			t.Errorf("%s %s answered %v: receipt %q, entity %q, %d outbox rows; want applied once with its effect", ev.target.name, ev.id, ev.codes, s.outcome, s.state, s.effects)
		case !acked && (s.outcome != "" || s.effects != 0):
			t.Errorf("%s %s answered %v: receipt %q, %d outbox rows; want nothing stored", ev.target.name, ev.id, ev.codes, s.outcome, s.effects)
		}
	}
	// Nothing else: as many receipts, entities and outbox rows per endpoint as the
	// acknowledged events account for (warm-ups included).
	want := map[*reloadTarget][3]int{}
	for _, ev := range events {
		for _, c := range ev.codes {
			if c == http.StatusOK {
				w := want[ev.target]
				w[0]++
				w[2]++
				if ev.emit == "order.paid" {
					w[1]++
				}
				want[ev.target] = w
				break
			}
		}
	}
	for _, tg := range targets {
		w := want[tg]
		warm := 1
		if tg == fresh {
			warm = 0
		}
		var receipts, entities, effects int
		if err := checkers[tg.db].QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM shared.webhook_events WHERE endpoint = $1),
			(SELECT count(*) FROM shared.entities WHERE endpoint = $1),
			(SELECT count(*) FROM shared.outbox WHERE endpoint = $1)`, "shop/"+tg.name).Scan(&receipts, &entities, &effects); err != nil {
			t.Fatal(err)
		}
		if receipts != w[0]+warm || entities != w[1]+warm || effects != w[2]+warm {
			t.Errorf("%s: %d receipts, %d entities, %d outbox rows; the events answered 200 account for %d, %d, %d",
				tg.name, receipts, entities, effects, w[0]+warm, w[1]+warm, w[2]+warm)
		}
	}
	if trans.ok.Load() == 0 || want[trans][2] == want[trans][1] {
		t.Error("no refund was acknowledged on the changed endpoint")
	}

	// What is left: the versions served now (steady, rot, trans, fresh) on two
	// databases; the removed endpoint's database has no session, the others only the
	// housekeeping pool's and the LISTEN.
	testsupport.Eventually(t, 20*time.Second, 100*time.Millisecond, "the pool's goroutines after the reloads", func() error {
		return expectPoolGoroutines(base, 4, 2)
	})
	admin := connect(t, testsupport.ServerURL(t))
	sessions := func(db string) int {
		cfg, err := pgx.ParseConfig(db)
		if err != nil {
			t.Fatal(err)
		}
		return count(t, admin, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name <> $2`, cfg.Database, reloadCheckerApp)
	}
	testsupport.Eventually(t, 20*time.Second, 100*time.Millisecond, "the pool's sessions after the reloads", func() error {
		if n := sessions(db3); n != 0 {
			return fmt.Errorf("%d sessions on the removed endpoint's database", n)
		}
		for _, db := range []string{db1, db2} {
			if n := sessions(db); n > 4 {
				return fmt.Errorf("%d sessions on a served database, want at most 4", n)
			}
		}
		return nil
	})
	if n := count(t, connect(t, db3), `SELECT count(*) FROM shared.receiver_heartbeats WHERE endpoint = 'shop/gone'`); n != 0 {
		t.Errorf("the removed endpoint's heartbeat row is still there")
	}
}

// reloadGroupedTransactions counts the receipt transactions of the members names that
// several deliveries shared (hookkeeper_receipt_group_size observations above 1).
func reloadGroupedTransactions(t *testing.T, names ...string) uint64 {
	t.Helper()
	var n uint64
	for _, name := range names {
		var m dto.Metric
		if err := metrics.GroupSize.WithLabelValues("shop/" + name).(prometheus.Metric).Write(&m); err != nil {
			t.Fatal(err)
		}
		h := m.GetHistogram()
		alone := uint64(0)
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() == 1 {
				alone = b.GetCumulativeCount()
			}
		}
		n += h.GetSampleCount() - alone
	}
	return n
}

// A version swapped out while a delivery holds it drains, and while it drains it no
// longer speaks for the endpoint in receiver_heartbeats: the operator reads config_hash
// to learn which version each pod serves and seen_at to learn that it serves the
// endpoint at all. After a rotation the row names the new version and keeps naming it
// while the old one finishes the delivery it holds (which completes, 200, on the old
// secret); after a removal the row is no longer refreshed while the removed version
// drains, and it is gone once the drain ends.
func TestPoolDrainingVersionLeavesTheHeartbeatAlone(t *testing.T) {
	db := testsupport.MigratedDatabase(t, "shared")
	vol := newSecretVolume(t)
	manifest := poolEndpoint{name: "beat", schema: "shared"}.manifest()
	vol.set("beat", manifest, poolEnv(db, "whsec_beat_old"))
	p := startPool(t, vol.dir, "--heartbeat-interval", "100ms")
	conn := connect(t, db)
	type row struct {
		hash string
		seen time.Time
	}
	heartbeat := func() (row, bool) {
		var r row
		err := conn.QueryRow(context.Background(), `SELECT config_hash, seen_at FROM shared.receiver_heartbeats
			WHERE endpoint = 'shop/beat' AND pod = 'pool-pod-0'`).Scan(&r.hash, &r.seen)
		if errors.Is(err, pgx.ErrNoRows) {
			return r, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return r, true
	}
	// watch holds cond on the row for a window of several heartbeat intervals.
	watch := func(what string, window time.Duration, cond func(r row, ok bool) error) {
		t.Helper()
		deadline := time.Now().Add(window)
		for time.Now().Before(deadline) {
			r, ok := heartbeat()
			if err := cond(r, ok); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			select {
			case <-time.After(20 * time.Millisecond):
			case <-p.Done():
				t.Fatal(p.Exited())
			}
		}
	}
	served := func() string { return p.endpoints(t)["beat"].Hash }
	old := served()
	testsupport.Eventually(t, 10*time.Second, 20*time.Millisecond, "the first version's heartbeat", func() error {
		if r, ok := heartbeat(); !ok || r.hash != old {
			return fmt.Errorf("row %+v (present %v), want hash %s", r, ok, old)
		}
		return nil
	})

	// Rotation while a delivery holds the old version.
	slow := startSlow(t, p.webhook+"/beat/", "whsec_beat_old")
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "the slow request to be in flight", func() bool {
		return inFlight("shop/beat") == 1
	})
	vol.set("beat", manifest, poolEnv(db, "whsec_beat_new"))
	var rotated string
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "the new version", func() bool {
		rotated = served()
		return rotated != old && rotated != ""
	})
	testsupport.Eventually(t, 10*time.Second, 20*time.Millisecond, "the new version's heartbeat", func() error {
		if r, ok := heartbeat(); !ok || r.hash != rotated {
			return fmt.Errorf("row %+v (present %v), want hash %s", r, ok, rotated)
		}
		return nil
	})
	watch("while the old version drains", 1500*time.Millisecond, func(r row, ok bool) error {
		if !ok || r.hash != rotated {
			return fmt.Errorf("the row names hash %q (present %v), the draining version's is %s and the served one's %s", r.hash, ok, old, rotated)
		}
		return nil
	})
	slow.release()
	if err := testsupport.Await(t, chanCode(slow.code, http.StatusOK), 15*time.Second, "the held delivery"); err != nil {
		t.Fatal(err)
	}

	// Removal while a delivery holds the last version.
	slow = startSlow(t, p.webhook+"/beat/", "whsec_beat_new")
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "the slow request to be in flight", func() bool {
		return inFlight("shop/beat") == 1
	})
	vol.remove("beat")
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "the removal to show", func() bool {
		_, listed := p.endpoints(t)["beat"]
		return !listed
	})
	// A beat that began just before the removal may still land; then the row must stay
	// as it is (two reads more than a heartbeat interval apart agree).
	var last row
	testsupport.Eventually(t, 10*time.Second, 150*time.Millisecond, "the removed endpoint's row to stop being refreshed", func() error {
		r, _ := heartbeat()
		if !r.seen.Equal(last.seen) {
			last = r
			return fmt.Errorf("refreshed at %s", r.seen.Format(time.RFC3339Nano))
		}
		return nil
	})
	watch("while the removed version drains", 1500*time.Millisecond, func(r row, ok bool) error {
		if ok && r.seen.After(last.seen) {
			return fmt.Errorf("the removed endpoint's row was refreshed at %s, after the removal showed", r.seen.Format(time.RFC3339Nano))
		}
		return nil
	})
	slow.release()
	if err := testsupport.Await(t, chanCode(slow.code, http.StatusOK), 15*time.Second, "the held delivery"); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 10*time.Second, 20*time.Millisecond, "the removed endpoint's row to go", func() bool {
		_, ok := heartbeat()
		return !ok
	})
}

// chanCode turns a slow request's answer into what testsupport.Await waits on: nil when
// it is want.
func chanCode(code <-chan int, want int) <-chan error {
	out := make(chan error, 1)
	go func() {
		if c := <-code; c != want {
			out <- fmt.Errorf("answered %d, want %d", c, want)
			return
		}
		out <- nil
	}()
	return out
}

// The members' files under change: removed and re-added, swapped by the kubelet,
// malformed or hostile, or named like each other.

// A member removed and added back while its old version is still draining (a request
// in flight holds it, as a slow provider connection or a dispatcher's grace would): the
// re-added version is the one serving, so the old version's drain must not forget the
// endpoint's metric series (the new unit's handler, in-flight limiter and group-commit
// observer hold children made at build time: they would be gone from /metrics for as
// long as that version serves) nor delete this pod's heartbeat row (the operator would
// report the endpoint not loaded until the next heartbeat, here 30 s away).
func TestPoolReaddWhileOldDrainsKeepsMetricsAndHeartbeat(t *testing.T) {
	db := testsupport.MigratedDatabase(t, "shared")
	vol := newSecretVolume(t)
	const name = "readd"
	manifest := poolEndpoint{name: name, schema: "shared"}.manifest()
	vol.set(name, manifest, poolEnv(db, "whsec_readd"))
	p := startPool(t, vol.dir, "--heartbeat-interval", "30s")
	conn := connect(t, db)
	rowCount := func() int {
		return count(t, conn, `SELECT count(*) FROM shared.receiver_heartbeats WHERE endpoint = $1 AND pod = 'pool-pod-0'`, "shop/"+name)
	}
	if c := p.post(t, "/"+name+"/", "whsec_readd"); c != http.StatusOK {
		t.Fatalf("first webhook: %d", c)
	}
	slow := startSlow(t, p.webhook+"/"+name+"/", "whsec_readd")
	testsupport.Eventually(t, 10*time.Second, 20*time.Millisecond, "the slow request to be in flight", func() error {
		if v := inFlight("shop/" + name); v < 1 {
			return fmt.Errorf("in flight %v", v)
		}
		return nil
	})

	// Remove the member (the old unit drains, held by the slow request) ...
	vol.remove(name)
	testsupport.Eventually(t, 10*time.Second, 20*time.Millisecond, "the member to be gone", func() error {
		if _, ok := p.endpoints(t)[name]; ok {
			return fmt.Errorf("still listed")
		}
		return nil
	})
	// ... and add it back, same files, before the old version finished draining.
	vol.set(name, manifest, poolEnv(db, "whsec_readd"))
	testsupport.Eventually(t, 15*time.Second, 50*time.Millisecond, "the member back, with its heartbeat row", func() error {
		if e, ok := p.endpoints(t)[name]; !ok || e.Key == "" {
			return fmt.Errorf("not served yet: %+v", e)
		}
		if n := rowCount(); n != 1 {
			return fmt.Errorf("%d heartbeat rows", n)
		}
		return nil
	})
	if c := p.post(t, "/"+name+"/", "whsec_readd"); c != http.StatusOK {
		t.Fatalf("webhook to the re-added member: %d", c)
	}
	// Let the old version finish draining, then watch what its drain leaves.
	slow.release()
	select {
	case c := <-slow.code:
		t.Logf("slow request on the removed version answered %d", c)
	case <-time.After(30 * time.Second):
		t.Fatal("slow request never answered")
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if c := p.post(t, "/"+name+"/", "whsec_readd"); c != http.StatusOK {
			t.Fatalf("webhook to the re-added member: %d", c)
		}
		if n := rowCount(); n != 1 {
			t.Fatalf("the heartbeat row of an endpoint this pod serves was deleted by the drain of its removed version (rows %d)", n)
		}
		text := scrapeMetrics(t, p.admin)
		for _, series := range []string{
			`hookkeeper_webhook_request_duration_seconds_count{endpoint="shop/` + name + `"}`,
			`hookkeeper_webhook_in_flight_requests{endpoint="shop/` + name + `"}`,
		} {
			if !strings.Contains(text, series) {
				t.Fatalf("the re-added member serves webhooks but /metrics lost %s (the removed version's drain forgot it)", series)
			}
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-p.Done():
			t.Fatal(p.Exited())
		}
	}
}

// The kubelet swaps ..data to a new timestamped directory and then deletes the old
// one. A pool poll that resolved ..data just before the swap and reads the files just
// after the deletion finds them missing, and treats every member it could not read as
// removed: the member is unrouted (404), its heartbeat row and metrics dropped, and it
// is rebuilt at the next poll. Here a member whose files never change must keep being
// served by the same version (servedSince constant, never absent from /endpoints, no
// 404) while other members' files are updated repeatedly, as the operator does when
// any member of the pool changes.
func TestPoolKubeletSwapMidReadKeepsMembers(t *testing.T) {
	db := testsupport.MigratedDatabase(t, "shared")
	vol := newSecretVolume(t)
	const victim = "zz-steady"
	vol.files[victim+".json"] = poolEndpoint{name: victim, schema: "shared"}.manifest()
	vol.files[victim+".env"] = []byte("DATABASE_URL=" + db + "\nHOOKKEEPER_SIGNING_SECRET_0=whsec_steady\n")
	// Many incomplete members (a NAME.json whose NAME.env is not there yet) sort before
	// the victim: the pool reads each, which widens the window between resolving ..data
	// and reading the victim's files, as a pool of a few hundred members has.
	filler := strings.Repeat("x", 2048)
	for i := range 300 {
		vol.files[fmt.Sprintf("a-%03d.json", i)] = []byte(`{"pad":"` + filler + `"}`)
	}
	vol.publish()
	p := startPool(t, vol.dir, "--endpoints-poll", "20ms")

	var first time.Time
	testsupport.Eventually(t, 15*time.Second, 20*time.Millisecond, "the victim to be served", func() error {
		e, ok := p.endpoints(t)[victim]
		if !ok || e.ServedSince == nil {
			return fmt.Errorf("not served: %+v", e)
		}
		first = *e.ServedSince
		return nil
	})

	// Another member's files change over and over (its .json toggles), as many
	// atomic updates as fit in the window.
	stop := make(chan struct{})
	var updates atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			vol.files["a-000.json"] = []byte(fmt.Sprintf(`{"n":%d}`, i))
			vol.publish()
			updates.Add(1)
		}
	})
	defer func() { close(stop); wg.Wait() }()

	var codes sync.Map
	var posted atomic.Int64
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			c, err := p.postErr("/"+victim+"/", "whsec_steady")
			if err != nil {
				c = 0
			}
			posted.Add(1)
			n, _ := codes.LoadOrStore(c, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
		}
	})

	deadline := time.Now().Add(6 * time.Second)
	var problem string
	for time.Now().Before(deadline) && problem == "" {
		e, ok := p.endpoints(t)[victim]
		switch {
		case !ok:
			problem = "the member vanished from /endpoints"
		case e.ServedSince == nil || !e.ServedSince.Equal(first):
			problem = fmt.Sprintf("the member was rebuilt (servedSince %v, first %v) though its files never changed", e.ServedSince, first)
		}
		if v, ok := codes.Load(http.StatusNotFound); ok && v.(*atomic.Int64).Load() > 0 {
			problem = fmt.Sprintf("%d webhooks to the unchanged member got 404", v.(*atomic.Int64).Load())
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-p.Done():
			t.Fatal(p.Exited())
		}
	}
	summary := []string{}
	codes.Range(func(k, v any) bool {
		summary = append(summary, fmt.Sprintf("%v:%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	t.Logf("%d directory updates, %d webhooks, codes %v", updates.Load(), posted.Load(), summary)
	if problem != "" {
		t.Fatalf("a member whose files never changed was dropped by a directory read racing a kubelet update: %s", problem)
	}
}

// mutate returns the member's manifest with f applied to its decoded document.
func mutate(e poolEndpoint, f func(doc map[string]any)) []byte {
	var doc map[string]any
	if err := json.Unmarshal(e.manifest(), &doc); err != nil {
		panic(err)
	}
	f(doc)
	b, err := json.Marshal(doc)
	if err != nil {
		panic(err)
	}
	return b
}

func spec(doc map[string]any) map[string]any { return doc["spec"].(map[string]any) }

// Malformed and hostile members (bad JSON, wrong shapes, out-of-range values, a NAME
// that is no object name, a NAME.json naming another member, env files that are not
// KEY=VALUE, an unparsable or credential-bearing database URL, a huge file) never end
// the process, never take another member's route, are never routed themselves, are
// listed in /endpoints with an error that carries no credential, and leave a healthy
// member answering 200 throughout.
func TestPoolHostileMemberFiles(t *testing.T) {
	db := testsupport.MigratedDatabase(t, "shared")
	vol := newSecretVolume(t)
	vol.setMember(poolEndpoint{name: "steady", schema: "shared"}, db, "whsec_steady")
	p := startPool(t, vol.dir)
	if c := p.post(t, "/steady/", "whsec_steady"); c != http.StatusOK {
		t.Fatalf("steady: %d", c)
	}

	const pw = "s3cr3t-pa55word"
	secretURL := "postgres://postgres:" + pw + "@127.0.0.1:1/nowhere?sslmode=disable"
	const sigSecret = "whsec_topsecret_value"
	// member is what a member's files hold: NAME.json and NAME.env.
	type member struct {
		manifest []byte
		env      string
	}
	bad := map[string]member{}
	good := func(name string) poolEndpoint { return poolEndpoint{name: name, schema: "shared"} }
	envOK := "DATABASE_URL=" + db + "\nHOOKKEEPER_SIGNING_SECRET_0=" + sigSecret + "\n"
	bad["bad-json"] = member{[]byte(`{"apiVersion": "hookkeeper.dev/v1alpha1", "kind":`), envOK}
	for name, m := range map[string][]byte{
		"null-doc":  []byte(`null`),
		"array-doc": []byte(`[]`),
		"string":    []byte(`"steady"`),
		"impostor":  good("steady").manifest(), // NAME.json of impostor names steady
		"no-spec":   mutate(good("no-spec"), func(d map[string]any) { delete(d, "spec") }),
		"spec-null": mutate(good("spec-null"), func(d map[string]any) { d["spec"] = nil }),
		"path-rel": mutate(good("path-rel"), func(d map[string]any) {
			spec(d)["receiver"] = map[string]any{"path": "../steady/"}
		}),
		"path-empty": mutate(good("path-empty"), func(d map[string]any) { spec(d)["receiver"] = map[string]any{"path": ""} }),
		"maxconn-zero": mutate(good("maxconn-zero"), func(d map[string]any) {
			spec(d)["database"].(map[string]any)["maxConnections"] = 0
		}),
		"maxconn-huge": mutate(good("maxconn-huge"), func(d map[string]any) {
			spec(d)["database"].(map[string]any)["maxConnections"] = 1 << 40
		}),
		"inflight-neg": mutate(good("inflight-neg"), func(d map[string]any) {
			spec(d)["receiver"] = map[string]any{"path": "/", "maxInFlight": -5}
		}),
		"schema-inject": mutate(good("schema-inject"), func(d map[string]any) {
			spec(d)["database"].(map[string]any)["schema"] = `shared"; DROP TABLE shared.webhook_events; --`
		}),
		"no-provider": mutate(good("no-provider"), func(d map[string]any) { delete(spec(d), "provider") }),
		"no-secrets":  mutate(good("no-secrets"), func(d map[string]any) { delete(spec(d), "signingSecrets") }),
		"other-ns": mutate(good("other-ns"), func(d map[string]any) {
			d["metadata"].(map[string]any)["namespace"] = "kube-system"
		}),
	} {
		bad[name] = member{m, envOK}
	}
	bad["env-garbage"] = member{good("env-garbage").manifest(), "this is not an env file\n" + sigSecret + "\n"}
	bad["env-no-db"] = member{good("env-no-db").manifest(), "HOOKKEEPER_SIGNING_SECRET_0=" + sigSecret + "\n"}
	bad["env-bad-url"] = member{good("env-bad-url").manifest(), "DATABASE_URL=postgres://postgres:" + pw + "@[::1\nHOOKKEEPER_SIGNING_SECRET_0=" + sigSecret + "\n"}
	bad["env-dead-db"] = member{good("env-dead-db").manifest(), "DATABASE_URL=" + secretURL + "\nHOOKKEEPER_SIGNING_SECRET_0=" + sigSecret + "\n"}
	bad["env-crlf"] = member{good("env-crlf").manifest(), "DATABASE_URL=" + db + "\r\nHOOKKEEPER_SIGNING_SECRET_0=" + sigSecret + "\r\n"}
	bad["Upper"] = member{good("Upper").manifest(), envOK}
	bad["huge"] = member{mutate(good("huge"), func(d map[string]any) {
		d["metadata"].(map[string]any)["annotations"] = map[string]any{"pad": strings.Repeat("y", 8<<20)}
	}), envOK}

	for name, b := range bad {
		vol.files[name+".json"] = b.manifest
		vol.files[name+".env"] = []byte(b.env)
	}
	vol.publish()

	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		if c := p.post(t, "/steady/", "whsec_steady"); c != http.StatusOK {
			t.Fatalf("steady answered %d beside hostile members", c)
		}
		select {
		case <-p.Done():
			t.Fatal(p.Exited())
		case <-time.After(100 * time.Millisecond):
		}
	}
	eps := p.endpoints(t)
	if e := eps["steady"]; e.Key != "shop/steady" || e.Error != "" {
		t.Errorf("steady: %+v", e)
	}
	resp, err := http.Get(p.admin + "/endpoints")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, s := range []string{pw, sigSecret, db} {
		if strings.Contains(string(raw), s) {
			t.Errorf("/endpoints carries a credential %q", s)
		}
	}
	for name := range bad {
		e, listed := eps[name]
		served := listed && e.Key != ""
		code, _ := p.postErr("/"+name+"/", sigSecret)
		t.Logf("%-14s listed=%v key=%q code=%d error=%q", name, listed, e.Key, code, e.Error)
		switch name {
		case "env-dead-db", "other-ns", "huge", "maxconn-zero", "path-empty":
			// Valid (zero values take their defaults; a dead database answers 503).
		default:
			if served || code == http.StatusOK {
				t.Errorf("%s is served (key %q, POST %d) though its files are broken", name, e.Key, code)
			}
			if listed && e.Error == "" {
				t.Errorf("%s listed without an error", name)
			}
		}
	}
	// A member whose NAME.json claims another namespace is recorded under that
	// namespace's key, in a pool that "serves only endpoints of its own namespace".
	if e := eps["other-ns"]; e.Key != "" && !strings.HasPrefix(e.Key, "shop/") {
		t.Logf("note: member other-ns serves under key %q", e.Key)
	}
	// steady's schema is intact.
	conn := connect(t, db)
	if n := count(t, conn, `SELECT count(*) FROM shared.webhook_events WHERE endpoint = 'shop/steady'`); n < 2 {
		t.Errorf("steady receipts: %d", n)
	}
	_ = os.Getpid
	_ = filepath.Join
	_ = fmt.Sprint
}

// rawRequest sends a request line with an exact (unnormalised) target and returns the
// status line's code.
func rawPost(t *testing.T, base, target, secret string) int {
	t.Helper()
	body := demo.StripeEvent(nextEventID(), "payment_intent.succeeded", "ord-raw", 100, time.Now())
	req, err := http.NewRequest(http.MethodPost, base+"/", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque = target // sent verbatim as the request target
	code, err := sendSigned(req, body, secret)
	if err != nil {
		t.Fatalf("POST %s: %v", target, err)
	}
	return code
}

// Members named like a prefix of each other ("orders", "orders-eu") share one
// database and schema: a webhook signed with one's secret is refused by the other
// whatever the path variant, nothing is recorded under either; the same event id and
// entity key sent to both are two events, each recorded, moved and delivered under its
// own endpoint and to its own sink only.
func TestPoolPrefixNamesShareASchemaWithoutMixing(t *testing.T) {
	db := testsupport.MigratedDatabase(t, "shared")
	type delivery struct{ sink, key, body string }
	var mu sync.Mutex
	var got []delivery
	sink := func(name string) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			got = append(got, delivery{name, r.Header.Get("Idempotency-Key"), string(b)})
			mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(s.Close)
		return s.URL
	}
	vol := newSecretVolume(t)
	vol.setMember(poolEndpoint{name: "orders", schema: "shared", path: "/", sinkURL: sink("orders")}, db, "whsec_orders")
	vol.setMember(poolEndpoint{name: "orders-eu", schema: "shared", path: "/stripe", sinkURL: sink("orders-eu")}, db, "whsec_orders_eu")
	p := startPool(t, vol.dir)
	conn := connect(t, db)
	total := func() int { return count(t, conn, `SELECT count(*) FROM shared.webhook_events`) }

	// Path variants, each signed with either secret.
	accepted := map[string]int{}
	for _, target := range []string{
		"/orders/", "/orders", "/orders//", "/Orders/", "/orders%2F", "/orders/.", "/orders/./",
		"/orders-eu/../orders/", "/orders-eu/stripe/../../orders/", "/orders-eu%2F..%2Forders/",
		"/orders-eu/%2e%2e/orders/", "//orders/", "/./orders/", "/orders-eu/stripe/",
		"/orders-eu/stripe", "/ORDERS-EU/stripe", "/orders-eu%2Fstripe", "/orders-eu/Stripe",
	} {
		// orders-eu's secret against anything that could reach orders, and the reverse.
		for _, secret := range []string{"whsec_orders_eu", "whsec_orders"} {
			if c := rawPost(t, p.webhook, target, secret); c == http.StatusOK {
				accepted[secret]++
				t.Logf("%s signed with %s: 200", target, secret)
			}
		}
	}
	// A 200 must mean a receipt under the endpoint whose secret signed it.
	perEndpoint := map[string]int{}
	rows, err := conn.Query(t.Context(), `SELECT endpoint, count(*) FROM shared.webhook_events GROUP BY endpoint`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var ep string
		var n int
		if err := rows.Scan(&ep, &n); err != nil {
			t.Fatal(err)
		}
		perEndpoint[ep] = n
	}
	rows.Close()
	t.Logf("receipts after the path variants: %v, accepted per secret %v", perEndpoint, accepted)
	if perEndpoint["shop/orders"] != accepted["whsec_orders"] || perEndpoint["shop/orders-eu"] != accepted["whsec_orders_eu"] {
		t.Errorf("receipts per endpoint %v do not match the requests each one's own secret signed %v", perEndpoint, accepted)
	}
	for ep := range perEndpoint {
		if ep != "shop/orders" && ep != "shop/orders-eu" {
			t.Errorf("a receipt under unexpected endpoint %q", ep)
		}
	}

	before := total()
	// The same event id and entity key to both, each with its own secret.
	if c := p.postEvent(t, "/orders/", "whsec_orders", "evt_same", "ord-same"); c != http.StatusOK {
		t.Fatalf("orders: %d", c)
	}
	if c := p.postEvent(t, "/orders-eu/stripe", "whsec_orders_eu", "evt_same", "ord-same"); c != http.StatusOK {
		t.Fatalf("orders-eu: %d", c)
	}
	// A copy to each is a duplicate of its own only.
	for _, c := range []int{
		p.postEvent(t, "/orders/", "whsec_orders", "evt_same", "ord-same"),
		p.postEvent(t, "/orders-eu/stripe", "whsec_orders_eu", "evt_same", "ord-same"),
	} {
		if c != http.StatusOK {
			t.Fatalf("duplicate: %d", c)
		}
	}
	// Cross-signed copies with the same id: refused, and nothing recorded.
	if c := p.postEvent(t, "/orders/", "whsec_orders_eu", "evt_cross", "ord-cross"); c != http.StatusUnauthorized {
		t.Errorf("orders with orders-eu's secret: %d, want 401", c)
	}
	if c := p.postEvent(t, "/orders-eu/stripe", "whsec_orders", "evt_cross", "ord-cross"); c != http.StatusUnauthorized {
		t.Errorf("orders-eu with orders' secret: %d, want 401", c)
	}
	if n := total() - before; n != 2 {
		t.Errorf("%d receipts written, want 2 (one per endpoint)", n)
	}
	for _, ep := range []string{"shop/orders", "shop/orders-eu"} {
		if n := count(t, conn, `SELECT count(*) FROM shared.webhook_events WHERE endpoint = $1 AND event_id LIKE '%evt_same%'`, ep); n != 1 {
			t.Errorf("%s: %d receipts of evt_same, want 1", ep, n)
		}
		if n := count(t, conn, `SELECT count(*) FROM shared.entities WHERE endpoint = $1 AND entity_key = 'ord-same' AND state = 'paid'`, ep); n != 1 {
			t.Errorf("%s: %d paid entities ord-same, want 1", ep, n)
		}
		if n := count(t, conn, `SELECT count(*) FROM shared.outbox WHERE endpoint = $1 AND entity_key = 'ord-same'`, ep); n != 1 {
			t.Errorf("%s: %d outbox rows for ord-same, want 1", ep, n)
		}
	}
	if n := count(t, conn, `SELECT count(*) FROM shared.webhook_events WHERE event_id LIKE '%evt_cross%'`); n != 0 {
		t.Errorf("cross-signed event recorded %d times", n)
	}
	// Each sink receives only its own endpoint's effect, with distinct keys.
	testsupport.Eventually(t, 20*time.Second, 50*time.Millisecond, "both ord-same effects delivered", func() error {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, d := range got {
			if strings.Contains(d.body, "ord-same") {
				n++
			}
		}
		if n < 2 {
			return fmt.Errorf("%d delivered", n)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	keys := map[string]string{}
	for _, d := range got {
		if !strings.Contains(d.body, "ord-same") {
			continue
		}
		var doc map[string]any
		_ = json.Unmarshal([]byte(d.body), &doc)
		if prev, ok := keys[d.key]; ok && prev != d.sink {
			t.Errorf("idempotency key %q delivered to both %s and %s", d.key, prev, d.sink)
		}
		keys[d.key] = d.sink
		if ep, _ := doc["endpoint"].(string); ep != "" && ep != "shop/"+d.sink {
			t.Errorf("sink %s got an effect of %s: %s", d.sink, ep, d.body)
		}
	}
	sinks := map[string]int{}
	for _, s := range keys {
		sinks[s]++
	}
	if sinks["orders"] != 1 || sinks["orders-eu"] != 1 {
		t.Errorf("ord-same effects per sink: %v, want one each", sinks)
	}
}
