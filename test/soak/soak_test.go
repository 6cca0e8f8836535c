// Package soak drives a receiver (the code a receiver pod runs, in process) with a
// steady stream of signed Stripe webhooks while its retention prunes, and prints, per
// interval, the latency the provider sees and the size of the tables. Retention is
// meant to keep both flat: what is pruned each interval equals what arrives.
//
// `make soak` runs it for 30 minutes (SOAK_DURATION); `make test` runs a 20-second
// version that checks the harness and that every kind of row is pruned.
//
// The endpoint keeps payloads 1 hour, dedupe records 2 hours and delivered outbox rows
// 1 hour. Before the load starts the tables are filled with that much history at the
// load's rate (with ids in time order, as a receiver writes them), so from the first
// interval on, rows age out at the rate new ones arrive.
package soak

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/dataplanecmd"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/metrics"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

const (
	secret   = "whsec_soak_secret"
	schema   = testsupport.StripeEndpointSchema
	endpoint = "shop/payments"
	// EnvDuration is how long the load runs; unset, the short version runs.
	EnvDuration = "SOAK_DURATION"
)

func TestMain(m *testing.M) { testsupport.Main(m) }

// plan is one soak's shape.
type plan struct {
	duration, every   time.Duration // load duration, report interval
	rate              int           // webhooks per second
	retentionInterval time.Duration // how often the receiver prunes
}

func planFromEnv(t *testing.T) plan {
	if v := os.Getenv(EnvDuration); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvDuration, v, err)
		}
		return plan{duration: d, every: time.Minute, rate: 20, retentionInterval: time.Minute}
	}
	return plan{duration: 20 * time.Second, every: 5 * time.Second, rate: 5, retentionInterval: 3 * time.Second}
}

// stripePayload pads the events to the size of a real Stripe PaymentIntent event
// (about 2 KB stored with its headers in `make bench`).
var stripePayload = bytes.Repeat([]byte("x"), 1500)

