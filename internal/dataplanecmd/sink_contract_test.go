package dataplanecmd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/outbox"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// TestSinkContractSinkGetsWhatTheDocsPromise: every effect of real webhooks (with duplicates)
// arrives once, signed, with Idempotency-Key == webhook-id == body id, the envelope's
// fields as docs/concepts.md shows them, and an entity's effects in order.
func TestSinkContractSinkGetsWhatTheDocsPromise(t *testing.T) {
	sink := newContractSink(t)
	rr := deployContract(t, sink.srv.URL, "backoff: {initial: 50ms, max: 500ms}").startReceiver(t)

	const orders = 6
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	type sent struct{ id, typ, order string }
	var all []sent
	var wg sync.WaitGroup
	for i := range orders {
		order := fmt.Sprintf("ord-%d", i)
		capID, refID := contractEventID("cap"), contractEventID("ref")
		all = append(all, sent{capID, "payment_intent.succeeded", order}, sent{refID, "charge.refunded", order})
		wg.Go(func() {
			// Odd orders: the refund first (parked, then released), and duplicates.
			if i%2 == 1 {
				rr.send(t, refID, "charge.refunded", order, base.Add(2*time.Second))
			}
			rr.send(t, capID, "payment_intent.succeeded", order, base.Add(time.Second))
			rr.send(t, capID, "payment_intent.succeeded", order, base.Add(time.Second))
			rr.send(t, refID, "charge.refunded", order, base.Add(2*time.Second))
		})
	}
	wg.Wait()
	sink.awaitApplied(t, 2*orders, 20*time.Second, "every effect at the sink")
	sink.checkOnce(t)

	for _, s := range all {
		emit := map[string]string{"payment_intent.succeeded": "order.paid", "charge.refunded": "order.refunded"}[s.typ]
		key := receipt.DedupeKey(contractEndpointKey, s.id, emit)
		reqs := sink.requestsFor(key)
		if len(reqs) == 0 {
			t.Errorf("%s: no delivery with key %s", s.id, key)
			continue
		}
		d := reqs[0]
		h := d.header
		if h.Get("webhook-id") != key || d.env["id"] != key {
			t.Errorf("%s: webhook-id %q, body id %v, want both %q", s.id, h.Get("webhook-id"), d.env["id"], key)
		}
		if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("%s: Content-Type %q", s.id, ct)
		}
		want := map[string]any{"type": emit, "endpoint": contractEndpointKey, "entityKey": s.order, "sourceEventId": s.id}
		for k, v := range want {
			if d.env[k] != v {
				t.Errorf("%s: envelope %s = %v, want %v", s.id, k, d.env[k], v)
			}
		}
		for _, k := range []string{"occurredAt", "createdAt"} {
			v, _ := d.env[k].(string)
			if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
				t.Errorf("%s: envelope %s = %v, want an RFC 3339 time", s.id, k, d.env[k])
			}
		}
		data, _ := d.env["data"].(map[string]any)
		source, _ := data["source"].(map[string]any)
		if data["transition"] == nil || data["from"] == nil || data["to"] == nil || source["id"] != s.id ||
			source["type"] != s.typ || source["receivedAt"] == nil {
			t.Errorf("%s: data %v, want transition, from, to, source {id, type, receivedAt}", s.id, data)
		}
		ev, _ := data["event"].(map[string]any)
		if ev["id"] != s.id || ev["type"] != s.typ {
			t.Errorf("%s: data.event %v, want the provider's event", s.id, ev)
		}
		raw, _ := json.Marshal(d.env)
		if strings.Contains(string(raw), contractStripeSecret) || strings.Contains(string(raw), contractSinkKey) {
			t.Errorf("%s: a secret is in the delivered body", s.id)
		}
	}
	sink.mu.Lock()
	for i := range orders {
		order := fmt.Sprintf("ord-%d", i)
		if got := strings.Join(sink.applied[order], ","); got != "order.paid,order.refunded" {
			t.Errorf("%s: effects applied in order %q, want order.paid,order.refunded", order, got)
		}
	}
	sink.mu.Unlock()
}

