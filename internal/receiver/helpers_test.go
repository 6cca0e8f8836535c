package receiver_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/metrics"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/receiver"
	"github.com/hookkeeper/hookkeeper/internal/signature/sigtest"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

func TestMain(m *testing.M) { testsupport.Main(m) }

const (
	schema = "hookkeeper"
	// stripeSecret signs the Stripe fixtures' events; the other providers' endpoints
	// verify with sigtest.Secret of their type.
	stripeSecret = sigtest.StripeSecret
)

// fixture is one receiver serving one endpoint against its own database.
type fixture struct {
	t     *testing.T
	ep    *config.Endpoint
	dbURL string
	pool  *pgxpool.Pool
	admin *pgx.Conn // a separate connection for assertions and setup
	logs  *logBuffer
	serving
}

type fixtureOptions struct {
	provider     v1alpha1.ProviderType
	maxBodyBytes int64
	// appTable binds to public.orders (the Stripe sample's table) instead of managed entities.
	appTable bool
	// sample, a file of config/samples, gives the endpoint that sample's provider, event,
	// entity and state machine, as a user who applied it would have them.
	sample string
}

func newFixture(t *testing.T, o fixtureOptions) *fixture {
	t.Helper()
	ctx := context.Background()
	dbURL := testsupport.MigratedDatabase(t, schema)
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = admin.Close(context.Background()) })

	we := endpointFor(t, o)
	if o.appTable {
		mustExec(t, admin, `CREATE TABLE public.orders (
			tenant_id text NOT NULL, client_txn_id text NOT NULL, status text NOT NULL,
			expected_amount_paise bigint NOT NULL, PRIMARY KEY (tenant_id, client_txn_id))`)
	}
	env := map[string]string{
		config.EnvDatabaseURL:               dbURL,
		config.EnvSigningSecretPrefix + "0": sigtest.Secret(o.provider),
	}
	ep, err := config.Compile(we, func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("compile endpoint: %v", err)
	}
	// The metrics are process-global: start every test's endpoint from zero, so the
	// assertions hold when the tests run again in the same process (-count).
	for _, vec := range []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{metrics.Requests, metrics.RequestDuration, metrics.Duplicates, metrics.SignatureFailures, metrics.Transitions} {
		vec.DeletePartialMatch(prometheus.Labels{metrics.LabelEndpoint: ep.Key()})
	}
	pool := openPool(t, dbURL, 4)

	f := &fixture{t: t, ep: ep, dbURL: dbURL, pool: pool, admin: admin, logs: &logBuffer{}}
	log := f.logs.logger()
	handler, err := receiver.HandlerFor(ep, receipt.NewRecorder(pool, ep), log.WithName("webhook"))
	if err != nil {
		t.Fatalf("handler: %v", err)
	}
	reg := prometheus.NewRegistry()
	metrics.Register(reg)
	srv, err := receiver.NewServer(receiver.ServerOptions{
		Webhook: handler, DB: pool, Gatherer: reg, Logger: log, ShutdownTimeout: 20 * time.Second,
	})
	if err != nil {
		t.Fatalf("server: %v", err)
	}
	f.serving = serve(t, srv)
	return f
}

