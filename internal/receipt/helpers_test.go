package receipt

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

func TestMain(m *testing.M) { testsupport.Main(m) }

const schema = "hk"

// machine is the Stripe sample's order machine plus a dispute transition for stale checks.
func machine() v1alpha1.StateMachineSpec {
	return v1alpha1.StateMachineSpec{
		Initial: "payment_pending",
		States:  []string{"payment_pending", "paid", "failed", "refunded", "disputed"},
		Transitions: []v1alpha1.Transition{
			{Name: "capture", On: []string{"payment_intent.succeeded"}, From: []string{"payment_pending"}, To: "paid",
				Guard: "event.amount == entity.amount", Emit: "order.paid"},
			{Name: "fail", On: []string{"payment_intent.payment_failed"}, From: []string{"payment_pending"}, To: "failed"},
			{Name: "refund", On: []string{"charge.refunded"}, From: []string{"paid"}, To: "refunded", Emit: "order.refunded"},
			{Name: "dispute", On: []string{"charge.dispute.created"}, From: []string{"paid", "refunded"}, To: "disputed", Emit: "order.disputed"},
		},
	}
}

func endpointSpec(onUnmatched v1alpha1.OnUnmatched, table *v1alpha1.EntityTableSpec) *v1alpha1.WebhookEndpoint {
	return &v1alpha1.WebhookEndpoint{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop"},
		Spec: v1alpha1.WebhookEndpointSpec{
			Provider:       v1alpha1.ProviderSpec{Type: v1alpha1.ProviderStripe},
			SigningSecrets: []v1alpha1.SigningSecret{{SecretKeyRef: secretRef("s", "k")}},
			Database:       v1alpha1.DatabaseSpec{URLSecretRef: secretRef("db", "uri"), Schema: schema},
			Entity:         v1alpha1.EntitySpec{Table: table, OnUnmatched: onUnmatched},
			StateMachine:   machine(),
			Delivery:       v1alpha1.DeliverySpec{Sink: v1alpha1.SinkSpec{URL: "http://sink.local/"}},
		},
	}
}

// fixture is a migrated database, a pool and a Recorder for one endpoint.
type fixture struct {
	t     *testing.T
	url   string
	pool  *pgxpool.Pool
	ep    *config.Endpoint
	rec   *Recorder
	rows  *testsupport.Rows // counts rows of the endpoint's tables, through pool
	ctx   context.Context
	dials atomic.Int64
	// writes counts client-to-server writes: one per round trip (pgx flushes a batch
	// once, at its Sync).
	writes atomic.Int64
}

func newFixture(t *testing.T, we *v1alpha1.WebhookEndpoint, setupSQL ...string) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	url := testsupport.MigratedDatabase(t, schema)
	f := &fixture{t: t, url: url, ctx: ctx}
	f.ep = f.compile(we)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 20
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		f.dials.Add(1)
		return &countingConn{Conn: c, writes: &f.writes}, nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	f.pool = pool
	for _, s := range setupSQL {
		f.exec(s)
	}
	f.rec = NewRecorder(pool, f.ep)
	f.rows = testsupport.NewRows(pool, store.TablesIn(schema))
	return f
}

// compile compiles we as the receiver would, against the fixture's database.
func (f *fixture) compile(we *v1alpha1.WebhookEndpoint) *config.Endpoint {
	f.t.Helper()
	env := map[string]string{config.EnvDatabaseURL: f.url, config.EnvSigningSecretPrefix + "0": "whsec_test"}
	ep, err := config.Compile(we, func(k string) string { return env[k] })
	if err != nil {
		f.t.Fatalf("compile endpoint: %v", err)
	}
	return ep
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// openPool opens a second pool on the fixture's database, of at most maxConns
// connections that name themselves app in pg_stat_activity (none when app is empty):
// a replica's own pool, which a test can single out to terminate its sessions or to
// make each statement plan on one connection. It closes when the test ends.
func (f *fixture) openPool(maxConns int32, app string) *pgxpool.Pool {
	f.t.Helper()
	cfg, err := pgxpool.ParseConfig(f.url)
	if err != nil {
		f.t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	if app != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = app
	}
	pool, err := pgxpool.NewWithConfig(f.ctx, cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(pool.Close)
	return pool
}

// pauseBeforeResend is a provider's pause between attempts at an event that was not
// acknowledged (err is the last attempt's). It returns an error, to give up, once
// deadline has passed or the fixture's context is done: then every attempt would fail
// at once, and a sender that went on would spin.
func (f *fixture) pauseBeforeResend(deadline time.Time, id string, err error) error {
	if f.ctx.Err() != nil || time.Now().After(deadline) {
		return fmt.Errorf("%s never acknowledged: %w", id, err)
	}
	select {
	case <-f.ctx.Done():
	case <-time.After(time.Duration(1+rand.IntN(5)) * time.Millisecond):
	}
	return nil
}

func (f *fixture) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.pool.Exec(f.ctx, sql, args...); err != nil {
		f.t.Fatalf("exec %q: %v", sql, err)
	}
}

func (f *fixture) count(sql string, args ...any) int {
	f.t.Helper()
	return testsupport.Value[int](f.t, f.ctx, f.pool, sql, args...)
}

func (f *fixture) str(sql string, args ...any) string {
	f.t.Helper()
	return testsupport.Value[string](f.t, f.ctx, f.pool, sql, args...)
}

func (f *fixture) record(ev Event) Result {
	f.t.Helper()
	res, err := f.rec.Record(f.ctx, ev)
	if err != nil {
		f.t.Fatalf("Record(%s): %v", ev.ID, err)
	}
	return res
}

func (f *fixture) managedEntity(key, state string, amount int64) {
	f.exec(`INSERT INTO hk.entities (endpoint, entity_key, state, amount) VALUES ($1, $2, $3, $4)`, f.ep.Key(), key, state, amount)
}

// pendingOrders adds the managed entities order-0 to order-(n-1), payment_pending with
// amount.
func (f *fixture) pendingOrders(n int, amount int64) {
	for i := range n {
		f.managedEntity(fmt.Sprintf("order-%d", i), "payment_pending", amount)
	}
}

func secretRef(name, key string) corev1.SecretKeySelector {
	return corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
}

func ev(id, typ, key string, amount int64, at time.Time) Event {
	e := Event{ID: id, Type: typ, EntityKey: key, Payload: []byte(`{"id":"` + id + `","type":"` + typ + `"}`),
		Headers: map[string]string{"user-agent": "test"}}
	if amount != 0 {
		e.Amount = &amount
	}
	if !at.IsZero() {
		e.OccurredAt = &at
	}
	return e
}

// atOnce runs do(0) to do(n-1) on n goroutines released together, so that they race
// as copies of a delivery and replicas do, and returns when all are done.
func atOnce(n int, do func(i int)) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			do(i)
		})
	}
	close(start)
	wg.Wait()
}

// fanOut hands items, in order, to workers goroutines running do (w is the worker's
// number) and returns do's errors once every item is done: concurrent senders, as
// providers and replicas are.
func fanOut[T any](items []T, workers int, do func(w int, item T) error) []error {
	work := make(chan T)
	errs := make(chan error, len(items))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for it := range work {
				if err := do(w, it); err != nil {
					errs <- err
				}
			}
		})
	}
	for _, it := range items {
		work <- it
	}
	close(work)
	wg.Wait()
	close(errs)
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return out
}
