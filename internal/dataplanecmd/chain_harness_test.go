package dataplanecmd_test

// The harness of the convergence tests (replicas_test.go: one receiver, then replicas):
// an endpoint whose entities go through a chain of steps, providers' posts of every
// step out of order with copies and forgeries, senders that spread them over receiver
// replicas and retry what is not acknowledged, and the checks of where every entity
// ends.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/metrics"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// chainStep is one step of a chain endpoint's entities: the transition name, the event
// type that takes it, the state it leads to and the effect it emits.
type chainStep struct{ name, on, to, emit string }

// chainMachine is the state machine that takes an entity from initial through steps,
// one after the other.
func chainMachine(initial string, steps []chainStep) v1alpha1.StateMachineSpec {
	m := v1alpha1.StateMachineSpec{Initial: initial, States: []string{initial}}
	from := initial
	for _, s := range steps {
		m.States = append(m.States, s.to)
		m.Transitions = append(m.Transitions, v1alpha1.Transition{Name: s.name, On: []string{s.on},
			From: []string{from}, To: s.to, Emit: s.emit})
		from = s.to
	}
	return m
}

// chainSteps are an order's events in provider order, with the effect each emits.
var chainSteps = []chainStep{
	{"open", "payment_intent.created", "pending", "order.opened"},
	{"capture", "payment_intent.succeeded", "paid", "order.paid"},
	{"refund", "charge.refunded", "refunded", "order.refunded"},
	{"close", "charge.dispute.closed", "closed", "order.closed"},
}

// chainEndpoint is the shared Stripe endpoint (shop/chain, at /chain) whose orders go
// new -> pending -> paid -> refunded -> closed, one event type per step (chainSteps),
// each emitting an effect; an event that arrives before the order exists creates it,
// and one that arrives before its step parks.
func chainEndpoint() *v1alpha1.WebhookEndpoint {
	we := testsupport.StripeEndpoint("http://127.0.0.1:9/")
	we.Name = "chain"
	we.Spec.Database.MaxConnections = 8
	we.Spec.StateMachine = chainMachine("new", chainSteps)
	we.Spec.Receiver.Path = chainPath
	return we
}

// chainPath is chainEndpoint's receiver path.
const chainPath = "/chain"

// replicaPost is one request a provider (or an attacker) sends: to which replica first
// (a retry goes to the other, as a Service would spread it), the event ids a 2xx
// promises are stored, and how to sign and send it. A forged request must be answered
// 401, once, and is not retried.
type replicaPost struct {
	what    string
	replica int
	ids     []string
	forged  bool
	send    func(ctx context.Context, client *http.Client, base string) (int, error)
}

// startReplicas runs n `hookkeeper receiver` commands (group commit at its defaults, no
// dispatcher) serving we, with the database URL and signing secret already in the
// environment, and returns each one's webhook base URL (http://host:port).
func startReplicas(t *testing.T, ctx context.Context, we *v1alpha1.WebhookEndpoint, n int) []string {
	t.Helper()
	path := testsupport.ManifestFile(t, we)
	bases := make([]string, n)
	for i := range n {
		webhookAddr, _ := startReceiver(t, ctx, fmt.Sprintf("receiver replica %d", i),
			"--endpoint", path, "--dispatcher=false", "--log-level", "error", "--shutdown-timeout", "10s")
		bases[i] = "http://" + webhookAddr
	}
	return bases
}

// spread is how spreadAcrossReplicas sends.
type spread struct {
	senders int
	// hangUp: each post's first three attempts give up after 1 to 15 ms, as a provider
	// with a short timeout does, so members leave groups mid-transaction.
	hangUp bool
	// acked, when set, is called after each 2xx that was read back (a SessionKiller's
	// Progress).
	acked func()
}