func endpointFor(t *testing.T, o fixtureOptions) *v1alpha1.WebhookEndpoint {
	spec := v1alpha1.WebhookEndpointSpec{
		Provider: v1alpha1.ProviderSpec{Type: o.provider},
		SigningSecrets: []v1alpha1.SigningSecret{{SecretKeyRef: corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "signing"}, Key: "current"}}},
		Database: v1alpha1.DatabaseSpec{URLSecretRef: corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "uri"}, Schema: schema},
		StateMachine: v1alpha1.StateMachineSpec{
			Initial: "payment_pending",
			States:  []string{"payment_pending", "paid", "failed"},
			Transitions: []v1alpha1.Transition{{
				Name: "capture", On: []string{"payment_intent.succeeded", "AUTHORISATION"},
				From: []string{"payment_pending"}, To: "paid",
				Guard: "event.amount == entity.amount", Emit: "order.paid",
			}},
		},
		Delivery: v1alpha1.DeliverySpec{Sink: v1alpha1.SinkSpec{URL: "http://127.0.0.1:1/sink"}},
		Receiver: v1alpha1.ReceiverSpec{Path: "/hooks", MaxBodyBytes: o.maxBodyBytes},
	}
	if o.provider == v1alpha1.ProviderStripe {
		spec.Event.EntityKey = "body.data.object.metadata.client_txn_id"
	}
	if o.appTable {
		spec.Entity = v1alpha1.EntitySpec{Table: &v1alpha1.EntityTableSpec{
			Schema: "public", Name: "orders", KeyColumn: "client_txn_id", StateColumn: "status",
			AmountColumn: "expected_amount_paise", Tenant: &v1alpha1.TenantSpec{Column: "tenant_id", Value: "acme"},
		}}
	} else {
		spec.Entity = v1alpha1.EntitySpec{OnUnmatched: v1alpha1.UnmatchedCreate}
	}
	if o.sample != "" {
		s := sampleSpec(t, o.sample)
		if s.Provider.Type != o.provider {
			t.Fatalf("%s is a %s endpoint, not %s", o.sample, s.Provider.Type, o.provider)
		}
		spec.Provider, spec.Event, spec.Entity, spec.StateMachine = s.Provider, s.Event, s.Entity, s.StateMachine
	}
	// A namespace per test keeps the global metrics of one test apart from the others.
	ns := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	return &v1alpha1.WebhookEndpoint{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "WebhookEndpoint"},
		ObjectMeta: metav1.ObjectMeta{Name: "payments", Namespace: ns},
		Spec:       spec,
	}
}

// sampleSpec is the spec of the WebhookEndpoint in config/samples/<file>.
func sampleSpec(t *testing.T, file string) v1alpha1.WebhookEndpointSpec {
	t.Helper()
	docs, err := demo.ReadManifests(filepath.Join("..", "..", "config", "samples", file))
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range docs {
		if u.GetKind() != "WebhookEndpoint" {
			continue
		}
		var we v1alpha1.WebhookEndpoint
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &we); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		return we.Spec
	}
	t.Fatalf("%s has no WebhookEndpoint", file)
	return v1alpha1.WebhookEndpointSpec{}
}

