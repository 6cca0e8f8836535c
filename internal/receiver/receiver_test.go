package receiver_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
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

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/metrics"
	"github.com/hookkeeper/hookkeeper/internal/provider"
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
	// A namespace per test keeps the global metrics of one test apart from the others.
	ns := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	return &v1alpha1.WebhookEndpoint{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "WebhookEndpoint"},
		ObjectMeta: metav1.ObjectMeta{Name: "payments", Namespace: ns},
		Spec:       spec,
	}
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

func TestStripeDeliveryIsRecordedOnceAndItsDuplicateAcknowledged(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe, appTable: true})
	mustExec(t, f.admin, `INSERT INTO public.orders VALUES ('acme', 'ord-1', 'payment_pending', 4999)`)
	body := stripeEvent("evt_1", "ord-1", 4999)
	header := stripeHeader(stripeSecret, body)

	first := f.post("/hooks", body, header)
	if first.code != http.StatusOK || first.body != `{"received":true,"duplicate":false}` {
		t.Fatalf("first delivery: %d %q, want 200 received, not duplicate", first.code, first.body)
	}
	var outcome, status string
	if err := f.admin.QueryRow(context.Background(),
		`SELECT e.outcome, o.status FROM hookkeeper.webhook_events e, public.orders o WHERE e.event_id = 'evt_1'`).
		Scan(&outcome, &status); err != nil {
		t.Fatalf("read receipt: %v", err)
	}
	if outcome != "applied" || status != "paid" {
		t.Errorf("receipt outcome %q, order status %q; want applied, paid", outcome, status)
	}
	want := f.rowCounts()
	if want["events"] != 1 || want["outbox"] != 1 {
		t.Fatalf("after the first delivery: %v, want 1 receipt and 1 outbox row", want)
	}

	second := f.post("/hooks", body, header)
	if second.code != http.StatusOK || second.body != `{"received":true,"duplicate":true}` {
		t.Fatalf("duplicate delivery: %d %q, want 200 duplicate", second.code, second.body)
	}
	if got := f.rowCounts(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the duplicate changed the tables: %v, before %v", got, want)
	}
	// The recorder answers that copy from its memory of committed events, after
	// verification: a copy signed with another secret, or signed too long ago, is
	// still refused.
	for name, h := range map[string]http.Header{
		"another secret": stripeHeader("whsec_someone_else", body),
		"stale":          {"Content-Type": {"application/json"}, "Stripe-Signature": {demo.StripeSignature(stripeSecret, body, time.Now().Add(-time.Hour))}},
	} {
		if r := f.post("/hooks", body, h); r.code != http.StatusUnauthorized {
			t.Errorf("copy of a committed event, %s: %d %q, want 401", name, r.code, r.body)
		}
	}

	if n := f.requests("200", "applied"); n != 1 {
		t.Errorf("requests{200,applied} = %v, want 1", n)
	}
	if n := f.requests("200", "duplicate"); n != 1 {
		t.Errorf("requests{200,duplicate} = %v, want 1", n)
	}
	if n := testutil.ToFloat64(metrics.Duplicates.WithLabelValues(f.ep.Key())); n != 1 {
		t.Errorf("duplicates = %v, want 1", n)
	}
	if n := testutil.ToFloat64(metrics.Transitions.WithLabelValues(f.ep.Key(), "applied")); n != 1 {
		t.Errorf("transitions{applied} = %v, want 1", n)
	}
	f.logs.assertContains(t, `"eventID"="evt_1"`, `"outcome"="applied"`, "latency")
	f.logs.assertNotContains(t, header.Get("Stripe-Signature"), stripeSecret, string(body))
}