// spreadAcrossReplicas sends posts from how.senders goroutines at once, each to its
// replica and, while it is not answered 2xx, again to the next one after a few
// milliseconds. Every 2xx must name events already stored when read back; a request
// that gets no answer at all (a transaction stuck in a lock wait, a deadlock nobody
// broke) fails the test, as does any 4xx but a forged request's 401, and so does any
// deadlock PostgreSQL reports for the database: groups and batches take their locks in
// key order. It returns how many attempts were not answered 2xx (5xx, or abandoned by a
// sender that hung up) and were retried.
func spreadAcrossReplicas(t *testing.T, ctx context.Context, checker *pgxpool.Pool, bases []string, posts []replicaPost, how spread) int64 {
	t.Helper()
	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: how.senders}}
	// Connections dialled for requests that were abandoned hold the receiver's graceful
	// shutdown for 5 s (net/http counts a new connection as idle only after 5 s).
	defer client.CloseIdleConnections()
	var refused, slowest atomic.Int64
	work := make(chan replicaPost)
	var mu sync.Mutex
	var failures []error
	fail := func(err error) { mu.Lock(); failures = append(failures, err); mu.Unlock() }
	var wg sync.WaitGroup
	for range how.senders {
		wg.Go(func() {
			for p := range work {
				deadline := time.Now().Add(40 * time.Second)
				for attempt := 0; ; attempt++ {
					base := bases[(p.replica+attempt)%len(bases)]
					actx, acancel := context.WithCancel(ctx)
					if how.hangUp && attempt < 3 {
						actx, acancel = context.WithTimeout(ctx, time.Duration(1+rand.IntN(15))*time.Millisecond)
					}
					sent := time.Now()
					status, err := p.send(actx, client, base)
					hungUp := err != nil && actx.Err() != nil && ctx.Err() == nil
					acancel()
					for took := int64(time.Since(sent)); ; {
						if old := slowest.Load(); took <= old || slowest.CompareAndSwap(old, took) {
							break
						}
					}
					done := err == nil && status < 500
					switch {
					case hungUp:
						refused.Add(1)
						done = false
					case p.forged:
						if err != nil || status != http.StatusUnauthorized {
							fail(fmt.Errorf("%s answered %d (%s), want 401", p.what, status, fmt.Sprint(err)))
						}
						done = true
					case err == nil && status == http.StatusOK:
						var stored int
						if err := checker.QueryRow(ctx, `SELECT count(DISTINCT event_id) FROM hookkeeper.webhook_events WHERE event_id = ANY($1)`, p.ids).Scan(&stored); err != nil {
							fail(err)
						} else if want := len(distinct(p.ids)); stored != want {
							fail(fmt.Errorf("%s answered 200 with %d of its %d events stored", p.what, stored, want))
						}
						if how.acked != nil {
							how.acked()
						}
					case err != nil && ctx.Err() == nil:
						fail(fmt.Errorf("%s to %s left unanswered: %w", p.what, base, err))
					case err == nil && status >= 400 && status < 500:
						fail(fmt.Errorf("%s answered %d", p.what, status))
					default:
						refused.Add(1)
					}
					if done {
						break
					}
					if ctx.Err() != nil || time.Now().After(deadline) {
						fail(fmt.Errorf("%s never acknowledged: %d, %s", p.what, status, fmt.Sprint(err)))
						break
					}
					select {
					case <-ctx.Done():
					case <-time.After(time.Duration(1+rand.IntN(5)) * time.Millisecond):
					}
				}
			}
		})
	}
	for _, p := range posts {
		work <- p
	}
	close(work)
	wg.Wait()
	for _, err := range failures {
		t.Error(err)
	}
	var deadlocks int64
	if err := checker.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&deadlocks); err != nil {
		t.Error(err)
	}
	t.Logf("slowest answer %s", time.Duration(slowest.Load()).Round(time.Millisecond))
	if deadlocks != 0 {
		t.Errorf("PostgreSQL reported %d deadlocks: a transaction took its entities' locks out of key order", deadlocks)
	}
	return refused.Load()
}

func distinct(ids []string) []string {
	s := slices.Clone(ids)
	slices.Sort(s)
	return slices.Compact(s)
}

// shuffled returns posts in a random order from rng.
func shuffled(rng *rand.Rand, posts []replicaPost) []replicaPost {
	rng.Shuffle(len(posts), func(a, b int) { posts[a], posts[b] = posts[b], posts[a] })
	return posts
}