// drain begins the server's shutdown and waits until /readyz fails while it drains;
// the channel gets what Serve returned.
func (s serving) drain(t *testing.T) <-chan error {
	t.Helper()
	stopped := make(chan error, 1)
	go func() { stopped <- s.stop() }()
	testsupport.Eventually(t, 15*time.Second, 20*time.Millisecond, "/readyz to fail while draining", func() bool {
		resp, err := http.Get(s.adminURL + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	return stopped
}

// openPool opens a pool of at most maxConns connections to dbURL, closed when the test
// ends.
func openPool(t *testing.T, dbURL string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	pool, err := store.Open(context.Background(), dbURL, maxConns)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// serving is a receiver.Server serving on two loopback listeners.
type serving struct {
	base, adminURL string       // http://address of the webhook and the admin listener
	stop           func() error // ends Serve (once; the test's end does it too) and returns its error
}

// serve runs srv.Serve until stop or the end of the test, which fails if Serve did.
func serve(t *testing.T, srv *receiver.Server) serving {
	t.Helper()
	webhookLn, adminLn := listen(t), listen(t)
	run := testsupport.Run(t, context.Background(), "server", time.Minute, func(ctx context.Context) error {
		return srv.Serve(ctx, webhookLn, adminLn)
	})
	s := serving{base: "http://" + webhookLn.Addr().String(), adminURL: "http://" + adminLn.Addr().String(),
		stop: func() error { return run.Stop(t) }}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return s
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return ln
}

func mustExec(t *testing.T, c *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := c.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("exec %q: %v", sql, err)
	}
}

// rows counts rows of the endpoint's tables through f.admin (which a test may replace).
func (f *fixture) rows() *testsupport.Rows {
	return testsupport.NewRows(f.admin, store.TablesIn(schema))
}

// rowCounts counts the rows of every table the receiver may write.
// eventIDs lists the event ids of the endpoint's receipts, in order.
func (f *fixture) eventIDs() []string {
	f.t.Helper()
	rows, err := f.admin.Query(context.Background(), `SELECT event_id FROM `+store.TablesIn(schema).Events+` ORDER BY event_id`)
	if err != nil {
		f.t.Fatalf("receipts: %v", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		f.t.Fatalf("receipts: %v", err)
	}
	return ids
}

func (f *fixture) rowCounts() map[string]int64 {
	f.t.Helper()
	rows := f.rows()
	return map[string]int64{
		"events":   int64(rows.Receipts(f.t)),
		"entities": int64(rows.Entities(f.t)),
		"outbox":   int64(rows.Outbox(f.t)),
		"clocks":   int64(rows.Clocks(f.t)),
	}
}

func (f *fixture) assertNothingStored() {
	f.t.Helper()
	for table, n := range f.rowCounts() {
		if n != 0 {
			f.t.Errorf("table %s has %d rows, want none", table, n)
		}
	}
}

type response struct {
	code   int
	header http.Header
	body   string
}

func (f *fixture) post(path string, body []byte, header http.Header) response {
	f.t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.base+path, bytes.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	return f.do(req)
}

func (f *fixture) do(req *http.Request) response {
	f.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return response{code: resp.StatusCode, header: resp.Header, body: string(b)}
}

func (f *fixture) get(url string) response {
	f.t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	return f.do(req)
}

func (f *fixture) requests(code, outcome string) float64 {
	return testutil.ToFloat64(metrics.Requests.WithLabelValues(f.ep.Key(), code, outcome))
}

func stripeEvent(id, order string, amount int64) []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"event","type":"payment_intent.succeeded","created":%d,`+
		`"data":{"object":{"id":"pi_1","object":"payment_intent","amount":%d,"metadata":{"client_txn_id":%q}}}}`,
		id, time.Now().Unix(), amount, order)
}

// stripeHeader signs body the way Stripe does, with secret (stripeSecret, or another
// to forge).
func stripeHeader(secret string, body []byte) http.Header {
	return http.Header{
		"Content-Type":     {"application/json"},
		"Stripe-Signature": {demo.StripeSignature(secret, body, time.Now())},
	}
}

// signedHeader signs body the way provider does, with sigtest's secret of the
// fixture's endpoint, on top of the JSON Content-Type and extra.
func signedHeader(t *testing.T, provider v1alpha1.ProviderType, body []byte, extra http.Header) http.Header {
	t.Helper()
	h := http.Header{"Content-Type": {"application/json"}}
	for k, v := range extra {
		h[k] = v
	}
	return sigtest.Headers(t, provider, body, time.Now(), h)
}

// adyenItem is one NotificationRequestItem signed the classic way: HMAC-SHA256 with the
// hex-decoded key over pspReference:originalReference:merchantAccountCode:
// merchantReference:value:currency:eventCode:success, base64.
func adyenItem(t *testing.T, psp, merchantRef string, value int64) string {
	t.Helper()
	it := sigtest.AdyenItem{PSP: psp, Merchant: "ShopAccount", Reference: merchantRef, Value: value,
		Currency: "EUR", EventCode: "AUTHORISATION", Success: "true"}
	item := it.JSON(t, "", map[string]any{"eventDate": "2026-01-01T01:00:00+01:00"})
	return string(sigtest.Marshal(t, map[string]any{"NotificationRequestItem": item}))
}

// blockConnections makes the fixture's database unreachable: no new sessions, and the
// pool's open sessions are ended. It returns a function that restores access.
func (f *fixture) blockConnections() func() {
	f.t.Helper()
	ctx := context.Background()
	name := f.pool.Config().ConnConfig.Database
	srv, err := pgx.Connect(ctx, testsupport.ServerURL(f.t))
	if err != nil {
		f.t.Fatalf("connect to the server: %v", err)
	}
	ident := pgx.Identifier{name}.Sanitize()
	mustExec(f.t, srv, "ALTER DATABASE "+ident+" WITH ALLOW_CONNECTIONS false")
	mustExec(f.t, srv, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, name)
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		mustExec(f.t, srv, "ALTER DATABASE "+ident+" WITH ALLOW_CONNECTIONS true")
		_ = srv.Close(ctx)
	}
	f.t.Cleanup(restore)
	return restore
}

// logBuffer collects log lines for assertions about what is and is not logged.
type logBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (b *logBuffer) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.lines = append(b.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 1})
}

func (b *logBuffer) text() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.lines, "\n")
}

func (b *logBuffer) assertContains(t *testing.T, subs ...string) {
	t.Helper()
	text := b.text()
	for _, s := range subs {
		if !strings.Contains(text, s) {
			t.Errorf("logs lack %q:\n%s", s, text)
		}
	}
}

func (b *logBuffer) assertNotContains(t *testing.T, subs ...string) {
	t.Helper()
	text := b.text()
	for _, s := range subs {
		if s != "" && strings.Contains(text, s) {
			t.Errorf("logs contain %q, which must never be logged", s)
		}
	}
}