// TestSinkContractRetriesKeepTheKeyAndHonourRetryAfter: a sink that answers 429 with
// Retry-After: 2, then 503, then 2xx sees the same key each time and no retry before
// the Retry-After it asked for.
func TestSinkContractRetriesKeepTheKeyAndHonourRetryAfter(t *testing.T) {
	sink := newContractSink(t)
	sink.hook = retryAfterHook(2, http.StatusServiceUnavailable)
	rr := deployContract(t, sink.srv.URL, "backoff: {initial: 50ms, max: 5s}").startReceiver(t)
	key := rr.sendPayment(t, "retry")
	sink.awaitApplied(t, 1, 20*time.Second, "delivered after two failures")
	reqs := sink.requestsFor(key)
	if len(reqs) != 3 {
		t.Fatalf("%d requests with the key, want 3", len(reqs))
	}
	if gap := reqs[1].at.Sub(reqs[0].at); gap < 2*time.Second-50*time.Millisecond {
		t.Errorf("second attempt %v after a 429 with Retry-After: 2, want at least 2s", gap)
	}
	for _, d := range reqs {
		if d.header.Get("webhook-id") != key || d.env["id"] != key {
			t.Errorf("a retry carried webhook-id %q / id %v, want %q", d.header.Get("webhook-id"), d.env["id"], key)
		}
	}
	sink.checkOnce(t)
}

// TestSinkContractTwoReceiversOneSinkEachEffectOnceInOrder: two receivers (two dispatchers)
// on one database, webhooks spread over both with copies, a sink that sometimes answers
// 503 and sometimes processes the request but loses its answer (connection closed).
// Every effect arrives, under one key, never two requests of one key at once, and each
// order's effects in order.
func TestSinkContractTwoReceiversOneSinkEachEffectOnceInOrder(t *testing.T) {
	sink := newContractSink(t)
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(7, 9))
	sink.hook = func(w http.ResponseWriter, d *contractDelivery, seen int) bool {
		mu.Lock()
		x := rng.IntN(10)
		mu.Unlock()
		time.Sleep(time.Duration(x) * time.Millisecond)
		switch {
		case seen == 0 && x == 0:
			w.WriteHeader(http.StatusServiceUnavailable)
			return false
		case seen == 0 && x == 1:
			// Processed, then the answer is lost.
			w.(*contractDeferred).then = func(w http.ResponseWriter) {
				hj, ok := w.(http.Hijacker)
				if !ok {
					w.WriteHeader(http.StatusBadGateway)
					return
				}
				c, _, err := hj.Hijack()
				if err == nil {
					_ = c.Close()
				}
			}
			return true
		}
		w.WriteHeader(http.StatusOK)
		return true
	}
	ep := deployContract(t, sink.srv.URL, "concurrency: 4, backoff: {initial: 50ms, max: 300ms}")
	a := ep.startReceiver(t)
	b := ep.startReceiver(t)
	const orders = 40
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	var wg sync.WaitGroup
	for i := range orders {
		order := fmt.Sprintf("ord-two-%d", i)
		capID, refID := contractEventID("cap2"), contractEventID("ref2")
		first, second := a, b
		if i%2 == 1 {
			first, second = b, a
		}
		wg.Go(func() {
			first.send(t, capID, "payment_intent.succeeded", order, base.Add(time.Second))
			second.send(t, capID, "payment_intent.succeeded", order, base.Add(time.Second))
			second.send(t, refID, "charge.refunded", order, base.Add(2*time.Second))
			first.send(t, refID, "charge.refunded", order, base.Add(2*time.Second))
		})
	}
	wg.Wait()
	sink.awaitApplied(t, 2*orders, 60*time.Second, "every effect at the sink")
	sink.checkOnce(t)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for i := range orders {
		order := fmt.Sprintf("ord-two-%d", i)
		if got := strings.Join(sink.applied[order], ","); got != "order.paid,order.refunded" {
			t.Errorf("%s: effects in order %q, want order.paid,order.refunded", order, got)
		}
	}
}