func TestForgedSignatureIsRejectedAndNothingStored(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe, appTable: true})
	mustExec(t, f.admin, `INSERT INTO public.orders VALUES ('acme', 'ord-1', 'payment_pending', 4999)`)
	body := stripeEvent("evt_forged", "ord-1", 4999)
	forged := stripeHeader("whsec_someone_else", body)

	r := f.post("/hooks", body, forged)
	if r.code != http.StatusUnauthorized {
		t.Fatalf("forged signature: %d %q, want 401", r.code, r.body)
	}
	unsigned := f.post("/hooks", body, http.Header{"Content-Type": {"application/json"}})
	if unsigned.code != http.StatusUnauthorized {
		t.Fatalf("no signature: %d %q, want 401", unsigned.code, unsigned.body)
	}
	f.assertNothingStored()
	var status string
	if err := f.admin.QueryRow(context.Background(), `SELECT status FROM public.orders`).Scan(&status); err != nil || status != "payment_pending" {
		t.Errorf("order status %q (%v), want payment_pending", status, err)
	}
	for reason, want := range map[string]float64{"mismatch": 1, "missing_header": 1} {
		if n := testutil.ToFloat64(metrics.SignatureFailures.WithLabelValues(f.ep.Key(), reason)); n != want {
			t.Errorf("signature failures{%s} = %v, want %v", reason, n, want)
		}
	}
	if n := f.requests("401", "rejected"); n != 2 {
		t.Errorf("requests{401,rejected} = %v, want 2", n)
	}
	f.logs.assertContains(t, `"reason"="mismatch"`)
	f.logs.assertNotContains(t, forged.Get("Stripe-Signature"), stripeSecret, string(body))
}

func TestBodyOverTheCapIs413AndNothingStored(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe, maxBodyBytes: 1024})
	pad := strings.Repeat("x", 2048)
	body := fmt.Appendf(nil, `{"id":"evt_big","type":"payment_intent.succeeded","pad":%q}`, pad)
	header := stripeHeader(stripeSecret, body)

	if r := f.post("/hooks", body, header); r.code != http.StatusRequestEntityTooLarge {
		t.Fatalf("declared oversize body: %d %q, want 413", r.code, r.body)
	}
	// Without Content-Length the cap must hold while reading.
	req, err := http.NewRequest(http.MethodPost, f.base+"/hooks", io.MultiReader(bytes.NewReader(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header.Clone()
	req.ContentLength = -1
	if r := f.do(req); r.code != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked oversize body: %d %q, want 413", r.code, r.body)
	}
	f.assertNothingStored()
	if n := f.requests("413", "rejected"); n != 2 {
		t.Errorf("requests{413,rejected} = %v, want 2", n)
	}
}

func TestMalformedPayloadWithValidSignatureIs400AndNothingStored(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe})
	for name, body := range map[string][]byte{
		"not JSON":   []byte(`{"id": "evt_1", "type": `),
		"no id":      []byte(`{"type":"payment_intent.succeeded","created":1}`),
		"JSON array": []byte(`[1,2,3]`),
	} {
		if r := f.post("/hooks", body, stripeHeader(stripeSecret, body)); r.code != http.StatusBadRequest {
			t.Errorf("%s: %d %q, want 400", name, r.code, r.body)
		}
	}
	f.assertNothingStored()
	if n := f.requests("400", "rejected"); n != 3 {
		t.Errorf("requests{400,rejected} = %v, want 3", n)
	}
}

func TestOnlyTheConfiguredPathAndPOSTAreServed(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe})
	body := stripeEvent("evt_1", "ord-1", 1)
	if r := f.post("/elsewhere", body, stripeHeader(stripeSecret, body)); r.code != http.StatusNotFound {
		t.Errorf("POST /elsewhere: %d, want 404", r.code)
	}
	r := f.get(f.base + "/hooks")
	if r.code != http.StatusMethodNotAllowed || r.header.Get("Allow") != "POST, HEAD" {
		t.Errorf("GET /hooks: %d Allow=%q, want 405 Allow=POST, HEAD", r.code, r.header.Get("Allow"))
	}
	// A HEAD (Intercom checks a URL with one when it is saved) is 200 and stores nothing.
	head, err := http.NewRequest(http.MethodHead, f.base+"/hooks", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(head)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("HEAD /hooks: %d, want 200", resp.StatusCode)
	}
	f.assertNothingStored()
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

