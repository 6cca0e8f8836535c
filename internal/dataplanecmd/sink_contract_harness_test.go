package dataplanecmd_test

// An independent sink, written from docs/concepts.md ("The outbox and the dispatcher"),
// docs/architecture.md (steps 11-14) and docs/operations.md, receiving what a real
// receiver (dataplanecmd.Serve on PostgreSQL) dispatches after real signed Stripe
// webhooks. It verifies the Standard Webhooks signature the docs describe and dedupes
// on Idempotency-Key, as the docs tell an app to.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/jackc/pgx/v5"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/dataplanecmd"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

const (
	contractEndpointKey  = "contract/orders"
	contractStripeSecret = "whsec_contract_provider_secret"
	// contractSinkKey is a Standard Webhooks key: whsec_ + base64 of 24 bytes.
	contractSinkKeyRaw = "contract-sink-signing-key!"
)

var contractSinkKey = "whsec_" + base64.StdEncoding.EncodeToString([]byte(contractSinkKeyRaw))

// ordersManifest is the WebhookEndpoint "orders" in namespace that the in-process
// receiver tests serve: Stripe at /stripe, orders keyed by client_txn_id, paid on
// payment_intent.succeeded and refunded on charge.refunded. signingSecrets and delivery
// are the YAML (flow style) of spec.signingSecrets and spec.delivery.
func ordersManifest(namespace, signingSecrets, delivery string) string {
	return fmt.Sprintf(`apiVersion: hookkeeper.dev/v1alpha1
kind: WebhookEndpoint
metadata: {name: orders, namespace: %s}
spec:
  provider: {type: Stripe}
  signingSecrets: %s
  event:
    entityKey: body.data.object.metadata.client_txn_id
  database:
    urlSecretRef: {name: db, key: uri}
    schema: hookkeeper
  entity: {onUnmatched: Create}
  stateMachine:
    initial: payment_pending
    states: [payment_pending, paid, refunded]
    transitions:
    - {name: capture, "on": [payment_intent.succeeded], from: [payment_pending], to: paid, emit: order.paid}
    - {name: refund, "on": [charge.refunded], from: [paid], to: refunded, emit: order.refunded}
  delivery: %s
  receiver: {path: /stripe}
`, namespace, signingSecrets, delivery)
}

// contractManifest is the contract endpoint (contractEndpointKey), verifying with
// contractStripeSecret and delivering to sinkURL signed with contractSinkKey, with the
// given extra delivery fields (YAML flow-map entries).
func contractManifest(sinkURL, deliveryExtra string) string {
	if deliveryExtra != "" {
		deliveryExtra = ", " + deliveryExtra
	}
	return ordersManifest("contract", `[{secretKeyRef: {name: stripe-webhook, key: current}}]`,
		fmt.Sprintf(`{sink: {url: %q}, signingSecretRef: {name: sink-key, key: whsec}%s}`, sinkURL, deliveryExtra))
}

// contractLogs collects every log line of a receiver.
type contractLogs struct {
	mu    sync.Mutex
	lines []string
}

func (l *contractLogs) add(s string) {
	l.mu.Lock()
	l.lines = append(l.lines, s)
	l.mu.Unlock()
}

func (l *contractLogs) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

type contractReceiver struct {
	url   string // webhook URL
	admin string // admin host:port
	logs  *contractLogs
	stop  func()
}

// contractDeployment is the contract endpoint on a migrated database of its own: what a
// sink contract test starts its receivers on.
type contractDeployment struct {
	dbURL    string
	manifest string
}

// deployContract migrates a database for contractManifest(sinkURL, deliveryExtra).
func deployContract(t *testing.T, sinkURL, deliveryExtra string) contractDeployment {
	t.Helper()
	return contractDeployment{
		dbURL:    testsupport.MigratedDatabase(t, "hookkeeper"),
		manifest: contractManifest(sinkURL, deliveryExtra),
	}
}

