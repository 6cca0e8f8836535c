package dataplanecmd_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
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
