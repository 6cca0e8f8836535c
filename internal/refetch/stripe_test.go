package refetch_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/hookkeeper/hookkeeper/internal/expr"
	"github.com/hookkeeper/hookkeeper/internal/refetch"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// stripeEvent is a Stripe event of type typ naming object (type, id) whose own copy of
// the object states status ("" for none).
func stripeEvent(t *testing.T, typ, objectType, id, status string) refetch.Event {
	t.Helper()
	obj := map[string]any{"id": id, "object": objectType, "amount": int64(2000)}
	if status != "" {
		obj["status"] = status
	}
	return refetch.Event{
		ID:   "evt_" + id,
		Type: typ,
		Body: map[string]any{"id": "evt_" + id, "object": "event", "type": typ, "data": map[string]any{"object": obj}},
	}
}

// logBuffer captures log lines, to prove the key never reaches them.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.buf.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{})
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newStripe(t *testing.T, stub *stripeStub, mod func(*refetch.StripeOptions)) *refetch.Stripe {
	t.Helper()
	opts := refetch.StripeOptions{APIKey: testAPIKey, BaseURL: stub.URL(), AllowInsecureHTTP: true, Timeout: 2 * time.Second, CacheTTL: -1}
	if mod != nil {
		mod(&opts)
	}
	s, err := refetch.NewStripe(opts)
	if err != nil {
		t.Fatalf("NewStripe: %v", err)
	}
	return s
}

func TestStripeFetchesTheNamedObject(t *testing.T) {
	stub := newStripeStub(t)
	stub.set("/v1/payment_intents/pi_ok", http.StatusOK, objectFixture(t, "payment_intent_succeeded.json", "pi_ok", ""))
	s := newStripe(t, stub, nil)

	live, err := s.Fetch(context.Background(), stripeEvent(t, "payment_intent.succeeded", "payment_intent", "pi_ok", "succeeded"))
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if live.ObjectID != "pi_ok" || live.ObjectType != "payment_intent" || live.Status != "succeeded" {
		t.Errorf("live = %s %s %s, want payment_intent pi_ok succeeded", live.ObjectType, live.ObjectID, live.Status)
	}
	// Integral numbers are int64, so a guard compares them with entity.amount exactly.
	if got, ok := live.Object["amount_received"].(int64); !ok || got != 2000 {
		t.Errorf("live.amount_received = %#v, want int64 2000", live.Object["amount_received"])
	}
	if got := live.Detail(); got != "refetch: payment_intent pi_ok is succeeded" {
		t.Errorf("Detail() = %q", got)
	}
	h := stub.lastHeader()
	if got := h.Get("Authorization"); got != "Bearer "+testAPIKey {
		t.Errorf("Authorization header not sent as a bearer token")
	}
	if got := h.Get("Stripe-Version"); got != "" {
		t.Errorf("Stripe-Version = %q, want none when not configured", got)
	}
	if got := h.Get("Stripe-Account"); got != "" {
		t.Errorf("Stripe-Account = %q, want none for a platform event", got)
	}
}

func TestStripeVersionAndConnectAccountHeaders(t *testing.T) {
	stub := newStripeStub(t)
	stub.set("/v1/payment_intents/pi_acct", http.StatusOK, objectFixture(t, "payment_intent_succeeded.json", "pi_acct", ""))
	s := newStripe(t, stub, func(o *refetch.StripeOptions) { o.APIVersion = "2024-06-20" })

	ev := stripeEvent(t, "payment_intent.succeeded", "payment_intent", "pi_acct", "succeeded")
	ev.Body["account"] = "acct_1Connected"
	if _, err := s.Fetch(context.Background(), ev); err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	h := stub.lastHeader()
	if got := h.Get("Stripe-Version"); got != "2024-06-20" {
		t.Errorf("Stripe-Version = %q, want 2024-06-20", got)
	}
	if got := h.Get("Stripe-Account"); got != "acct_1Connected" {
		t.Errorf("Stripe-Account = %q, want acct_1Connected", got)
	}
}

func TestStripeObjectTable(t *testing.T) {
	cases := []struct{ objectType, id, path string }{
		{"payment_intent", "pi_1", "/v1/payment_intents/pi_1"},
		{"charge", "ch_1", "/v1/charges/ch_1"},
		{"refund", "re_1", "/v1/refunds/re_1"},
		{"checkout.session", "cs_test_1", "/v1/checkout/sessions/cs_test_1"},
		{"invoice", "in_1", "/v1/invoices/in_1"},
		{"subscription", "sub_1", "/v1/subscriptions/sub_1"},
		{"setup_intent", "seti_1", "/v1/setup_intents/seti_1"},
		{"dispute", "dp_1", "/v1/disputes/dp_1"},
	}
	stub := newStripeStub(t)
	s := newStripe(t, stub, nil)
	for _, c := range cases {
		stub.set(c.path, http.StatusOK, []byte(`{"id":"`+c.id+`","object":"`+c.objectType+`","status":"open"}`))
		live, err := s.Fetch(context.Background(), stripeEvent(t, c.objectType+".updated", c.objectType, c.id, ""))
		if err != nil {
			t.Errorf("%s: Fetch: %v", c.objectType, err)
			continue
		}
		if got := stub.lastPath(); got != c.path {
			t.Errorf("%s: GET %s, want %s", c.objectType, got, c.path)
		}
		if live.Status != "open" || live.ObjectID != c.id {
			t.Errorf("%s: live = %s %s", c.objectType, live.ObjectID, live.Status)
		}
	}
}