func TestSoak(t *testing.T) {
	p := planFromEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	dbURL := testsupport.NewDatabase(t)
	if _, err := store.Migrate(ctx, dbURL, schema); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	var delivered atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		delivered.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer sink.Close()

	// Payloads must outlive parking (an expired event is re-driven from its payload), so
	// parking is shortened with them.
	we := testsupport.StripeEndpoint(sink.URL)
	we.Spec.StateMachine.ParkFor = &metav1.Duration{Duration: 30 * time.Minute}
	we.Spec.Retention = v1alpha1.RetentionSpec{PayloadFor: &metav1.Duration{Duration: time.Hour},
		DedupeFor: &metav1.Duration{Duration: 2 * time.Hour}, DeliveredFor: &metav1.Duration{Duration: time.Hour}}
	path := testsupport.ManifestFile(t, we)
	env := map[string]string{config.EnvDatabaseURL: dbURL, config.EnvSigningSecretPrefix + "0": secret}
	getenv := func(k string) string { return env[k] }
	ep, err := config.Load(path, getenv)
	if err != nil {
		t.Fatalf("load endpoint: %v", err)
	}

	pool, err := store.Open(ctx, dbURL, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	seeded := seedHistory(ctx, t, pool, p.rate)
	t.Logf("seeded %d receipts and %d delivered outbox rows of history", seeded.receipts, seeded.deliveries)

	webhookAddr, adminAddr := testsupport.FreeAddr(t), testsupport.FreeAddr(t)
	receiver := testsupport.Run(t, ctx, "receiver", 30*time.Second, func(ctx context.Context) error {
		return dataplanecmd.Serve(ctx, dataplanecmd.ServeOptions{
			Endpoint: ep, Getenv: getenv, Dispatcher: true, GroupCommit: receipt.DefaultGroupCommit,
			WebhookAddr: webhookAddr, AdminAddr: adminAddr, RetentionInterval: p.retentionInterval,
			Log: logr.Discard(),
		})
	})
	testsupport.WaitReady(t, "http://"+adminAddr+"/readyz", 30*time.Second, receiver.Exited)

	removed := func(kind string) float64 {
		return testutil.ToFloat64(metrics.RetentionRemoved.WithLabelValues(ep.Key(), kind))
	}
	base := map[string]float64{}
	for _, k := range kinds {
		base[k] = removed(k)
	}

	l := &load{url: "http://" + webhookAddr + "/stripe"}
	loadCtx, endLoad := context.WithTimeout(ctx, p.duration)
	defer endLoad()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); l.run(loadCtx, p.rate) }()

	var autovacuum string
	if err := pool.QueryRow(ctx, `SHOW autovacuum`).Scan(&autovacuum); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("soak: %s at %d webhooks/s; retention payloadFor 1h, dedupeFor 2h, deliveredFor 1h, pruning every %s; the server's autovacuum is %s\n",
		p.duration, p.rate, p.retentionInterval, autovacuum)
	fmt.Printf("%8s %6s %5s %8s %8s %8s %9s %9s %9s %9s %8s %8s %8s\n", "elapsed", "sent", "non2xx", "p50", "p99", "max",
		"receipts", "payloads", "outbox", "tablesMB", "-payload", "-receipt", "-deliv")
	var intervals []interval
	tick := time.NewTicker(p.every)
	defer tick.Stop()
	start := time.Now()
	for done := false; !done; {
		select {
		case <-loadCtx.Done():
			done = true
		case <-tick.C:
		}
		iv := l.take()
		iv.elapsed = time.Since(start).Round(time.Second)
		iv.tables = readTables(ctx, t, pool)
		for _, k := range kinds {
			iv.removed = append(iv.removed, removed(k)-base[k])
		}
		intervals = append(intervals, iv)
		fmt.Printf("%8s %6d %5d %8s %8s %8s %9d %9d %9d %9.1f %8.0f %8.0f %8.0f\n", iv.elapsed, iv.sent, iv.failed,
			ms(iv.p50), ms(iv.p99), ms(iv.max), iv.tables.receipts, iv.tables.payloads, iv.tables.outbox, iv.tables.mb,
			iv.removed[0], iv.removed[1], iv.removed[2])
	}
	wg.Wait()
	if err := receiver.Stop(t); err != nil {
		t.Errorf("receiver: %v", err)
	}

	// What every soak must show: every webhook accepted, and retention pruning each
	// kind of row while the load ran.
	last := intervals[len(intervals)-1]
	for i, k := range kinds {
		if last.removed[i] <= 0 {
			t.Errorf("retention removed no %s during the soak", k)
		}
	}
	for _, iv := range intervals {
		if iv.failed > 0 {
			t.Errorf("at %s: %d webhooks not acknowledged with 2xx", iv.elapsed, iv.failed)
		}
	}
	if os.Getenv(EnvDuration) == "" || len(intervals) < 4 {
		return
	}
	// A long soak must also stay flat: the tables at the end within 10% of their size
	// after the first interval, and the last intervals' p99 within 3x the first's (and
	// 20 ms).
	first := intervals[0]
	if r := float64(last.tables.receipts) / float64(first.tables.receipts); r > 1.1 || r < 0.9 {
		t.Errorf("receipts went from %d to %d: retention does not keep up", first.tables.receipts, last.tables.receipts)
	}
	if limit := max(3*first.p99, first.p99+20*time.Millisecond); last.p99 > limit {
		t.Errorf("p99 went from %s to %s", first.p99, last.p99)
	}
}

var kinds = []string{"payloads", "receipts", "deliveries"}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }

// interval is one report line.
type interval struct {
	elapsed       time.Duration
	sent, failed  int
	p50, p99, max time.Duration
	tables        tableStats
	removed       []float64 // since the load began, per kind
}

// load sends signed Stripe webhooks at a steady rate, each a new order's payment.
type load struct {
	url string
	mu  sync.Mutex
	lat []time.Duration
	bad int
	seq atomic.Int64
}

var soakClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}

func (l *load) run(ctx context.Context, rate int) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.send(ctx)
		}()
	}
}