// startReceiver serves the deployment (with its database URL and the keys in its
// environment) in this process with its dispatcher, as `hookkeeper-receiver receiver`
// does, and waits for /readyz. Each call starts another receiver on the same database.
func (d contractDeployment) startReceiver(t *testing.T) *contractReceiver {
	t.Helper()
	return serveManifest(t, d.manifest, map[string]string{
		config.EnvDatabaseURL:               d.dbURL,
		config.EnvSigningSecretPrefix + "0": contractStripeSecret,
		config.EnvDeliverySecret:            contractSinkKey,
	}, true)
}

// serveManifest serves manifest with env as its environment, in this process, and waits
// for /readyz; the receiver stops at cleanup (or at stop).
func serveManifest(t *testing.T, manifest string, env map[string]string, dispatcher bool) *contractReceiver {
	t.Helper()
	path := filepath.Join(t.TempDir(), "endpoint.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string { return env[k] }
	ep, err := config.Load(path, getenv)
	if err != nil {
		t.Fatalf("load endpoint: %v", err)
	}
	logs := &contractLogs{}
	log := funcr.NewJSON(func(obj string) { logs.add(obj) }, funcr.Options{Verbosity: 10})
	webhookAddr, adminAddr := testsupport.FreeAddr(t), testsupport.FreeAddr(t)
	receiver := testsupport.Run(t, context.Background(), "contract receiver", 40*time.Second, func(ctx context.Context) error {
		return dataplanecmd.Serve(ctx, dataplanecmd.ServeOptions{
			Endpoint: ep, Getenv: getenv, Dispatcher: dispatcher,
			WebhookAddr: webhookAddr, AdminAddr: adminAddr,
			ShutdownTimeout: 5 * time.Second, Log: log,
		})
	})
	testsupport.WaitReady(t, "http://"+adminAddr+"/readyz", 30*time.Second, receiver.Exited)
	return &contractReceiver{url: "http://" + webhookAddr + "/stripe", admin: adminAddr, logs: logs,
		stop: func() { _ = receiver.Stop(t) }}
}

func (rr *contractReceiver) send(t *testing.T, id, typ, order string, at time.Time) {
	t.Helper()
	body := demo.StripeEvent(id, typ, order, 4200, at)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	status, err := demo.PostStripe(ctx, rr.url, contractStripeSecret, body)
	if err != nil || status != http.StatusOK {
		t.Fatalf("webhook %s: %d (%v), want 200", id, status, err)
	}
}

// sendPayment sends payment_intent.succeeded, with a fresh event id (contractEventID of
// name), for the order ord-<name>, and returns the key the sink sees on its order.paid
// effect.
func (rr *contractReceiver) sendPayment(t *testing.T, name string) (key string) {
	t.Helper()
	id := contractEventID(name)
	rr.send(t, id, "payment_intent.succeeded", "ord-"+name, time.Now())
	return receipt.DedupeKey(contractEndpointKey, id, "order.paid")
}

// awaitOutboxRows waits up to timeout, for what, until want rows of the contract
// endpoint's outbox (schema hookkeeper) have column set: delivered_at or dead_at.
func awaitOutboxRows(t *testing.T, conn *pgx.Conn, column string, want int, timeout time.Duration, what string) {
	t.Helper()
	testsupport.Eventually(t, timeout, 50*time.Millisecond, what, func() bool {
		return count(t, conn, `SELECT count(*) FROM hookkeeper.outbox WHERE `+column+` IS NOT NULL`) == want
	})
}

// deadLetter is a payment whose outbox row was dead-lettered (deadLetterPayment): its
// deployment, the receiver that took it, a connection to its database and the key the
// sink sees.
type deadLetter struct {
	ep   contractDeployment
	rr   *contractReceiver
	conn *pgx.Conn
	key  string
}

// deadLetterPayment deploys the contract endpoint with deliveryExtra, starts a receiver,
// sends one payment (sendPayment of name) and waits until its outbox row is
// dead-lettered (what names the wait).
func deadLetterPayment(t *testing.T, sinkURL, deliveryExtra, name, what string) deadLetter {
	t.Helper()
	d := deadLetter{ep: deployContract(t, sinkURL, deliveryExtra)}
	d.rr = d.ep.startReceiver(t)
	d.key = d.rr.sendPayment(t, name)
	d.conn = connect(t, d.ep.dbURL)
	awaitOutboxRows(t, d.conn, "dead_at", 1, 20*time.Second, what)
	return d
}

// outboxLastError is last_error of the contract endpoint's outbox row ("" when the
// row has none), what tests read to check a failure names no secret or sink address.
func outboxLastError(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var lastErr string
	if err := conn.QueryRow(context.Background(), `SELECT COALESCE(last_error, '') FROM hookkeeper.outbox`).Scan(&lastErr); err != nil {
		t.Fatalf("read the outbox row's last_error: %v", err)
	}
	return lastErr
}

// contractDelivery is one request as the sink saw it.
type contractDelivery struct {
	at      time.Time
	header  http.Header
	body    []byte
	env     map[string]any
	key     string
	sigOK   bool
	sigNote string
	host    string
}

// contractSink implements what the docs say an app does: verify the Standard Webhooks
// signature, store each Idempotency-Key with its effect, answer 2xx to a key it has seen.
type contractSink struct {
	srv *httptest.Server
	key []byte

	mu         sync.Mutex
	deliveries []*contractDelivery
	// effects maps an effect's key to the number of times it was applied (at most 1 when
	// the keys are stable); effectsBySource maps "sourceEventId/type" to the keys seen.
	effects         map[string]int
	effectsBySource map[string]map[string]bool
	// applied is, per entity, the effect types in the order they were applied.
	applied  map[string][]string
	inFlight map[string]int
	// overlaps counts requests that arrived while another with the same key was in flight.
	overlaps int
	// hook, when set, answers the request instead of the default (apply, 200). It is
	// called with the number of earlier requests with the same key; apply says whether
	// the sink's effect was committed (before the answer is written).
	hook func(w http.ResponseWriter, d *contractDelivery, seen int) (apply bool)
}

// retryAfterHook is a contractSink hook that answers a key's first request 429 with
// Retry-After: seconds, its next ones each status of then in turn, and the rest 200,
// applying the effect only with the 200.
func retryAfterHook(seconds int, then ...int) func(w http.ResponseWriter, d *contractDelivery, seen int) bool {
	return func(w http.ResponseWriter, _ *contractDelivery, seen int) bool {
		switch {
		case seen == 0:
			w.Header().Set("Retry-After", strconv.Itoa(seconds))
			w.WriteHeader(http.StatusTooManyRequests)
			return false
		case seen <= len(then):
			w.WriteHeader(then[seen-1])
			return false
		}
		w.WriteHeader(http.StatusOK)
		return true
	}
}

func newContractSink(t *testing.T) *contractSink {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(contractSinkKey, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	s := &contractSink{key: key, effects: map[string]int{}, effectsBySource: map[string]map[string]bool{},
		applied: map[string][]string{}, inFlight: map[string]int{}}
	s.srv = httptest.NewServer(s)
	t.Cleanup(s.srv.Close)
	return s
}

// verify checks webhook-signature as the Standard Webhooks spec says: base64 of
// HMAC-SHA256 over "id.timestamp.body" keyed with the base64-decoded secret, "v1,"
// prefixed, space separated, timestamp within 5 minutes.
func (s *contractSink) verify(h http.Header, body []byte) (bool, string) {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return false, "missing standard webhooks headers"
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false, "bad timestamp"
	}
	if d := time.Since(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return false, "timestamp out of tolerance"
	}
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	want := base64.StdEncoding.EncodeToString(m.Sum(nil))
	for _, sig := range strings.Fields(sigs) {
		v, b64, ok := strings.Cut(sig, ",")
		if ok && v == "v1" && hmac.Equal([]byte(b64), []byte(want)) {
			return true, ""
		}
	}
	return false, "no signature matches"
}

func (s *contractSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	d := &contractDelivery{at: time.Now(), header: r.Header.Clone(), body: body, key: r.Header.Get("Idempotency-Key"), host: r.Host}
	_ = json.Unmarshal(body, &d.env)
	d.sigOK, d.sigNote = s.verify(r.Header, body)

	s.mu.Lock()
	seen := 0
	for _, p := range s.deliveries {
		if p.key == d.key {
			seen++
		}
	}
	s.deliveries = append(s.deliveries, d)
	if s.inFlight[d.key] > 0 {
		s.overlaps++
	}
	s.inFlight[d.key]++
	hook := s.hook
	s.mu.Unlock()
	finish := sync.OnceFunc(func() {
		s.mu.Lock()
		s.inFlight[d.key]--
		s.mu.Unlock()
	})
	defer finish()

	if !d.sigOK {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	if hook == nil {
		s.apply(d)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	// The hook may answer only after applying: apply first when it says so.
	rec := &contractDeferred{finish: finish}
	apply := hook(rec, d, seen)
	if apply {
		s.apply(d)
	}
	rec.flush(w)
}

// contractDeferred buffers a hook's answer so the effect is stored before it is written.
type contractDeferred struct {
	h      http.Header
	status int
	body   bytes.Buffer
	then   func(w http.ResponseWriter)
	// finish ends the request's time in flight. It runs before then: a then that drops
	// the connection ends the request for the client at once, and Go's transport re-sends
	// a request with an Idempotency-Key at once when a reused connection closes before the
	// answer, before this handler has returned. That re-send is not an overlap.
	finish func()
}

func (r *contractDeferred) Header() http.Header {
	if r.h == nil {
		r.h = http.Header{}
	}
	return r.h
}
func (r *contractDeferred) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *contractDeferred) WriteHeader(code int)        { r.status = code }
func (r *contractDeferred) flush(w http.ResponseWriter) {
	if r.then != nil {
		if r.finish != nil {
			r.finish()
		}
		r.then(w)
		return
	}
	for k, v := range r.h {
		w.Header()[k] = v
	}
	if r.status == 0 {
		r.status = http.StatusOK
	}
	w.WriteHeader(r.status)
	_, _ = w.Write(r.body.Bytes())
}

func (s *contractSink) apply(d *contractDelivery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.effects[d.key]++
	if s.effects[d.key] > 1 {
		return // a key it has seen: 2xx, no effect
	}
	typ, _ := d.env["type"].(string)
	src, _ := d.env["sourceEventId"].(string)
	ent, _ := d.env["entityKey"].(string)
	bySrc := src + "/" + typ
	if s.effectsBySource[bySrc] == nil {
		s.effectsBySource[bySrc] = map[string]bool{}
	}
	s.effectsBySource[bySrc][d.key] = true
	s.applied[ent] = append(s.applied[ent], typ)
}

func (s *contractSink) snapshot() []*contractDelivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*contractDelivery(nil), s.deliveries...)
}