func TestStripeNotFoundIsARejection(t *testing.T) {
	stub := newStripeStub(t)
	s := newStripe(t, stub, nil)
	_, err := s.Fetch(context.Background(), stripeEvent(t, "payment_intent.succeeded", "payment_intent", "pi_123", "succeeded"))
	if !errors.Is(err, refetch.ErrNotFound) || !refetch.IsRejection(err) {
		t.Fatalf("err = %v, want ErrNotFound (a rejection)", err)
	}
	if errors.Is(err, refetch.ErrUnavailable) {
		t.Errorf("a 404 must not be retried as unavailable")
	}
	if got := err.Error(); got != "refetch: object pi_123 not found" {
		t.Errorf("error = %q, want %q", got, "refetch: object pi_123 not found")
	}
}

func TestStripeUnavailable(t *testing.T) {
	for _, status := range []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusTooManyRequests} {
		stub := newStripeStub(t)
		stub.set("/v1/payment_intents/pi_down", status, fixture(t, "error_500.json"))
		s := newStripe(t, stub, nil)
		_, err := s.Fetch(context.Background(), stripeEvent(t, "payment_intent.succeeded", "payment_intent", "pi_down", "succeeded"))
		if !errors.Is(err, refetch.ErrUnavailable) || refetch.IsRejection(err) {
			t.Errorf("status %d: err = %v, want ErrUnavailable and no rejection", status, err)
		}
	}
}

func TestStripeTimeout(t *testing.T) {
	stub := newStripeStub(t)
	stub.set("/v1/payment_intents/pi_slow", http.StatusOK, objectFixture(t, "payment_intent_succeeded.json", "pi_slow", ""))
	stub.holdRequests()
	s := newStripe(t, stub, func(o *refetch.StripeOptions) { o.Timeout = 100 * time.Millisecond })

	start := time.Now()
	_, err := s.Fetch(context.Background(), stripeEvent(t, "payment_intent.succeeded", "payment_intent", "pi_slow", "succeeded"))
	if !errors.Is(err, refetch.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), "no answer within 100ms") {
		t.Errorf("error = %q, want it to name the timeout", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Fetch took %s; the timeout is 100ms", took)
	}
}