func (l *load) send(ctx context.Context) {
	n := l.seq.Add(1)
	body := demo.StripeEvent(fmt.Sprintf("evt_soak_%d", n), "payment_intent.succeeded", fmt.Sprintf("soak_%d", n), 1000, time.Now())
	body = append(body[:len(body)-1], fmt.Sprintf(`,"description":%q}`, stripePayload)...)
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, l.url, bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", demo.StripeSignature(secret, body, time.Now()))
	began := time.Now()
	resp, err := soakClient.Do(req)
	took := time.Since(began)
	ok := err == nil && resp.StatusCode/100 == 2
	if err == nil {
		_ = resp.Body.Close()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lat = append(l.lat, took)
	if !ok {
		l.bad++
	}
}

// take returns the interval since the last call and starts a new one.
func (l *load) take() interval {
	l.mu.Lock()
	lat, bad := l.lat, l.bad
	l.lat, l.bad = nil, 0
	l.mu.Unlock()
	iv := interval{sent: len(lat), failed: bad}
	if len(lat) == 0 {
		return iv
	}
	slices.Sort(lat)
	at := func(q float64) time.Duration { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	iv.p50, iv.p99, iv.max = at(0.50), at(0.99), lat[len(lat)-1]
	return iv
}

// tableStats is the size of the endpoint's tables.
type tableStats struct {
	receipts, payloads, outbox int64
	mb                         float64
}

func readTables(ctx context.Context, t *testing.T, pool *pgxpool.Pool) tableStats {
	t.Helper()
	tables := store.TablesIn(schema)
	var s tableStats
	var bytes int64
	err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT
  (SELECT count(*) FROM %[1]s), (SELECT count(*) FROM %[1]s WHERE payload IS NOT NULL), (SELECT count(*) FROM %[2]s),
  pg_total_relation_size('%[3]s.webhook_events') + pg_total_relation_size('%[3]s.outbox')`, tables.Events, tables.Outbox, schema)).
		Scan(&s.receipts, &s.payloads, &s.outbox, &bytes)
	if err != nil {
		t.Fatalf("read table sizes: %v", err)
	}
	s.mb = float64(bytes) / (1 << 20)
	return s
}

// history counts the rows seedHistory wrote.
type history struct{ receipts, deliveries int64 }

// seedHistory fills the tables with rate rows per second of the past: receipts over the
// last 2 hours and 5 minutes (the dedupe window and some), delivered outbox rows over
// the last 65 minutes, oldest first.
func seedHistory(ctx context.Context, t *testing.T, pool *pgxpool.Pool, rate int) history {
	t.Helper()
	tables := store.TablesIn(schema)
	payload := fmt.Sprintf(`{"id":"evt_seed","object":"event","type":"payment_intent.succeeded","data":{"object":{"description":%q}}}`, stripePayload)
	var h history
	n := func(window time.Duration) int { return int(window.Seconds()) * rate }
	tag, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s
  (endpoint, event_id, event_type, entity_key, payload, headers, received_at, outcome, processed_at)
SELECT $1, 'evt_seed_' || g, 'payment_intent.succeeded', 'seed_' || g, $2::jsonb, '{"user-agent":"Stripe/1.0"}'::jsonb,
       now() - make_interval(secs => ($3 - g)::float8 / $4), 'applied', now()
FROM generate_series(1, $3) g ORDER BY g`, tables.Events), endpoint, payload, n(125*time.Minute), rate)
	if err != nil {
		t.Fatalf("seed receipts: %v", err)
	}
	h.receipts = tag.RowsAffected()
	tag, err = pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s
  (endpoint, dedupe_key, entity_key, event_type, source_event_id, payload, created_at, available_at, attempts, delivered_at)
SELECT $1, 'seed_' || g, 'seed_' || g, 'order.paid', 'evt_seed_' || g, $2::jsonb,
       now() - make_interval(secs => ($3 - g)::float8 / $4), now(), 1,
       now() - make_interval(secs => ($3 - g)::float8 / $4) + interval '50 milliseconds'
FROM generate_series(1, $3) g ORDER BY g`, tables.Outbox), endpoint, payload, n(65*time.Minute), rate)
	if err != nil {
		t.Fatalf("seed outbox: %v", err)
	}
	h.deliveries = tag.RowsAffected()
	return h
}
