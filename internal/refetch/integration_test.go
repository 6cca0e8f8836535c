package refetch_test

// These tests run the real webhook path: a signed Stripe request into receiver's
// handler, the receipt transaction against a real PostgreSQL (internal/testsupport),
// and the re-fetch against a local server that speaks Stripe's object API.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/receiver"
	"github.com/hookkeeper/hookkeeper/internal/refetch"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

func TestMain(m *testing.M) { testsupport.Main(m) }

const (
	testSchema        = "hk"
	testSigningSecret = "whsec_refetchIntegrationSigningSecret"
	tenant            = "acme"
	// captureGuard is the guard of the docs: the live PaymentIntent, not the event's
	// copy of it, must have succeeded for exactly the order's amount.
	captureGuard = `live.status == "succeeded" && live.amount_received == entity.amount`
)

// harness is one endpoint served by the real handler, its database and the stub API.
type harness struct {
	t    *testing.T
	ctx  context.Context
	stub *stripeStub
	pool *pgxpool.Pool
	rows *testsupport.Rows
	srv  *httptest.Server
	logs *logBuffer
}

func newHarness(t *testing.T, timeout time.Duration) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	stub := newStripeStub(t)
	dbURL := testsupport.MigratedDatabase(t, testSchema)

	we := &v1alpha1.WebhookEndpoint{
		ObjectMeta: metav1.ObjectMeta{Name: "orders-payments", Namespace: "shop"},
		Spec: v1alpha1.WebhookEndpointSpec{
			Provider: v1alpha1.ProviderSpec{
				Type: v1alpha1.ProviderStripe,
				Refetch: &v1alpha1.RefetchSpec{
					APIKeySecretRef: v1alpha1SecretRef("stripe-api", "restricted-key"),
					BaseURL:         stub.URL(),
					// The stub serves plain http on 127.0.0.1.
					AllowInsecureHTTP: true,
					Transitions:       []string{"capture"},
					Timeout:           &metav1.Duration{Duration: timeout},
				},
			},
			SigningSecrets: []v1alpha1.SigningSecret{{SecretKeyRef: v1alpha1SecretRef("stripe-webhook", "current")}},
			Event:          v1alpha1.EventSpec{EntityKey: "body.data.object.metadata.client_txn_id"},
			Database:       v1alpha1.DatabaseSpec{URLSecretRef: v1alpha1SecretRef("shop-db-app", "uri"), Schema: testSchema},
			Entity: v1alpha1.EntitySpec{
				Table: &v1alpha1.EntityTableSpec{
					Schema: "public", Name: "orders", KeyColumn: "client_txn_id", StateColumn: "status",
					AmountColumn: "expected_amount_paise",
					Tenant:       &v1alpha1.TenantSpec{Column: "tenant_id", Value: tenant},
				},
				OnUnmatched: v1alpha1.UnmatchedRecord,
			},
			StateMachine: v1alpha1.StateMachineSpec{
				Initial: "payment_pending",
				States:  []string{"payment_pending", "paid", "failed"},
				Transitions: []v1alpha1.Transition{
					{Name: "capture", On: []string{"payment_intent.succeeded"}, From: []string{"payment_pending"}, To: "paid",
						Guard: captureGuard, Emit: "order.paid"},
					{Name: "fail", On: []string{"payment_intent.payment_failed"}, From: []string{"payment_pending"}, To: "failed",
						Emit: "order.failed"},
				},
			},
			Delivery: v1alpha1.DeliverySpec{Sink: v1alpha1.SinkSpec{URL: "http://fulfilment.shop.svc:8080/events"}},
		},
	}
	env := map[string]string{
		config.EnvDatabaseURL:               dbURL,
		config.EnvSigningSecretPrefix + "0": testSigningSecret,
		config.EnvRefetchAPIKey:             testAPIKey,
	}
	getenv := func(k string) string { return env[k] }
	ep, err := config.Compile(we, getenv)
	if err != nil {
		t.Fatalf("compile endpoint: %v", err)
	}

	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `CREATE TABLE public.orders (
  tenant_id             text   NOT NULL,
  client_txn_id         text   NOT NULL,
  status                text   NOT NULL,
  expected_amount_paise bigint NOT NULL,
  PRIMARY KEY (tenant_id, client_txn_id))`); err != nil {
		t.Fatal(err)
	}

	logs := &logBuffer{}
	// The wiring a receiver process does: a Refetcher from the manifest and the
	// environment, handed to the Recorder as its `live`.
	rf, err := refetch.FromEnv(ep.Spec.Provider, getenv, refetch.Options{Logger: logs.logger()})
	if err != nil {
		t.Fatalf("refetch: %v", err)
	}
	rec := receipt.NewRecorder(pool, ep, receipt.WithLive(refetch.LiveFunc(rf)))
	h, err := receiver.HandlerFor(ep, rec, logs.logger())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &harness{t: t, ctx: ctx, stub: stub, pool: pool, rows: testsupport.NewRows(pool, store.TablesIn(testSchema)), srv: srv, logs: logs}
}