func TestAdyenBatchIsAcceptedWithOneReceiptPerItem(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderAdyen})
	items := []string{
		adyenItem(t, "PSP0001", "order-1", 1000),
		adyenItem(t, "PSP0002", "order-2", 2500),
		adyenItem(t, "PSP0003", "order-3", 700),
	}
	body := []byte(`{"live":"false","notificationItems":[` + strings.Join(items, ",") + `]}`)
	header := http.Header{"Content-Type": {"application/json"}}

	r := f.post("/hooks", body, header)
	if r.code != http.StatusOK || r.body != "[accepted]" {
		t.Fatalf("Adyen batch: %d %q, want 200 [accepted]", r.code, r.body)
	}
	counts := f.rowCounts()
	if counts["events"] != 3 {
		t.Errorf("receipts = %d, want one per item (3)", counts["events"])
	}
	ids := f.eventIDs()
	if want := "[PSP0001:AUTHORISATION:true PSP0002:AUTHORISATION:true PSP0003:AUTHORISATION:true]"; fmt.Sprint(ids) != want {
		t.Errorf("event ids %v, want %s", ids, want)
	}
	// The same batch again: every item is a duplicate, still [accepted].
	again := f.post("/hooks", body, header)
	if again.code != http.StatusOK || again.body != "[accepted]" {
		t.Fatalf("repeated Adyen batch: %d %q, want 200 [accepted]", again.code, again.body)
	}
	if got := f.rowCounts(); got["events"] != 3 {
		t.Errorf("receipts after the repeat = %d, want 3", got["events"])
	}
	if n := testutil.ToFloat64(metrics.Duplicates.WithLabelValues(f.ep.Key())); n != 3 {
		t.Errorf("duplicates = %v, want 3", n)
	}

	// One tampered item fails the whole batch: nothing of it is stored.
	tampered := adyenItem(t, "PSP0009", "order-9", 100)
	tampered = strings.Replace(tampered, `"value":100`, `"value":1`, 1)
	bad := []byte(`{"live":"false","notificationItems":[` + adyenItem(t, "PSP0008", "order-8", 100) + "," + tampered + `]}`)
	if r := f.post("/hooks", bad, header); r.code != http.StatusUnauthorized {
		t.Fatalf("batch with a tampered item: %d %q, want 401", r.code, r.body)
	}
	if got := f.rowCounts(); got["events"] != 3 {
		t.Errorf("receipts after the tampered batch = %d, want still 3", got["events"])
	}
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