// TestSinkContractDispatcherStoppedAfterSinkProcessedRedeliversSameKey: the sink has stored
// the effect but its answer has not reached the dispatcher when the receiver shuts down
// (the closest to "crash between the sink's 2xx and the commit" in process). The next
// receiver delivers the row again with the same key.
func TestSinkContractDispatcherStoppedAfterSinkProcessedRedeliversSameKey(t *testing.T) {
	sink := newContractSink(t)
	hold := make(chan struct{})
	arrived := make(chan struct{}, 1)
	sink.hook = func(w http.ResponseWriter, d *contractDelivery, seen int) bool {
		if seen == 0 {
			arrived <- struct{}{}
			<-hold
		}
		w.WriteHeader(http.StatusOK)
		return true
	}
	ep := deployContract(t, sink.srv.URL, "timeout: 30s, backoff: {initial: 50ms, max: 300ms}")
	a := ep.startReceiver(t)
	key := a.sendPayment(t, "crash")
	select {
	case <-arrived:
	case <-time.After(20 * time.Second):
		t.Fatal("nothing reached the sink")
	}
	stopped := make(chan struct{})
	go func() { a.stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(45 * time.Second):
		t.Fatal("receiver did not stop")
	}
	close(hold)
	b := ep.startReceiver(t)
	_ = b
	conn := connect(t, ep.dbURL)
	awaitOutboxRows(t, conn, "delivered_at", 1, 60*time.Second, "delivered by the second receiver")
	if n := len(sink.requestsFor(key)); n < 2 {
		t.Errorf("%d requests with the key, want the re-delivery too", n)
	}
	if n := sink.appliedCount(); n != 1 {
		t.Errorf("%d distinct effects, want 1", n)
	}
	sink.checkOnce(t)
}

// TestSinkContractOneFailingRowHoldsBackOnlyItsEntity: docs/operations.md
// (HookkeeperOutboxLagging, 3.) says a row that keeps failing holds back the later rows
// of the same entity only, and is dead-lettered after maxAttempts so the entity's next
// rows flow. A sink with an application bug answers 500 for one order's effect only,
// and 2xx for everything else.
func TestSinkContractOneFailingRowHoldsBackOnlyItsEntity(t *testing.T) {
	sink := newContractSink(t)
	sink.hook = func(w http.ResponseWriter, d *contractDelivery, _ int) bool {
		if d.env["entityKey"] == "ord-poison" {
			http.Error(w, "NullPointerException", http.StatusInternalServerError)
			return false
		}
		w.WriteHeader(http.StatusOK)
		return true
	}
	ep := deployContract(t, sink.srv.URL, "maxAttempts: 8, backoff: {initial: 50ms, max: 200ms}")
	rr := ep.startReceiver(t)
	conn := connect(t, ep.dbURL)

	pkey := rr.sendPayment(t, "poison")
	// Let it fail a few times with nothing else in flight.
	testsupport.Eventually(t, 20*time.Second, 20*time.Millisecond, "six failed attempts of the poison row", func() bool {
		return len(sink.requestsFor(pkey)) >= 6
	})

	// Other orders, unrelated to the failing one.
	var others []string
	for i := range 3 {
		id := contractEventID("other")
		others = append(others, id)
		rr.send(t, id, "payment_intent.succeeded", fmt.Sprintf("ord-ok-%d", i), time.Now())
	}
	sink.awaitApplied(t, len(others), 30*time.Second, "the other orders' effects delivered while one row fails")
	// With traffic flowing the failing row spends its attempts and is dead-lettered, for
	// a person to see (HookkeeperDeadLetters) and re-drive or discard.
	var attempts int
	var deadAt *time.Time
	testsupport.Eventually(t, 30*time.Second, 50*time.Millisecond, "the failing row dead-lettered", func() bool {
		err := conn.QueryRow(context.Background(),
			`SELECT attempts, dead_at FROM hookkeeper.outbox WHERE dedupe_key = $1`, pkey).Scan(&attempts, &deadAt)
		return err == nil && deadAt != nil
	})
	if attempts != 8 {
		t.Errorf("the failing row was dead-lettered after %d counted attempts, want maxAttempts 8", attempts)
	}
}

// TestSinkContractSlow2xxAfterTheTimeoutIsRetriedWithTheSameKey: the sink commits the effect
// and answers 2xx only after the attempt timeout; the retry must carry the same key
// (so the sink applies it once) and nothing may be posted twice at once.
func TestSinkContractSlow2xxAfterTheTimeoutIsRetriedWithTheSameKey(t *testing.T) {
	sink := newContractSink(t)
	release := make(chan struct{})
	sink.hook = func(w http.ResponseWriter, d *contractDelivery, seen int) bool {
		if seen == 0 {
			// Commit the effect now, answer late.
			select {
			case <-release:
			case <-time.After(2500 * time.Millisecond):
			}
		}
		w.WriteHeader(http.StatusOK)
		return true
	}
	ep := deployContract(t, sink.srv.URL, "timeout: 1s, backoff: {initial: 50ms, max: 200ms}")
	rr := ep.startReceiver(t)
	key := rr.sendPayment(t, "slow")
	testsupport.Eventually(t, 20*time.Second, 50*time.Millisecond, "a second request", func() bool {
		return len(sink.requestsFor(key)) >= 2
	})
	close(release)
	conn := connect(t, ep.dbURL)
	awaitOutboxRows(t, conn, "delivered_at", 1, 20*time.Second, "delivered")
	if n := sink.appliedCount(); n != 1 {
		t.Errorf("%d effects at the sink, want 1", n)
	}
	// The first request's handler still runs after the dispatcher gave up on it: an
	// overlap at the sink is inherent here (the docs' unique constraint handles it).
	sink.mu.Lock()
	sink.overlaps = 0
	sink.mu.Unlock()
	sink.checkOnce(t)
	lastErr := outboxLastError(t, conn)
	if strings.Contains(lastErr, "127.0.0.1") || strings.Contains(lastErr, sink.srv.URL) {
		t.Errorf("last_error %q names the sink", lastErr)
	}
}