// chainOutcome checks every entity of keys against provider order: stateSQL (one row,
// $1 the key) must read want, and its outbox rows must be effects in this order; then
// that events receipts exist, each applied, and that the outbox holds exactly wantKeys.
func chainOutcome(t *testing.T, ctx context.Context, checker *pgxpool.Pool, keys []string, stateSQL, want string, effects []string, events int, wantKeys []string) {
	t.Helper()
	for _, key := range keys {
		var got string
		if err := checker.QueryRow(ctx, `SELECT COALESCE((`+stateSQL+`), 'missing')
			|| ' | ' || COALESCE((SELECT string_agg(event_type, ',' ORDER BY id) FROM hookkeeper.outbox WHERE entity_key = $1), '')`, key).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if w := want + " | " + strings.Join(effects, ","); got != w {
			t.Errorf("%s: %s, want %s", key, got, w)
		}
	}
	rows := testsupport.NewRows(checker, store.TablesIn(testsupport.StripeEndpointSchema))
	if got, applied := rows.Receipts(t), rows.ReceiptsWithOutcome(t, receipt.OutcomeApplied); got != events || applied != events {
		t.Errorf("%d receipts, %d applied; want %d of each", got, applied, events)
	}
	slices.Sort(wantKeys)
	var got string
	if err := checker.QueryRow(ctx, `SELECT COALESCE(string_agg(dedupe_key, ',' ORDER BY dedupe_key), '') FROM hookkeeper.outbox`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != strings.Join(wantKeys, ",") {
		t.Errorf("outbox keys differ from one per applied event: %d rows, want %d", strings.Count(got, ",")+1, len(wantKeys))
	}
}

// entityStateSQL reads a chain entity (hookkeeper's own entities table) as "state vN",
// for chainOutcome.
const entityStateSQL = `SELECT state || ' v' || version FROM hookkeeper.entities WHERE entity_key = $1`

// stripeChain is a Stripe chain run's deliveries (posts, to chainEndpoint) and what
// they must leave behind: the genuine body of each event id and the events' outbox
// dedupe keys.
type stripeChain struct {
	orders     int
	posts      []replicaPost
	bodies     map[string][]byte
	dedupeKeys []string
}

// stripeChainPosts are the Stripe deliveries of orders orders (keys orderKey(o)), each
// event of chainSteps two or three times, the copies alternating between replicas,
// provider order a second apart per step; and an attacker's, racing them: each event
// once more with the same id but moved to the next order at amount 1, signed with a
// key of the attacker's, and once as the genuine body signed an hour ago (a replay
// outside Stripe's tolerance).
func stripeChainPosts(rng *rand.Rand, orders int, secret string) stripeChain {
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	var posts []replicaPost
	var dedupeKeys []string
	bodies := map[string][]byte{}
	for o := range orders {
		for i, s := range chainSteps {
			id := fmt.Sprintf("evt_%d_%s", o, s.on)
			at := base.Add(time.Duration(o*10+i) * time.Second)
			body := demo.StripeEvent(id, s.on, orderKey(o), 500, at)
			bodies[id] = body
			dedupeKeys = append(dedupeKeys, receipt.DedupeKey("shop/chain", id, s.emit))
			first := rng.IntN(2)
			for c := range 2 + rng.IntN(2) {
				posts = append(posts, replicaPost{what: id, replica: first + c, ids: []string{id},
					send: func(ctx context.Context, client *http.Client, url string) (int, error) {
						return demo.PostStripeWith(ctx, client, url+chainPath, secret, body)
					}})
			}
			forged := demo.StripeEvent(id, s.on, orderKey((o+1)%orders), 1, at)
			posts = append(posts, replicaPost{what: "forged " + id, replica: rng.IntN(2), forged: true,
				send: func(ctx context.Context, client *http.Client, url string) (int, error) {
					return demo.PostStripeWith(ctx, client, url+chainPath, "whsec_attacker", forged)
				}},
				replicaPost{what: "replayed " + id, replica: rng.IntN(2), forged: true,
					send: func(ctx context.Context, client *http.Client, url string) (int, error) {
						req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+chainPath, bytes.NewReader(body))
						if err != nil {
							return 0, err
						}
						req.Header.Set("Content-Type", "application/json")
						req.Header.Set("Stripe-Signature", demo.StripeSignature(secret, body, time.Now().Add(-time.Hour)))
						return status(client.Do(req))
					}})
		}
	}
	return stripeChain{orders: orders, posts: shuffled(rng, posts), bodies: bodies, dedupeKeys: dedupeKeys}
}