func (h *harness) order(txnID string, amount int64) {
	h.t.Helper()
	if _, err := h.pool.Exec(h.ctx, `INSERT INTO public.orders VALUES ($1, $2, 'payment_pending', $3)`, tenant, txnID, amount); err != nil {
		h.t.Fatal(err)
	}
}

// deliver POSTs a signed Stripe event about PaymentIntent piID of order txnID and
// returns the status code. The event's own copy of the object always claims success
// with the full amount: only the live object can tell otherwise.
func (h *harness) deliver(eventID, eventType, piID, txnID string) int {
	h.t.Helper()
	status := "succeeded"
	if eventType == "payment_intent.payment_failed" {
		status = "requires_payment_method"
	}
	body, err := json.Marshal(map[string]any{
		"id": eventID, "object": "event", "type": eventType, "api_version": "2024-06-20",
		"created": time.Now().Unix(), "livemode": false,
		"data": map[string]any{"object": map[string]any{
			"id": piID, "object": "payment_intent", "amount": 2000, "amount_received": 2000,
			"currency": "inr", "status": status, "metadata": map[string]any{"client_txn_id": txnID},
		}},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(h.ctx, http.MethodPost, h.srv.URL+"/", bytes.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", demo.StripeSignature(testSigningSecret, body, time.Now()))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("deliver %s: %v", eventID, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

func (h *harness) receipt(eventID string) (outcome, detail string) {
	h.t.Helper()
	if err := h.pool.QueryRow(h.ctx, `SELECT outcome, detail FROM hk.webhook_events WHERE event_id = $1`, eventID).Scan(&outcome, &detail); err != nil {
		h.t.Fatalf("receipt of %s: %v", eventID, err)
	}
	return outcome, detail
}

func (h *harness) orderStatus(txnID string) string {
	h.t.Helper()
	var s string
	if err := h.pool.QueryRow(h.ctx, `SELECT status FROM public.orders WHERE tenant_id = $1 AND client_txn_id = $2`, tenant, txnID).Scan(&s); err != nil {
		h.t.Fatal(err)
	}
	return s
}

// post delivers like deliver and fails the test unless the receiver answers want.
func (h *harness) post(eventID, eventType, piID, txnID string, want int) {
	h.t.Helper()
	if code := h.deliver(eventID, eventType, piID, txnID); code != want {
		h.t.Fatalf("delivery of %s answered %d, want %d", eventID, code, want)
	}
}

// expect checks that eventID was recorded with outcome and that order txnID is in
// state, and returns the receipt's detail.
func (h *harness) expect(eventID string, outcome receipt.Outcome, txnID, state string) (detail string) {
	h.t.Helper()
	got, detail := h.receipt(eventID)
	if got != string(outcome) {
		h.t.Errorf("%s: outcome %s (%s), want %s", eventID, got, detail, outcome)
	}
	if s := h.orderStatus(txnID); s != state {
		h.t.Errorf("order %s is %s, want %s", txnID, s, state)
	}
	return detail
}

// The live object, not the event's copy of it, decides the capture guard: each case
// serves one PaymentIntent (or none) and checks the receipt, the order and the outbox.
func TestLiveObjectDecidesTheGuard(t *testing.T) {
	for _, tc := range []struct {
		name string
		// id names the event (evt_<id>), the PaymentIntent (pi_<id>) and the order.
		id          string
		orderAmount int64
		// object is the fixture the API answers for pi_<id>; none: Stripe's 404.
		object  string
		outcome receipt.Outcome
		state   string
		// detail is the receipt's detail: the verdict and what the provider answered.
		detail string
		outbox int
	}{
		{"not succeeded does not move the order", "rpm", 2000, "payment_intent_requires_payment_method.json",
			receipt.OutcomeGuardFailed, "payment_pending", "capture: guard is false; refetch: payment_intent pi_rpm is requires_payment_method", 0},
		{"succeeded with the amount moves the order", "ok", 2000, "payment_intent_succeeded.json",
			receipt.OutcomeApplied, "paid", "refetch: payment_intent pi_ok is succeeded", 1},
		// The order expects more than the PaymentIntent received.
		{"amount below the order does not move it", "short", 5000, "payment_intent_succeeded.json",
			receipt.OutcomeGuardFailed, "payment_pending", "capture: guard is false; refetch: payment_intent pi_short is succeeded", 0},
		{"unknown object is recorded as guard failed", "404", 2000, "",
			receipt.OutcomeGuardFailed, "payment_pending", "refetch: object pi_404 not found", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, 2*time.Second)
			evt, pi, order := "evt_"+tc.id, "pi_"+tc.id, "order-"+tc.id
			h.order(order, tc.orderAmount)
			if tc.object != "" {
				h.stub.set("/v1/payment_intents/"+pi, http.StatusOK, objectFixture(t, tc.object, pi, order))
			}
			h.post(evt, "payment_intent.succeeded", pi, order, http.StatusOK)
			if detail := h.expect(evt, tc.outcome, order, tc.state); detail != tc.detail {
				t.Errorf("detail %q, want %q", detail, tc.detail)
			}
			if n := h.rows.OutboxFor(t, order); n != tc.outbox {
				t.Errorf("%d outbox rows, want %d", n, tc.outbox)
			}
			if n := h.stub.requests.Load(); n != 1 {
				t.Errorf("%d API requests, want 1", n)
			}
		})
	}
}

func TestProviderErrorIs503AndTheRetryAppliesOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2*time.Second)
	h.order("order-500", 2000)
	path := "/v1/payment_intents/pi_500"
	h.stub.set(path, http.StatusInternalServerError, fixture(t, "error_500.json"))

	h.post("evt_500", "payment_intent.succeeded", "pi_500", "order-500", http.StatusServiceUnavailable)
	if n := h.rows.ReceiptsOf(t, "evt_500"); n != 0 {
		t.Fatalf("%d receipts stored for a 503, want 0", n)
	}
	if !bytes.Contains([]byte(h.logs.String()), []byte("webhook not recorded: provider re-fetch")) {
		t.Errorf("the receiver's log does not say the re-fetch failed:\n%s", h.logs.String())
	}
	if s := h.orderStatus("order-500"); s != "payment_pending" {
		t.Fatalf("order moved to %s", s)
	}

	// Stripe recovers; its retry of the same event applies, once.
	h.stub.set(path, http.StatusOK, objectFixture(t, "payment_intent_succeeded.json", "pi_500", "order-500"))
	for range 2 {
		h.post("evt_500", "payment_intent.succeeded", "pi_500", "order-500", http.StatusOK)
	}
	h.expect("evt_500", receipt.OutcomeApplied, "order-500", "paid")
	if n := h.rows.ReceiptsOf(t, "evt_500"); n != 1 {
		t.Errorf("%d receipts, want 1", n)
	}
	if n := h.rows.OutboxFor(t, "order-500"); n != 1 {
		t.Errorf("%d outbox rows, want 1", n)
	}
}