func (s *contractSink) appliedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.effects)
}

// awaitApplied waits up to timeout, for what, until the sink has applied n distinct
// effects.
func (s *contractSink) awaitApplied(t *testing.T, n int, timeout time.Duration, what string) {
	t.Helper()
	testsupport.Eventually(t, timeout, 50*time.Millisecond, what, func() bool { return s.appliedCount() == n })
}

func (s *contractSink) requestsFor(key string) []*contractDelivery {
	var out []*contractDelivery
	for _, d := range s.snapshot() {
		if d.key == key {
			out = append(out, d)
		}
	}
	return out
}

// checkOnce fails t when one logical effect (source event, type) reached the sink
// under two keys, or one key's effect was applied under two in-flight requests.
func (s *contractSink) checkOnce(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for src, keys := range s.effectsBySource {
		if len(keys) > 1 {
			t.Errorf("effect %s applied under %d different keys: applied twice", src, len(keys))
		}
	}
	if s.overlaps > 0 {
		t.Errorf("%d requests arrived while another request with the same Idempotency-Key was in flight", s.overlaps)
	}
	for _, d := range s.deliveries {
		if !d.sigOK {
			t.Errorf("delivery %s: signature does not verify: %s", d.key, d.sigNote)
		}
	}
}

var contractEventSeq atomic.Int64

func contractEventID(prefix string) string {
	return fmt.Sprintf("evt_%s_%d_%d", prefix, time.Now().UnixNano(), contractEventSeq.Add(1))
}
