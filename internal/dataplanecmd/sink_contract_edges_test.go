package dataplanecmd_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// TestSinkContractGoneDeadLettersAtOnce: docs/concepts.md: dead-letters at once when the sink
// answers 410 Gone.
func TestSinkContractGoneDeadLettersAtOnce(t *testing.T) {
	dbURL := testsupport.MigratedDatabase(t, "hookkeeper")
	sink := newContractSink(t)
	sink.hook = func(w http.ResponseWriter, d *contractDelivery, _ int) bool {
		w.WriteHeader(http.StatusGone)
		return false
	}
	rr := startContractReceiver(t, dbURL, contractManifest(sink.srv.URL, "backoff: {initial: 50ms, max: 100ms}"), true)
	id := contractEventID("gone")
	rr.send(t, id, "payment_intent.succeeded", "ord-gone", time.Now())
	conn := contractConn(t, dbURL)
	testsupport.Eventually(t, 20*time.Second, 50*time.Millisecond, "dead-lettered", func() bool {
		return contractCount(t, conn, `SELECT count(*) FROM hookkeeper.outbox WHERE dead_at IS NOT NULL`) == 1
	})
	if n := len(sink.requestsFor(receipt.DedupeKey(contractEndpointKey, id, "order.paid"))); n != 1 {
		t.Errorf("%d attempts, want 1 (410 dead-letters at once)", n)
	}
}

// TestSinkContractRetryAfterLongerThanBackoffMaxIsHonoured: docs/architecture.md step 13: a
// failure is retried after a full-jitter backoff, "at least the sink's Retry-After";
// docs/concepts.md: "honouring the sink's Retry-After".
func TestSinkContractRetryAfterLongerThanBackoffMaxIsHonoured(t *testing.T) {
	dbURL := testsupport.MigratedDatabase(t, "hookkeeper")
	sink := newContractSink(t)
	sink.hook = func(w http.ResponseWriter, d *contractDelivery, seen int) bool {
		if seen == 0 {
			w.Header().Set("Retry-After", "4")
			w.WriteHeader(http.StatusTooManyRequests)
			return false
		}
		w.WriteHeader(http.StatusOK)
		return true
	}
	rr := startContractReceiver(t, dbURL, contractManifest(sink.srv.URL, "backoff: {initial: 100ms, max: 1s}"), true)
	id := contractEventID("ra")
	rr.send(t, id, "payment_intent.succeeded", "ord-ra", time.Now())
	testsupport.Eventually(t, 20*time.Second, 50*time.Millisecond, "delivered", func() bool { return sink.appliedCount() == 1 })
	reqs := sink.requestsFor(receipt.DedupeKey(contractEndpointKey, id, "order.paid"))
	if len(reqs) < 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	if gap := reqs[1].at.Sub(reqs[0].at); gap < 4*time.Second-100*time.Millisecond {
		t.Errorf("retried %v after a 429 with Retry-After: 4 (backoff.max 1s), want at least 4s", gap.Round(time.Millisecond))
	}
}

// TestSinkContractTLSFailureLastErrorNamesNoHost: an https sink whose certificate does not
// verify; last_error says what failed without the sink's host or address.
func TestSinkContractTLSFailureLastErrorNamesNoSinkHost(t *testing.T) {
	dbURL := testsupport.MigratedDatabase(t, "hookkeeper")
	tlsSink := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer tlsSink.Close()
	port := tlsSink.URL[strings.LastIndex(tlsSink.URL, ":")+1:]
	sinkURL := "https://localhost:" + port + "/hook"
	rr := startContractReceiver(t, dbURL, contractManifest(sinkURL, "maxAttempts: 2, backoff: {initial: 50ms, max: 100ms}"), true)
	rr.send(t, contractEventID("tls"), "payment_intent.succeeded", "ord-tls", time.Now())
	conn := contractConn(t, dbURL)
	testsupport.Eventually(t, 20*time.Second, 50*time.Millisecond, "dead-lettered", func() bool {
		return contractCount(t, conn, `SELECT count(*) FROM hookkeeper.outbox WHERE dead_at IS NOT NULL`) == 1
	})
	var lastErr string
	_ = conn.QueryRow(context.Background(), `SELECT last_error FROM hookkeeper.outbox`).Scan(&lastErr)
	t.Logf("last_error: %q", lastErr)
	// example.com is the name in httptest's certificate: the sink host's own names.
	for _, bad := range []string{"localhost", "127.0.0.1", port, "example.com"} {
		if strings.Contains(lastErr, bad) {
			t.Errorf("last_error %q contains %q", lastErr, bad)
		}
	}
	if !strings.Contains(lastErr, "certificate") {
		t.Errorf("last_error %q does not say the certificate failed", lastErr)
	}
}

// TestSinkContractDeliveredEventIsTheProviderEvent: docs/concepts.md says data.event is
// the provider's event as jsonb keeps it: the same JSON value, not the same bytes.
func TestSinkContractDeliveredEventIsTheProviderEvent(t *testing.T) {
	dbURL := testsupport.MigratedDatabase(t, "hookkeeper")
	sink := newContractSink(t)
	rr := startContractReceiver(t, dbURL, contractManifest(sink.srv.URL, ""), true)
	id := contractEventID("raw")
	body := demo.StripeEvent(id, "payment_intent.succeeded", "ord-raw", 4200, time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if status, err := demo.PostStripe(ctx, rr.url, contractStripeSecret, body); err != nil || status != http.StatusOK {
		t.Fatalf("webhook: %d %v", status, err)
	}
	testsupport.Eventually(t, 20*time.Second, 50*time.Millisecond, "delivered", func() bool { return sink.appliedCount() == 1 })
	d := sink.snapshot()[0]
	var env struct {
		Data struct {
			Event json.RawMessage `json:"event"`
		} `json:"data"`
	}
	if err := json.Unmarshal(d.body, &env); err != nil {
		t.Fatal(err)
	}
	var sent, delivered any
	if err := json.Unmarshal(body, &sent); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(env.Data.Event, &delivered); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sent, delivered) {
		t.Errorf("data.event is not the provider's event:\n sent      %s\n delivered %s", body, env.Data.Event)
	}
}
