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
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/metrics"
	"github.com/hookkeeper/hookkeeper/internal/provider"
	"github.com/hookkeeper/hookkeeper/internal/receiver"
	"github.com/hookkeeper/hookkeeper/internal/signature/sigtest"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

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

// TestStripeOrdersSampleRetriedPaymentIsPaidInEitherOrder: a PaymentIntent whose first
// attempt fails and whose retry succeeds sends payment_intent.payment_failed, then
// payment_intent.succeeded. Under the orders sample the order ends paid whichever of
// the two arrives first: in provider order the capture starts from failed; reversed, the
// older failure finds the order paid and changes nothing.
func TestStripeOrdersSampleRetriedPaymentIsPaidInEitherOrder(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderStripe, appTable: true,
		sample: "hookkeeper_v1alpha1_webhookendpoint_stripe_orders.yaml"})
	failedAt := time.Now().Add(-time.Minute)
	for _, order := range []string{"in-order", "reversed"} {
		mustExec(t, f.admin, `INSERT INTO public.orders VALUES ('acme', $1, 'payment_pending', 1200)`, order)
		failed := demo.StripeEvent("evt_failed_"+order, "payment_intent.payment_failed", order, 1200, failedAt)
		succeeded := demo.StripeEvent("evt_succeeded_"+order, "payment_intent.succeeded", order, 1200, failedAt.Add(10*time.Second))
		sends := [][]byte{failed, succeeded}
		if order == "reversed" {
			sends = [][]byte{succeeded, failed}
		}
		for _, body := range sends {
			if r := f.post("/hooks", body, stripeHeader(stripeSecret, body)); r.code != http.StatusOK {
				t.Fatalf("%s: %d %q", order, r.code, r.body)
			}
		}
		status := testsupport.Value[string](t, context.Background(), f.admin,
			`SELECT status FROM public.orders WHERE client_txn_id = $1`, order)
		if status != "paid" {
			t.Errorf("%s: order %s, want paid", order, status)
		}
	}
	outcome := testsupport.Value[string](t, context.Background(), f.admin,
		`SELECT outcome FROM hookkeeper.webhook_events WHERE event_id = 'evt_failed_reversed'`)
	if outcome != "ignored_state" {
		t.Errorf("the failure delivered after the success: %s, want ignored_state", outcome)
	}
}

// TestAdyenSampleRetriedPaymentIsAuthorisedInEitherOrder: the Adyen sample keys payments
// by merchantReference, and a shopper whose payment was refused may pay the same order
// again: a refused AUTHORISATION, then an authorised one under a new pspReference. The
// payment ends authorised whichever arrives first.
func TestAdyenSampleRetriedPaymentIsAuthorisedInEitherOrder(t *testing.T) {
	f := newFixture(t, fixtureOptions{provider: v1alpha1.ProviderAdyen, sample: "hookkeeper_v1alpha1_webhookendpoint_adyen.yaml"})
	for _, order := range []string{"in-order", "reversed"} {
		authorisation := func(psp, success string) []byte {
			it := sigtest.AdyenItem{PSP: psp + "-" + order, Merchant: "ShopAccount", Reference: order, Value: 1000,
				Currency: "EUR", EventCode: "AUTHORISATION", Success: success}
			return sigtest.AdyenBody(t, nil, it.JSON(t, "", nil))
		}
		sends := [][]byte{authorisation("PSP1", "false"), authorisation("PSP2", "true")}
		if order == "reversed" {
			sends[0], sends[1] = sends[1], sends[0]
		}
		for _, body := range sends {
			if r := f.post("/hooks", body, http.Header{"Content-Type": {"application/json"}}); r.code != http.StatusOK {
				t.Fatalf("%s: %d %q", order, r.code, r.body)
			}
		}
	}
	if got := f.rows().EntitiesInState(t, "authorised"); got != 2 {
		t.Errorf("payments authorised: %d, want both", got)
	}
}
