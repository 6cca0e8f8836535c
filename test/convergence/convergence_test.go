// Package convergence is the convergence checker of issue 12: random per-entity
// histories that the samples' state machines allow in provider order are delivered to a
// real `hookkeeper receiver` on real PostgreSQL in random order, duplicated, from
// concurrent senders, across a kill -9 of the receiver; then each entity's final state
// and the effects an independent sink received are compared with applying the same
// history in order with a model of the state machine. See docs/convergence.md.
package convergence

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

func TestMain(m *testing.M) { testsupport.Main(m) }

const (
	// defaultEntities per machine in the main run (two machines: 2,000 entities).
	defaultEntities = 1000
	// smallEntities per machine in the in-order and parking-off runs.
	smallEntities = 200
	senders       = 16
)

// killAt are the shares of requests acknowledged at which the receivers are killed.
var killAt = []float64{0.4, 0.75}

// seedFromEnv is $CONVERGENCE_SEED, else a random seed.
func seedFromEnv(t *testing.T) uint64 {
	if s := os.Getenv("CONVERGENCE_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CONVERGENCE_SEED=%q: %v", s, err)
		}
		return seed
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3]) // short enough to retype
}

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}

// TestConvergence runs the checker three ways. in_provider_order and parking_off_diverges
// guard the checker itself: in provider order every receiver must match the model, and
// with parking switched off (parkFor: 0s, or today's code) random order must produce
// divergences, or the checker could not see any. random_order_with_kill is the proof
// behind "any delivery order converges".
func TestConvergence(t *testing.T) {
	if testing.Short() {
		t.Skip("runs hookkeeper receivers against PostgreSQL for a minute or more")
	}
	seed := seedFromEnv(t)
	t.Logf("seed %d (reproduce: CONVERGENCE_SEED=%d go test ./test/convergence -run TestConvergence -v)", seed, seed)
	root := testsupport.RepoRoot(t)
	exe := hookkeeperBinary(t, root, t.TempDir())

	t.Run("in_provider_order", func(t *testing.T) {
		res := runConvergence(t, runOptions{root: root, exe: exe, seed: seed, stream: 1,
			entities: smallEntities, parkFor: "0s", inOrder: true})
		if res.divergent > 0 {
			t.Errorf("seed %d: %d of %d entities diverge although every history was delivered in provider order: "+
				"the checker or the receiver is wrong\nfirst: %s", seed, res.divergent, res.checked, res.first)
		}
	})
	t.Run("parking_off_diverges", func(t *testing.T) {
		res := runConvergence(t, runOptions{root: root, exe: exe, seed: seed, stream: 2,
			entities: smallEntities, parkFor: "0s"})
		if res.divergent == 0 {
			t.Errorf("seed %d: no divergence with parking off in random order: the checker cannot fail", seed)
		} else {
			t.Logf("as required, parking off diverges: %d of %d entities; first:\n%s", res.divergent, res.checked, res.first)
		}
	})
	t.Run("random_order_with_kill", func(t *testing.T) {
		res := runConvergence(t, runOptions{root: root, exe: exe, seed: seed, stream: 3,
			entities: envInt(t, "CONVERGENCE_ENTITIES", defaultEntities),
			parkFor:  os.Getenv("CONVERGENCE_PARK_FOR"), // empty: the API's default
			inOrder:  os.Getenv("CONVERGENCE_IN_ORDER") == "1", kill: true})
		if res.divergent > 0 {
			t.Errorf("seed %d: %d of %d entities diverge (reproduce: CONVERGENCE_SEED=%d go test ./test/convergence "+
				"-run TestConvergence/random_order_with_kill -v)\nfirst diverging entity: %s",
				seed, res.divergent, res.checked, seed, res.first)
		}
	})
}

type runOptions struct {
	root, exe string
	seed      uint64
	stream    uint64
	entities  int    // per machine
	parkFor   string // spec.stateMachine.parkFor when the API has it; empty: default
	inOrder   bool   // deliver each history in provider order
	kill      bool   // kill -9 the receivers at each share of killAt acknowledged requests
}

type runResult struct {
	checked, divergent int
	first              string
}

// receiptRow is a stored receipt, for comparison and failure messages.
type receiptRow struct {
	EventID, Type, Outcome, Detail string
	OccurredAt                     time.Time
}