// checkOutcome checks that every order ended where provider order puts it
// (chainOutcome, stateSQL reading want) and that each receipt holds the body its event
// was signed with, whoever answered or left (storedBodies).
func (c stripeChain) checkOutcome(t *testing.T, run *chainRun, stateSQL, want string) {
	t.Helper()
	chainOutcome(t, run.ctx, run.checker, orderKeys(c.orders), stateSQL, want, emits(chainSteps), len(c.bodies), c.dedupeKeys)
	storedBodies(t, run.ctx, run.checker, c.bodies)
}

// status reads a response to its end and returns its status code.
func status(resp *http.Response, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// storedBodies checks that each event's receipt holds the body the provider signed,
// whatever was forged beside it.
func storedBodies(t *testing.T, ctx context.Context, checker *pgxpool.Pool, bodies map[string][]byte) {
	t.Helper()
	for id, body := range bodies {
		var same bool
		if err := checker.QueryRow(ctx, `SELECT payload = $2::jsonb FROM hookkeeper.webhook_events WHERE event_id = $1`, id, string(body)).Scan(&same); err != nil || !same {
			t.Errorf("receipt of %s does not hold its signed body (%v)", id, err)
		}
	}
}

// groupSizes reads the receiver's group-size histogram for shop/chain: how many receipt
// transactions ran, and how many of them alone.
func groupSizes(t *testing.T) (all, alone uint64) {
	t.Helper()
	var m dto.Metric
	if err := metrics.GroupSize.WithLabelValues("shop/chain").(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	h := m.GetHistogram()
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == 1 {
			alone = b.GetCumulativeCount()
		}
	}
	return h.GetSampleCount(), alone
}

// emits are the effects of steps, in order.
func emits(steps []chainStep) []string {
	var out []string
	for _, s := range steps {
		out = append(out, s.emit)
	}
	return out
}

// orderKey is the entity key of order o of a chain run.
func orderKey(o int) string { return fmt.Sprintf("ord-%d", o) }

// orderKeys are the keys of orders 0 to n-1.
func orderKeys(n int) []string {
	keys := make([]string, n)
	for o := range keys {
		keys[o] = orderKey(o)
	}
	return keys
}

// chainRun is one convergence run: its database, a connection pool that checks what
// the receivers stored, and the run's deadline.
type chainRun struct {
	ctx     context.Context
	dbURL   string
	checker *pgxpool.Pool
}

// newChainRun migrates a database and puts its URL and the signing secret in the
// environment the receivers read; the receivers' sessions carry appName when it is set
// (testsupport.KillSessions finds them by it). The run ends after 60 s or at cleanup.
func newChainRun(t *testing.T, secret, appName string) *chainRun {
	t.Helper()
	dbURL := testsupport.MigratedDatabase(t, testsupport.StripeEndpointSchema)
	receiverURL := dbURL
	if appName != "" {
		sep := "?"
		if strings.Contains(dbURL, "?") {
			sep = "&"
		}
		receiverURL += sep + "application_name=" + appName
	}
	t.Setenv(config.EnvDatabaseURL, receiverURL)
	t.Setenv(config.EnvSigningSecretPrefix+"0", secret)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	checker, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(checker.Close)
	return &chainRun{ctx: ctx, dbURL: dbURL, checker: checker}
}

// spread sends posts over bases (spreadAcrossReplicas) and checks that the receivers
// formed at least one group. It returns the attempts that were retried.
func (r *chainRun) spread(t *testing.T, bases []string, posts []replicaPost, how spread) int64 {
	t.Helper()
	groupsBefore, alonesBefore := groupSizes(t)
	refused := spreadAcrossReplicas(t, r.ctx, r.checker, bases, posts, how)
	groups, alones := groupSizes(t)
	groups, alones = groups-groupsBefore, alones-alonesBefore
	t.Logf("%d posts over %d receivers, %d attempts not answered 2xx (retried); %d receipt transactions, %d of them alone",
		len(posts), len(bases), refused, groups, alones)
	if groups == alones {
		t.Error("no receipt transaction was shared: the run formed no group")
	}
	return refused
}