func TestDatabaseDownIs503WithRetryAfterAndNothingCommitted(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe})
	warm := stripeEvent("evt_warm", "ord-0", 1)
	if r := f.post("/hooks", warm, stripeHeader(stripeSecret, warm)); r.code != http.StatusOK {
		t.Fatalf("warm-up delivery: %d %q", r.code, r.body)
	}
	if r := f.get(f.adminURL + "/readyz"); r.code != http.StatusOK {
		t.Fatalf("/readyz with the database up: %d, want 200", r.code)
	}

	restore := f.blockConnections()
	// The assertion connection was ended too; reconnect after restoring.
	body := stripeEvent("evt_down", "ord-1", 4999)
	r := f.post("/hooks", body, stripeHeader(stripeSecret, body))
	if r.code != http.StatusServiceUnavailable || r.header.Get("Retry-After") != strconv.Itoa(receiver.RetryAfterSeconds) {
		t.Fatalf("database down: %d Retry-After=%q, want 503 with Retry-After %d", r.code, r.header.Get("Retry-After"), receiver.RetryAfterSeconds)
	}
	if r := f.get(f.adminURL + "/readyz"); r.code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with the database down: %d, want 503", r.code)
	}
	if r := f.get(f.adminURL + "/healthz"); r.code != http.StatusOK {
		t.Errorf("/healthz with the database down: %d, want 200 (the process is fine)", r.code)
	}
	if n := f.requests("503", "error"); n != 1 {
		t.Errorf("requests{503,error} = %v, want 1", n)
	}
	restore()

	conn, err := pgx.Connect(context.Background(), f.dbURL)
	if err != nil {
		t.Fatalf("reconnect: %v", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	f.admin = conn
	counts := f.rowCounts()
	if counts["events"] != 1 || counts["entities"] != 1 {
		t.Errorf("after the outage: %v, want only the warm-up's receipt and entity", counts)
	}
	// The provider's retry, once the database is back, is recorded.
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := f.post("/hooks", body, stripeHeader(stripeSecret, body))
		if r.code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("retry after the outage still %d %q", r.code, r.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := f.rowCounts(); got["events"] != 2 {
		t.Errorf("receipts after the retry = %d, want 2", got["events"])
	}
	if r := f.get(f.adminURL + "/readyz"); r.code != http.StatusOK {
		t.Errorf("/readyz after the outage: %d, want 200", r.code)
	}
}

func TestMetricsEndpointExposesLabelledCounters(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe})
	body := stripeEvent("evt_m", "ord-m", 10)
	f.post("/hooks", body, stripeHeader(stripeSecret, body))
	f.post("/hooks", body, stripeHeader(stripeSecret, body))
	f.post("/hooks", body, stripeHeader("whsec_wrong", body))

	r := f.get(f.adminURL + "/metrics")
	if r.code != http.StatusOK {
		t.Fatalf("/metrics: %d", r.code)
	}
	ep := f.ep.Key()
	for _, want := range []string{
		// Create makes the entity in the initial state; the capture guard then holds.
		fmt.Sprintf(`hookkeeper_webhook_requests_total{code="200",endpoint=%q,outcome="applied"} 1`, ep),
		fmt.Sprintf(`hookkeeper_webhook_requests_total{code="200",endpoint=%q,outcome="duplicate"} 1`, ep),
		fmt.Sprintf(`hookkeeper_webhook_requests_total{code="401",endpoint=%q,outcome="rejected"} 1`, ep),
		fmt.Sprintf(`hookkeeper_webhook_duplicates_total{endpoint=%q} 1`, ep),
		fmt.Sprintf(`hookkeeper_webhook_signature_failures_total{endpoint=%q,reason="mismatch"} 1`, ep),
		fmt.Sprintf(`hookkeeper_transitions_total{endpoint=%q,outcome="applied"} 1`, ep),
		fmt.Sprintf(`hookkeeper_webhook_request_duration_seconds_count{endpoint=%q} 3`, ep),
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestShutdownFinishesTheRequestInFlight(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe, appTable: true})
	mustExec(t, f.admin, `INSERT INTO public.orders VALUES ('acme', 'ord-1', 'payment_pending', 4999)`)

	// Hold the order's row lock so the receiver's transaction waits inside the request.
	ctx := context.Background()
	blocker, err := pgx.Connect(ctx, f.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Close(ctx) }()
	tx, err := blocker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM public.orders WHERE client_txn_id = 'ord-1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	body := stripeEvent("evt_inflight", "ord-1", 4999)
	result := make(chan response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, f.base+"/hooks", bytes.NewReader(body))
		req.Header = stripeHeader(stripeSecret, body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			result <- response{body: err.Error()}
			return
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		result <- response{code: resp.StatusCode, body: string(b)}
	}()
	testsupport.Eventually(t, 15*time.Second, 20*time.Millisecond, "the receiver's transaction to wait for the row lock", func() bool {
		var n int
		err := f.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`).Scan(&n)
		return err == nil && n > 0
	})

	stopped := f.drain(t)
	select {
	case r := <-result:
		t.Fatalf("the request finished before its transaction could: %d %q", r.code, r.body)
	case err := <-stopped:
		t.Fatalf("the server stopped with a request in flight: %v", err)
	default:
	}
	// New connections are refused once shutdown has begun.
	testsupport.Eventually(t, 15*time.Second, 20*time.Millisecond, "the webhook listener to close", func() bool {
		c, err := net.DialTimeout("tcp", strings.TrimPrefix(f.base, "http://"), time.Second)
		if err != nil {
			return true
		}
		_ = c.Close()
		return false
	})

	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-result:
		if r.code != http.StatusOK {
			t.Fatalf("in-flight request: %d %q, want 200", r.code, r.body)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the in-flight request did not finish")
	}
	if err := testsupport.Await(t, stopped, 15*time.Second, "the server to stop after its last request"); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	var outcome string
	if err := f.admin.QueryRow(ctx, `SELECT outcome FROM hookkeeper.webhook_events WHERE event_id = 'evt_inflight'`).Scan(&outcome); err != nil || outcome != "applied" {
		t.Errorf("in-flight event outcome %q (%v), want applied", outcome, err)
	}
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

// Slack accepts a Request URL only if the endpoint echoes a signed url_verification
// challenge; the challenge is answered, never stored, and never echoed unverified.
func TestSlackURLVerificationIsAnsweredAfterVerificationAndNotStored(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderSlack, maxBodyBytes: 1 << 20})
	body := []byte(`{"token":"t","challenge":"c-3eZbrw1aBm2rZgRNFdxV","type":"url_verification"}`)

	forged := f.post("/hooks", body, http.Header{"Content-Type": {"application/json"}})
	if forged.code != http.StatusUnauthorized || strings.Contains(forged.body, "c-3eZbrw1aBm2rZgRNFdxV") {
		t.Fatalf("unsigned challenge: %d %q, want 401 without the echo", forged.code, forged.body)
	}

	got := f.post("/hooks", body, signedHeader(t, v1alpha1.ProviderSlack, body, nil))
	if got.code != http.StatusOK || got.body != `{"challenge":"c-3eZbrw1aBm2rZgRNFdxV"}` {
		t.Fatalf("signed challenge: %d %q, want 200 with the challenge", got.code, got.body)
	}
	f.assertNothingStored()
	if n := f.requests("200", "handshake"); n != 1 {
		t.Fatalf("handshake requests counted %v, want 1", n)
	}
}

// Zoom validates an endpoint URL with a signed endpoint.url_validation event and
// expects the plainToken back with its HMAC under the secret token (encryptedToken):
// the receiver answers it through the provider's handshake with the key that
// verified, stores nothing, and gives a forged validation no answer. A Zoom event
// signed the same way is recorded.
func TestZoomURLValidationIsAnsweredWithTheVerifyingKey(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: provider.ProviderZoom, maxBodyBytes: 1 << 20})
	zoomHeader := func(body []byte) http.Header {
		h := signedHeader(t, v1alpha1.ProviderSlack, body, nil)
		return http.Header{
			"Content-Type":           {"application/json"},
			"X-Zm-Request-Timestamp": h["X-Slack-Request-Timestamp"],
			"X-Zm-Signature":         h["X-Slack-Signature"],
		}
	}
	body := []byte(`{"event":"endpoint.url_validation","payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680}`)
	if forged := f.post("/hooks", body, http.Header{"Content-Type": {"application/json"}}); forged.code != http.StatusUnauthorized || strings.Contains(forged.body, "qgg8") {
		t.Fatalf("unsigned validation: %d %q, want 401 without an answer", forged.code, forged.body)
	}
	got := f.post("/hooks", body, zoomHeader(body))
	mac := hmac.New(sha256.New, []byte(sigtest.Secret(provider.ProviderZoom)))
	mac.Write([]byte("qgg8vlvZRS6UYooatFL8Aw"))
	want := `{"encryptedToken":"` + hex.EncodeToString(mac.Sum(nil)) + `","plainToken":"qgg8vlvZRS6UYooatFL8Aw"}`
	if got.code != http.StatusOK || got.body != want {
		t.Fatalf("signed validation: %d %q, want 200 %q", got.code, got.body, want)
	}
	f.assertNothingStored()

	event := []byte(`{"event":"meeting.started","event_ts":1654503849680,"payload":{"account_id":"a1","object":{"id":"85","uuid":"m-1"}}}`)
	if r := f.post("/hooks", event, zoomHeader(event)); r.code != http.StatusOK {
		t.Fatalf("signed event: %d %q", r.code, r.body)
	}
	if n := f.rowCounts()["events"]; n != 1 {
		t.Fatalf("%d receipts after one Zoom event, want 1", n)
	}
}