func runConvergence(t *testing.T, o runOptions) runResult {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	rng := mrand.New(mrand.NewPCG(o.seed, o.stream))

	dbURL := testsupport.NewDatabase(t)
	snk := newSink(t)
	dir := t.TempDir()
	machines := []*machine{
		setupOrders(t, o, dir, snk.srv.URL+"/orders", dbURL),
		setupAdyen(t, o, dir, snk.srv.URL+"/adyen", dbURL),
	}
	if err := migrate(ctx, o.exe, machines[0].proc.manifest, dbURL); err != nil {
		// A binary from before parking decodes manifests strictly and does not know
		// parkFor: it is today's behaviour, parking off.
		if o.parkFor == "" || !strings.Contains(err.Error(), `unknown field "parkFor"`) {
			t.Fatal(err)
		}
		t.Logf("this hookkeeper binary does not accept spec.stateMachine.parkFor: running without it (parking off, today's behaviour)")
		for _, m := range machines {
			if err := m.sample.writeManifest(m.proc.manifest, ""); err != nil {
				t.Fatal(err)
			}
		}
		if err := migrate(ctx, o.exe, machines[0].proc.manifest, dbURL); err != nil {
			t.Fatal(err)
		}
	} else if o.parkFor != "" {
		t.Logf("spec.stateMachine.parkFor: %s", o.parkFor)
	}
	now := time.Now()
	for _, m := range machines {
		m.generate(rng, o.entities, now)
	}
	createAdyenTable(t, ctx, dbURL, machines[1])
	for _, m := range machines {
		if err := m.proc.start(ctx); err != nil {
			t.Fatalf("%s: %v", m.name, err)
		}
	}

	var reqs []*request
	var jobs [][]*request
	if o.inOrder {
		reqs, jobs = planInOrder(rng, machines)
	} else {
		reqs = planRandom(rng, machines)
		for _, r := range reqs {
			jobs = append(jobs, []*request{r})
		}
	}
	buildBodies(t, reqs)
	events := 0
	for _, m := range machines {
		for _, e := range m.entities {
			events += len(e.history)
		}
	}
	items := 0
	for _, r := range reqs {
		items += len(r.items)
	}
	t.Logf("%d entities, %d events, %d deliveries (copies included) in %d requests, %d senders, in order %v, kill %v (setup %.1fs)",
		len(machines)*o.entities, events, items, len(reqs), senders, o.inOrder, o.kill, time.Since(began).Seconds())

	sendBegan := time.Now()
	st := deliverAll(t, ctx, machines, reqs, jobs, o.kill)
	if t.Failed() {
		return runResult{}
	}
	t.Logf("all %d requests acknowledged in %.1fs: %d attempts refused or failed and retried; %d entities had several deliveries in flight at once%s",
		len(reqs), time.Since(sendBegan).Seconds(), st.refused, st.overlapped, st.killNote)

	drainBegan := time.Now()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var pending, dead, rows int
	err = testsupport.Poll(ctx, 2*time.Minute, 100*time.Millisecond, func() error {
		err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE delivered_at IS NULL AND dead_at IS NULL),
  count(*) FILTER (WHERE dead_at IS NOT NULL), count(*) FROM hookkeeper.outbox`).Scan(&pending, &dead, &rows)
		if err != nil {
			return err
		}
		if pending != 0 {
			return fmt.Errorf("%d outbox rows undelivered", pending)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("waiting for the outbox to drain: %v", err)
	}
	posts, unique, repeats, problems := snk.summary()
	t.Logf("outbox drained in %.1fs: %d rows, %d dead; sink: %d POSTs, %d unique keys, %d repeated deliveries of a key (information: redelivery after a crash is allowed)",
		time.Since(drainBegan).Seconds(), rows, dead, posts, unique, repeats)
	if dead > 0 {
		t.Errorf("%d outbox rows were dead-lettered although the sink answers 2xx", dead)
	}
	if len(problems) > 0 {
		t.Errorf("sink problems:\n%s", joinLines(problems))
	}

	var res runResult
	for _, m := range machines {
		r := compare(t, ctx, conn, m, snk)
		res.checked += r.checked
		res.divergent += r.divergent
		if res.first == "" {
			res.first = r.first
		}
	}
	t.Logf("run took %.1fs", time.Since(began).Seconds())
	return res
}

// setupOrders is the orders sample (Stripe) in hookkeeper's managed entity table with
// onUnmatched: Create, so orders need not exist beforehand.
func setupOrders(t *testing.T, o runOptions, dir, sinkURL, dbURL string) *machine {
	s, err := loadSample(o.root, ordersSample)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.edit(map[string]any{"onUnmatched": "Create"}); err != nil {
		t.Fatal(err)
	}
	m := &machine{name: "orders", provider: s.we.Spec.Provider.Type, sample: s, we: s.we, attrs: []string{""},
		secret: "whsec_convergence_" + testsupport.RandomHex(16)}
	if m.provider != v1alpha1.ProviderStripe {
		t.Fatalf("%s: provider %s, want Stripe", ordersSample, m.provider)
	}
	return finishMachine(t, o, m, dir, sinkURL, dbURL)
}

// setupAdyen is the Adyen sample bound to an app table (entity.table) whose rows exist
// in the initial state before the first event.
func setupAdyen(t *testing.T, o runOptions, dir, sinkURL, dbURL string) *machine {
	s, err := loadSample(o.root, adyenSample)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.edit(map[string]any{
		"onUnmatched": "Record",
		"table": map[string]any{"schema": "public", "name": adyenTable,
			"keyColumn": "merchant_reference", "stateColumn": "status"},
	}); err != nil {
		t.Fatal(err)
	}
	m := &machine{name: "adyen", provider: s.we.Spec.Provider.Type, sample: s, we: s.we, attrs: []string{"true", "false"},
		secret: strings.ToUpper(testsupport.RandomHex(32))}
	if m.provider != v1alpha1.ProviderAdyen {
		t.Fatalf("%s: provider %s, want Adyen", adyenSample, m.provider)
	}
	return finishMachine(t, o, m, dir, sinkURL, dbURL)
}

func finishMachine(t *testing.T, o runOptions, m *machine, dir, sinkURL, dbURL string) *machine {
	var err error
	if m.model, err = newModel(m.we.Spec.StateMachine); err != nil {
		t.Fatal(err)
	}
	m.endpoint = m.we.Namespace + "/" + m.we.Name
	manifest := filepath.Join(dir, m.name+".json")
	if err := m.sample.writeManifest(manifest, o.parkFor); err != nil {
		t.Fatal(err)
	}
	m.proc = newReceiverProc(t, o.exe, manifest, map[string]string{
		config.EnvDatabaseURL:               dbURL,
		config.EnvSigningSecretPrefix + "0": m.secret,
		config.EnvSinkURL:                   sinkURL,
	})
	return m
}

// migrate runs `hookkeeper migrate`, as the operator's migration Job does.
func migrate(ctx context.Context, exe, manifest, dbURL string) error {
	cmd := exec.CommandContext(ctx, exe, "migrate", "--endpoint", manifest)
	cmd.Env = append(os.Environ(), config.EnvDatabaseURL+"="+dbURL, config.EnvEndpoint+"=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("hookkeeper migrate: %w\n%s", err, out)
	}
	return nil
}

// createAdyenTable is the app's own payments table, one row per entity in the initial
// state.
func createAdyenTable(t *testing.T, ctx context.Context, dbURL string, m *machine) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, `CREATE TABLE public.`+adyenTable+` (
  merchant_reference text PRIMARY KEY,
  status             text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	rows := make([][]any, len(m.entities))
	for i, e := range m.entities {
		rows[i] = []any{e.key, m.model.Initial}
	}
	if _, err := conn.CopyFrom(ctx, pgx.Identifier{"public", adyenTable},
		[]string{"merchant_reference", "status"}, pgx.CopyFromRows(rows)); err != nil {
		t.Fatal(err)
	}
}

type sendStats struct {
	refused    int64
	overlapped int
	killNote   string
}

// deliverAll runs the senders: each takes a job (one request in random order, an
// entity's requests in provider order) and sends every request until it gets a 2xx,
// retrying connection errors and non-2xx answers after a short pause, as providers do.
// With kill, the receivers are killed with SIGKILL whenever a share of killAt of the
// requests are acknowledged, and restarted on the same addresses while the senders keep retrying.
func deliverAll(t *testing.T, ctx context.Context, machines []*machine, reqs []*request, jobs [][]*request, kill bool) sendStats {
	var (
		st       sendStats
		acked    atomic.Int64
		refused  atomic.Int64
		mu       sync.Mutex
		inFlight = map[*entity]int{}
		wg       sync.WaitGroup
		failed   atomic.Value
	)
	deadline := time.Now().Add(3 * time.Minute)
	client := &http.Client{Timeout: 15 * time.Second}
	queue := make(chan []*request)
	sendOne := func(r *request, rng *mrand.Rand) error {
		mu.Lock()
		var ents []*entity
		for _, it := range r.items {
			if !slices.Contains(ents, it.e) {
				ents = append(ents, it.e)
				inFlight[it.e]++
				if inFlight[it.e] > 1 {
					it.e.overlapped = true
				}
			}
		}
		mu.Unlock()
		defer func() {
			mu.Lock()
			for _, e := range ents {
				inFlight[e]--
			}
			mu.Unlock()
		}()
		for {
			r.attempts++
			ok, why := attempt(client, r)
			if ok {
				r.acked = acked.Add(1)
				return nil
			}
			refused.Add(1)
			if time.Now().After(deadline) {
				return fmt.Errorf("request %d (%s) never acknowledged after %d attempts: %s", r.seq, r.m.name, r.attempts, why)
			}
			// A provider's retry interval, not a wait for a condition.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(20+rng.IntN(40)) * time.Millisecond):
			}
		}
	}
	for i := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := mrand.New(mrand.NewPCG(uint64(i), 7))
			for job := range queue {
				for _, r := range job {
					if err := sendOne(r, rng); err != nil {
						failed.CompareAndSwap(nil, err)
						return
					}
				}
			}
		}()
	}

	killed := make(chan error, 1)
	if kill {
		go func() {
			for _, share := range killAt {
				threshold := int64(float64(len(reqs)) * share)
				err := testsupport.Poll(ctx, 3*time.Minute, 5*time.Millisecond, func() error {
					if n := acked.Load(); n < threshold {
						return fmt.Errorf("%d acknowledged", n)
					}
					return nil
				})
				if err != nil {
					killed <- fmt.Errorf("load never reached %d acknowledged requests: %w", threshold, err)
					return
				}
				at := acked.Load()
				refusedBefore := refused.Load()
				began := time.Now()
				for _, m := range machines {
					m.proc.kill()
				}
				for _, m := range machines {
					if err := m.proc.start(ctx); err != nil {
						killed <- fmt.Errorf("restart %s: %w", m.name, err)
						return
					}
				}
				st.killNote += fmt.Sprintf("; receivers killed (SIGKILL) after %d of %d requests were acknowledged, restarted in %.1fs",
					at, len(reqs), time.Since(began).Seconds())
				if refused.Load() == refusedBefore {
					st.killNote += " (no request was refused meanwhile)"
				}
			}
			killed <- nil
		}()
	}

	go func() {
		defer close(queue)
		for _, job := range jobs {
			select {
			case queue <- job:
			case <-ctx.Done():
				return
			}
		}
	}()
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		for _, m := range machines {
			t.Log(m.name + " " + m.proc.logTail())
		}
		t.Fatal(err)
	}
	if kill {
		if err := <-killed; err != nil {
			t.Fatal(err)
		}
		for _, m := range machines {
			if m.proc.starts < 2 {
				t.Fatalf("%s receiver was never restarted", m.name)
			}
		}
	}
	st.refused = refused.Load()
	for _, m := range machines {
		for _, e := range m.entities {
			if e.overlapped {
				st.overlapped++
			}
		}
	}
	return st
}