func TestProviderTimeoutIs503AndTheRetryApplies(t *testing.T) {
	h := newHarness(t, 300*time.Millisecond)
	h.order("order-slow", 2000)
	h.stub.set("/v1/payment_intents/pi_slow", http.StatusOK, objectFixture(t, "payment_intent_succeeded.json", "pi_slow", "order-slow"))
	h.stub.holdRequests()

	h.post("evt_slow", "payment_intent.succeeded", "pi_slow", "order-slow", http.StatusServiceUnavailable)
	if n := h.rows.ReceiptsOf(t, "evt_slow"); n != 0 {
		t.Fatalf("%d receipts stored for a 503, want 0", n)
	}

	h.stub.release()
	h.post("evt_slow", "payment_intent.succeeded", "pi_slow", "order-slow", http.StatusOK)
	h.expect("evt_slow", receipt.OutcomeApplied, "order-slow", "paid")
}

func TestRejectedKeyIs503WithoutLeakingIt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2*time.Second)
	h.order("order-key", 2000)
	h.stub.set("/v1/payment_intents/pi_key", http.StatusUnauthorized, fixture(t, "error_401.json"))

	h.post("evt_key", "payment_intent.succeeded", "pi_key", "order-key", http.StatusServiceUnavailable)
	if n := h.rows.ReceiptsOf(t, "evt_key"); n != 0 {
		t.Errorf("%d receipts stored for a 503, want 0", n)
	}
	logs := h.logs.String()
	if !bytes.Contains([]byte(logs), []byte("apiKeySecretRef")) {
		t.Errorf("no log line tells a person to fix the key:\n%s", logs)
	}
	if bytes.Contains([]byte(logs), []byte(testAPIKey)) || bytes.Contains([]byte(logs), []byte("Invalid API Key")) {
		t.Errorf("the key leaked into the logs:\n%s", logs)
	}
}

func TestTransitionsNotListedNeverCallTheAPI(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2*time.Second)
	h.order("order-fail", 2000)

	// fail is not in spec.provider.refetch.transitions.
	h.post("evt_fail", "payment_intent.payment_failed", "pi_fail", "order-fail", http.StatusOK)
	h.expect("evt_fail", receipt.OutcomeApplied, "order-fail", "failed")
	// No transition handles this type at all.
	h.post("evt_other", "payment_intent.created", "pi_fail", "order-fail", http.StatusOK)
	if n := h.stub.requests.Load(); n != 0 {
		t.Errorf("%d API requests for transitions that do not re-fetch, want 0", n)
	}
}