// TestSinkContractRedirectIsNotFollowedAndLeaksNothing: the sink answers 307 to another host.
// The docs: a redirect is a failed attempt, never followed; last_error, metrics and logs
// never carry the URL (it may hold credentials).
func TestSinkContractRedirectIsNotFollowedAndLeaksNothing(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer other.Close()
	sink := newContractSink(t)
	sink.hook = func(w http.ResponseWriter, d *contractDelivery, _ int) bool {
		w.Header().Set("Location", other.URL+"/steal")
		w.WriteHeader(http.StatusTemporaryRedirect)
		return false
	}
	const user, pass, token = "sinkuser", "s3cr3t-sink-pass", "tok-9f8e7d"
	sinkURL := strings.Replace(sink.srv.URL, "http://", "http://"+user+":"+pass+"@", 1) + "/hook?token=" + token
	dead := deadLetterPayment(t, sinkURL, "maxAttempts: 3, backoff: {initial: 50ms, max: 100ms}", "redir", "dead-lettered after 3 redirects")
	conn, rr := dead.conn, dead.rr
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect target got %d requests", n)
	}
	for _, d := range sink.snapshot() {
		if got := d.header.Get("Authorization"); got == "" {
			t.Logf("note: userinfo in the sink URL was not sent as basic auth")
		}
	}
	lastErr := outboxLastError(t, conn)
	host := strings.TrimPrefix(sink.srv.URL, "http://")
	for _, bad := range []string{pass, token, host, user} {
		if strings.Contains(lastErr, bad) {
			t.Errorf("last_error %q contains %q", lastErr, bad)
		}
	}
	metrics := scrapeMetrics(t, "http://"+rr.admin)
	logs := rr.logs.all()
	for _, bad := range []string{pass, token} {
		if strings.Contains(metrics, bad) {
			t.Errorf("/metrics contains %q", bad)
		}
		if strings.Contains(logs, bad) {
			t.Errorf("logs contain %q", bad)
		}
	}
}

// TestSinkContractEndlessResponseBodyDoesNotBlockDelivery: a sink that answers 200 then
// streams a body that never ends (or is enormous). The attempt must end (delivered or
// retried), never hang the worker or exhaust memory.
func TestSinkContractEndlessResponseBodyDoesNotBlockDelivery(t *testing.T) {
	sink := newContractSink(t)
	sink.hook = func(w http.ResponseWriter, d *contractDelivery, _ int) bool {
		rec := w.(*contractDeferred)
		rec.then = func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusOK)
			chunk := make([]byte, 32<<10)
			for range 1 << 12 { // up to 128 MiB
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		}
		return true
	}
	ep := deployContract(t, sink.srv.URL, "timeout: 2s, ordering: None, backoff: {initial: 50ms, max: 100ms}")
	rr := ep.startReceiver(t)
	for i := range 3 {
		rr.send(t, contractEventID("big"), "payment_intent.succeeded", fmt.Sprintf("ord-big-%d", i), time.Now())
	}
	conn := connect(t, ep.dbURL)
	awaitOutboxRows(t, conn, "delivered_at", 3, 30*time.Second, "all three delivered")
	sink.checkOnce(t)
}