// attempt sends r once, signed now. Adyen must answer [accepted].
func attempt(client *http.Client, r *request) (bool, string) {
	req, err := newPost(r.m.proc.url(), r.body)
	if err != nil {
		return false, err.Error()
	}
	if r.m.provider == v1alpha1.ProviderStripe {
		// Signed afresh on every attempt, as Stripe does.
		req.Header.Set("Stripe-Signature", demo.StripeSignature(r.m.secret, r.body, time.Now()))
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err.Error()
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return false, fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	if r.m.provider == v1alpha1.ProviderAdyen && strings.TrimSpace(string(body)) != "[accepted]" {
		return false, fmt.Sprintf("%d %q, want [accepted]", resp.StatusCode, body)
	}
	return true, ""
}

type machineResult struct {
	checked, ambiguous, divergent int
	first                         string
}

// compare reads each entity's final state and receipts and compares them, and the
// sink's effects, with the model's in-order run.
func compare(t *testing.T, ctx context.Context, conn *pgx.Conn, m *machine, snk *sink) machineResult {
	states := map[string]string{}
	var q string
	if m.we.Spec.Entity.Table != nil {
		q = `SELECT merchant_reference, status FROM public.` + adyenTable
	} else {
		q = `SELECT entity_key, state FROM hookkeeper.entities WHERE endpoint = $1`
	}
	var args []any
	if m.we.Spec.Entity.Table == nil {
		args = append(args, m.endpoint)
	}
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k, s string
		if err := rows.Scan(&k, &s); err != nil {
			t.Fatal(err)
		}
		states[k] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	receipts := map[string][]receiptRow{}
	outcomes := map[string]int{}
	byID := map[string]receiptRow{}
	rows, err = conn.Query(ctx, `SELECT event_id, event_type, entity_key, outcome, detail, occurred_at
FROM hookkeeper.webhook_events WHERE endpoint = $1 ORDER BY id`, m.endpoint)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r receiptRow
		var key string
		var occurred *time.Time
		if err := rows.Scan(&r.EventID, &r.Type, &key, &r.Outcome, &r.Detail, &occurred); err != nil {
			t.Fatal(err)
		}
		if occurred != nil {
			r.OccurredAt = *occurred
		}
		receipts[key] = append(receipts[key], r)
		byID[r.EventID] = r
		label := r.Outcome
		if r.Detail != "" && len(r.Detail) < 40 {
			label += " (" + r.Detail + ")"
		}
		outcomes[label]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	var res machineResult
	kinds := map[string]int{}
	overlapped, repeatedKeys, outboxEffects := 0, 0, 0
	for _, e := range m.entities {
		res.checked++
		if e.ambiguous {
			res.ambiguous++
		}
		if e.overlapped {
			overlapped++
		}
		var why []string
		for _, ev := range e.history {
			if _, ok := byID[ev.ID]; !ok {
				why = append(why, "event "+ev.ID+" was acknowledged but has no receipt")
			}
		}
		state, ok := states[e.key]
		if !ok {
			state = "<no entity>"
		}
		effects, repeated := snk.effects(m.endpoint, e.key)
		repeatedKeys += repeated
		outboxEffects += len(effects)
		if state != e.expected.State {
			why = append(why, "final state")
		}
		switch {
		case !e.ambiguous && !slices.Equal(effects, e.expected.Effects):
			why = append(why, "effects")
		case e.ambiguous && !subsequence(effects, e.expected.Effects):
			why = append(why, "effects not a subsequence of provider order's")
		}
		if len(why) == 0 {
			continue
		}
		res.divergent++
		for _, w := range why {
			kinds[w]++
		}
		if res.first == "" {
			res.first = fmt.Sprintf("%s  diverges in: %s\n  expected: state %s, effects %v\n  actual:   state %s, effects %v (%d keys delivered more than once)\n",
				e.describe(receipts[e.key]), strings.Join(why, ", "),
				e.expected.State, e.expected.Effects, state, effects, repeated)
		}
	}
	if n := snk.uniqueKeys(m.endpoint); n != outboxEffects {
		t.Errorf("%s: the sink has %d unique keys but %d are attributed to this run's entities", m.name, n, outboxEffects)
	}
	t.Logf("%s (%s): %d entities checked (%d ambiguous: final state, effects a subsequence; %d: state and effects), %d diverge %v; %d had concurrent deliveries; %d keys delivered more than once; receipts by outcome %v",
		m.name, m.endpoint, res.checked, res.ambiguous, res.checked-res.ambiguous, res.divergent, kinds, overlapped, repeatedKeys, outcomes)
	return res
}

// subsequence reports whether got holds only effects of want, in want's order, each at
// most as often: what an ambiguous history may emit when an event that provider order
// applies no longer applies.
func subsequence(got, want []string) bool {
	i := 0
	for _, g := range got {
		for i < len(want) && want[i] != g {
			i++
		}
		if i == len(want) {
			return false
		}
		i++
	}
	return true
}