func TestStripeTransportError(t *testing.T) {
	stub := newStripeStub(t)
	url := stub.URL()
	stub.srv.Close()
	s, err := refetch.NewStripe(refetch.StripeOptions{APIKey: testAPIKey, BaseURL: url, AllowInsecureHTTP: true, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Fetch(context.Background(), stripeEvent(t, "payment_intent.succeeded", "payment_intent", "pi_gone", "succeeded"))
	if !errors.Is(err, refetch.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}

func TestStripeRejectedKeyIsUnavailableAndNeverLeaks(t *testing.T) {
	stub := newStripeStub(t)
	var logs logBuffer
	const wrongKey = "sk_test_WRONGkeyThatMustNotLeak987654321"
	s, err := refetch.NewStripe(refetch.StripeOptions{APIKey: wrongKey, BaseURL: stub.URL(), AllowInsecureHTTP: true, Timeout: 2 * time.Second, Logger: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Fetch(context.Background(), stripeEvent(t, "payment_intent.succeeded", "payment_intent", "pi_key", "succeeded"))
	if !errors.Is(err, refetch.ErrUnauthorized) || !errors.Is(err, refetch.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnauthorized and ErrUnavailable", err)
	}
	if !strings.Contains(logs.String(), "apiKeySecretRef") {
		t.Errorf("no log line tells a person what to fix; logs:\n%s", logs.String())
	}
	for _, leak := range []string{wrongKey, "WRONGkey", "Invalid API Key"} {
		if strings.Contains(err.Error(), leak) || strings.Contains(logs.String(), leak) {
			t.Errorf("%q leaked: error %q, logs:\n%s", leak, err, logs.String())
		}
	}
}

func TestStripeEventsWithoutAFetchableObject(t *testing.T) {
	stub := newStripeStub(t)
	s := newStripe(t, stub, nil)
	cases := map[string]refetch.Event{
		"no data.object":      {ID: "evt_1", Type: "payment_intent.succeeded", Body: map[string]any{"id": "evt_1"}},
		"unknown object type": stripeEvent(t, "balance.available", "balance", "bal_1", ""),
		"id with a slash":     stripeEvent(t, "payment_intent.succeeded", "payment_intent", "pi_1/../../v1/customers", ""),
	}
	for name, ev := range cases {
		_, err := s.Fetch(context.Background(), ev)
		if !errors.Is(err, refetch.ErrUnsupported) || !refetch.IsRejection(err) {
			t.Errorf("%s: err = %v, want ErrUnsupported", name, err)
		}
	}
	if n := stub.requests.Load(); n != 0 {
		t.Errorf("%d requests reached the API, want 0", n)
	}
}

func TestNewStripeRefusesBadConfiguration(t *testing.T) {
	cases := map[string]refetch.StripeOptions{
		"empty key":          {APIKey: ""},
		"key with newline":   {APIKey: testAPIKey + "\n"},
		"credentials in URL": {APIKey: testAPIKey, BaseURL: "https://user:" + testAPIKey + "@api.stripe.com"},
		"ftp URL":            {APIKey: testAPIKey, BaseURL: "ftp://api.stripe.com"},
		"plain http":         {APIKey: testAPIKey, BaseURL: "http://api.stripe.com"},
		"plain HTTP":         {APIKey: testAPIKey, BaseURL: "HTTP://api.stripe.com"},
	}
	for name, opts := range cases {
		_, err := refetch.NewStripe(opts)
		if err == nil {
			t.Errorf("%s: NewStripe succeeded", name)
			continue
		}
		if strings.Contains(err.Error(), testAPIKey) {
			t.Errorf("%s: error leaks the key: %v", name, err)
		}
	}
}

func TestCacheSharesABurstOfOneObject(t *testing.T) {
	stub := newStripeStub(t)
	stub.set("/v1/payment_intents/pi_burst", http.StatusOK, objectFixture(t, "payment_intent_succeeded.json", "pi_burst", ""))
	stub.holdRequests()
	s := newStripe(t, stub, func(o *refetch.StripeOptions) { o.CacheTTL = time.Minute })

	const n = 10
	errs := make(chan error, n)
	ev := stripeEvent(t, "payment_intent.succeeded", "payment_intent", "pi_burst", "succeeded")
	go func() {
		_, err := s.Fetch(context.Background(), ev)
		errs <- err
	}()
	testsupport.Eventually(t, 10*time.Second, 5*time.Millisecond, "the first request to reach the API", func() bool { return stub.inFlight.Load() == 1 })
	for range n - 1 {
		go func() {
			_, err := s.Fetch(context.Background(), ev)
			errs <- err
		}()
	}
	stub.release()
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("Fetch: %v", err)
		}
	}
	if got := stub.requests.Load(); got != 1 {
		t.Errorf("%d requests for a burst of %d events on one object, want 1", got, n)
	}
}

func TestCacheRefetchesWhenTheEventDisagrees(t *testing.T) {
	stub := newStripeStub(t)
	path := "/v1/payment_intents/pi_moving"
	stub.set(path, http.StatusOK, objectFixture(t, "payment_intent_requires_payment_method.json", "pi_moving", ""))
	s := newStripe(t, stub, func(o *refetch.StripeOptions) { o.CacheTTL = time.Minute })

	failed := stripeEvent(t, "payment_intent.payment_failed", "payment_intent", "pi_moving", "requires_payment_method")
	if live, err := s.Fetch(context.Background(), failed); err != nil || live.Status != "requires_payment_method" {
		t.Fatalf("first fetch: %v %v", live.Status, err)
	}
	// The same claim is answered from the cache.
	if _, err := s.Fetch(context.Background(), failed); err != nil {
		t.Fatal(err)
	}
	if got := stub.requests.Load(); got != 1 {
		t.Fatalf("%d requests, want 1 (the second answered from the cache)", got)
	}
	// The payment is retried and succeeds; the succeeded event must not be judged by the
	// cached requires_payment_method.
	stub.set(path, http.StatusOK, objectFixture(t, "payment_intent_succeeded.json", "pi_moving", ""))
	succeeded := stripeEvent(t, "payment_intent.succeeded", "payment_intent", "pi_moving", "succeeded")
	live, err := s.Fetch(context.Background(), succeeded)
	if err != nil {
		t.Fatal(err)
	}
	if live.Status != "succeeded" {
		t.Errorf("live status %q, want succeeded (a fresh fetch)", live.Status)
	}
	if got := stub.requests.Load(); got != 2 {
		t.Errorf("%d requests, want 2", got)
	}
}

func TestFetchedObjectIsCELReady(t *testing.T) {
	// The answer is decoded like event bodies are, so both sides of a guard agree.
	want, err := expr.DecodeJSON(fixture(t, "payment_intent_succeeded.json"))
	if err != nil {
		t.Fatal(err)
	}
	stub := newStripeStub(t)
	id := want.(map[string]any)["id"].(string)
	stub.set("/v1/payment_intents/"+id, http.StatusOK, fixture(t, "payment_intent_succeeded.json"))
	s := newStripe(t, stub, nil)
	live, err := s.Fetch(context.Background(), stripeEvent(t, "payment_intent.succeeded", "payment_intent", id, "succeeded"))
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := live.Object["amount_details"].(map[string]any); !ok || got == nil {
		t.Errorf("nested objects are not maps: %#v", live.Object["amount_details"])
	}
	if live.Object["amount"] != want.(map[string]any)["amount"] {
		t.Errorf("amount %#v, want %#v", live.Object["amount"], want.(map[string]any)["amount"])
	}
}