// TestSinkContractDeadLetterThenRedriveDeliversOnceWithTheSameKey: a 4xx sink dead-letters
// after maxAttempts; once fixed, `hookkeeper replay --dead-letters` (RedriveDeadLetters)
// delivers it with the same Idempotency-Key; a second run re-sends nothing.
func TestSinkContractDeadLetterThenRedriveDeliversOnceWithTheSameKey(t *testing.T) {
	sink := newContractSink(t)
	var broken atomic.Bool
	broken.Store(true)
	sink.hook = func(w http.ResponseWriter, d *contractDelivery, _ int) bool {
		if broken.Load() {
			w.WriteHeader(http.StatusBadRequest)
			return false
		}
		w.WriteHeader(http.StatusOK)
		return true
	}
	dead := deadLetterPayment(t, sink.srv.URL, "maxAttempts: 3, backoff: {initial: 50ms, max: 100ms}", "dead", "dead-lettered")
	conn, key := dead.conn, dead.key
	if n := len(sink.requestsFor(key)); n != 3 {
		t.Errorf("%d attempts before the dead letter, want maxAttempts 3", n)
	}
	lastErr := outboxLastError(t, conn)
	if !strings.Contains(lastErr, "400") {
		t.Errorf("last_error %q, want the status", lastErr)
	}
	broken.Store(false)
	pool, err := pgxpool.New(context.Background(), dead.ep.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tables := store.TablesIn("hookkeeper")
	rep, err := outbox.RedriveDeadLetters(context.Background(), pool, tables, outbox.Selection{Endpoint: contractEndpointKey}, outbox.ReplayOptions{})
	if err != nil || rep.Replayed != 1 {
		t.Fatalf("redrive: %+v, %v", rep, err)
	}
	sink.awaitApplied(t, 1, 20*time.Second, "re-driven dead letter delivered")
	rep, err = outbox.RedriveDeadLetters(context.Background(), pool, tables, outbox.Selection{Endpoint: contractEndpointKey}, outbox.ReplayOptions{})
	if err != nil || rep.Replayed != 0 {
		t.Errorf("second redrive: %+v, %v, want nothing", rep, err)
	}
	n := len(sink.requestsFor(key))
	if n != 4 {
		t.Errorf("%d requests with the key, want 3 failures and 1 delivery", n)
	}
	sink.checkOnce(t)
}

// TestSinkContractGoneDeadLettersAtOnce: docs/concepts.md: dead-letters at once when the sink
// answers 410 Gone.
func TestSinkContractGoneDeadLettersAtOnce(t *testing.T) {
	sink := newContractSink(t)
	sink.hook = func(w http.ResponseWriter, d *contractDelivery, _ int) bool {
		w.WriteHeader(http.StatusGone)
		return false
	}
	key := deadLetterPayment(t, sink.srv.URL, "backoff: {initial: 50ms, max: 100ms}", "gone", "dead-lettered").key
	if n := len(sink.requestsFor(key)); n != 1 {
		t.Errorf("%d attempts, want 1 (410 dead-letters at once)", n)
	}
}

// TestSinkContractRetryAfterLongerThanBackoffMaxIsHonoured: docs/architecture.md step 13: a
// failure is retried after a full-jitter backoff, "at least the sink's Retry-After";
// docs/concepts.md: "honouring the sink's Retry-After".
func TestSinkContractRetryAfterLongerThanBackoffMaxIsHonoured(t *testing.T) {
	sink := newContractSink(t)
	sink.hook = retryAfterHook(4)
	rr := deployContract(t, sink.srv.URL, "backoff: {initial: 100ms, max: 1s}").startReceiver(t)
	key := rr.sendPayment(t, "ra")
	sink.awaitApplied(t, 1, 20*time.Second, "delivered")
	reqs := sink.requestsFor(key)
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
	tlsSink := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer tlsSink.Close()
	port := tlsSink.URL[strings.LastIndex(tlsSink.URL, ":")+1:]
	sinkURL := "https://localhost:" + port + "/hook"
	conn := deadLetterPayment(t, sinkURL, "maxAttempts: 2, backoff: {initial: 50ms, max: 100ms}", "tls", "dead-lettered").conn
	lastErr := outboxLastError(t, conn)
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
	sink := newContractSink(t)
	rr := deployContract(t, sink.srv.URL, "").startReceiver(t)
	id := contractEventID("raw")
	body := demo.StripeEvent(id, "payment_intent.succeeded", "ord-raw", 4200, time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if status, err := demo.PostStripe(ctx, rr.url, contractStripeSecret, body); err != nil || status != http.StatusOK {
		t.Fatalf("webhook: %d %v", status, err)
	}
	sink.awaitApplied(t, 1, 20*time.Second, "delivered")
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
