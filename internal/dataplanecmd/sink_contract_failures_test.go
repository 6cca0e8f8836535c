package dataplanecmd_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/internal/outbox"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// TestSinkContractOneFailingRowHoldsBackOnlyItsEntity: docs/operations.md
// (HookkeeperOutboxLagging, 3.) says a row that keeps failing holds back the later rows
// of the same entity only, and is dead-lettered after maxAttempts so the entity's next
// rows flow. A sink with an application bug answers 500 for one order's effect only,
// and 2xx for everything else.
func TestSinkContractOneFailingRowHoldsBackOnlyItsEntity(t *testing.T) {
	dbURL := testsupport.MigratedDatabase(t, "hookkeeper")
	sink := newContractSink(t)
	sink.hook = func(w http.ResponseWriter, d *contractDelivery, _ int) bool {
		if d.env["entityKey"] == "ord-poison" {
			http.Error(w, "NullPointerException", http.StatusInternalServerError)
			return false
		}
		w.WriteHeader(http.StatusOK)
		return true
	}
	rr := startContractReceiver(t, dbURL,
		contractManifest(sink.srv.URL, "maxAttempts: 8, backoff: {initial: 50ms, max: 200ms}"), true)
	conn := contractConn(t, dbURL)

	poison := contractEventID("poison")
	rr.send(t, poison, "payment_intent.succeeded", "ord-poison", time.Now())
	pkey := receipt.DedupeKey(contractEndpointKey, poison, "order.paid")
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
	testsupport.Eventually(t, 30*time.Second, 50*time.Millisecond, "the other orders' effects delivered while one row fails",
		func() bool { return sink.appliedCount() == len(others) })
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
	dbURL := testsupport.MigratedDatabase(t, "hookkeeper")
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
	rr := startContractReceiver(t, dbURL,
		contractManifest(sink.srv.URL, "timeout: 1s, backoff: {initial: 50ms, max: 200ms}"), true)
	id := contractEventID("slow")
	rr.send(t, id, "payment_intent.succeeded", "ord-slow", time.Now())
	key := receipt.DedupeKey(contractEndpointKey, id, "order.paid")
	testsupport.Eventually(t, 20*time.Second, 50*time.Millisecond, "a second request", func() bool {
		return len(sink.requestsFor(key)) >= 2
	})
	close(release)
	conn := contractConn(t, dbURL)
	testsupport.Eventually(t, 20*time.Second, 50*time.Millisecond, "delivered", func() bool {
		return contractCount(t, conn, `SELECT count(*) FROM hookkeeper.outbox WHERE delivered_at IS NOT NULL`) == 1
	})
	if n := sink.appliedCount(); n != 1 {
		t.Errorf("%d effects at the sink, want 1", n)
	}
	// The first request's handler still runs after the dispatcher gave up on it: an
	// overlap at the sink is inherent here (the docs' unique constraint handles it).
	sink.mu.Lock()
	sink.overlaps = 0
	sink.mu.Unlock()
	sink.checkOnce(t)
	var lastErr string
	_ = conn.QueryRow(context.Background(), `SELECT COALESCE(last_error,'') FROM hookkeeper.outbox`).Scan(&lastErr)
	if strings.Contains(lastErr, "127.0.0.1") || strings.Contains(lastErr, sink.srv.URL) {
		t.Errorf("last_error %q names the sink", lastErr)
	}
}

// TestSinkContractRedirectIsNotFollowedAndLeaksNothing: the sink answers 307 to another host.
// The docs: a redirect is a failed attempt, never followed; last_error, metrics and logs
// never carry the URL (it may hold credentials).
func TestSinkContractRedirectIsNotFollowedAndLeaksNothing(t *testing.T) {
	dbURL := testsupport.MigratedDatabase(t, "hookkeeper")
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
	rr := startContractReceiver(t, dbURL,
		contractManifest(sinkURL, "maxAttempts: 3, backoff: {initial: 50ms, max: 100ms}"), true)
	id := contractEventID("redir")
	rr.send(t, id, "payment_intent.succeeded", "ord-redir", time.Now())
	conn := contractConn(t, dbURL)
	testsupport.Eventually(t, 20*time.Second, 50*time.Millisecond, "dead-lettered after 3 redirects", func() bool {
		return contractCount(t, conn, `SELECT count(*) FROM hookkeeper.outbox WHERE dead_at IS NOT NULL`) == 1
	})
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect target got %d requests", n)
	}
	for _, d := range sink.snapshot() {
		if got := d.header.Get("Authorization"); got == "" {
			t.Logf("note: userinfo in the sink URL was not sent as basic auth")
		}
	}
	var lastErr string
	_ = conn.QueryRow(context.Background(), `SELECT COALESCE(last_error,'') FROM hookkeeper.outbox`).Scan(&lastErr)
	host := strings.TrimPrefix(sink.srv.URL, "http://")
	for _, bad := range []string{pass, token, host, user} {
		if strings.Contains(lastErr, bad) {
			t.Errorf("last_error %q contains %q", lastErr, bad)
		}
	}
	metrics := contractScrape(t, rr.admin)
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

func contractScrape(t *testing.T, admin string) string {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestSinkContractEndlessResponseBodyDoesNotBlockDelivery: a sink that answers 200 then
// streams a body that never ends (or is enormous). The attempt must end (delivered or
// retried), never hang the worker or exhaust memory.
func TestSinkContractEndlessResponseBodyDoesNotBlockDelivery(t *testing.T) {
	dbURL := testsupport.MigratedDatabase(t, "hookkeeper")
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
	rr := startContractReceiver(t, dbURL,
		contractManifest(sink.srv.URL, "timeout: 2s, ordering: None, backoff: {initial: 50ms, max: 100ms}"), true)
	for i := range 3 {
		rr.send(t, contractEventID("big"), "payment_intent.succeeded", fmt.Sprintf("ord-big-%d", i), time.Now())
	}
	conn := contractConn(t, dbURL)
	testsupport.Eventually(t, 30*time.Second, 50*time.Millisecond, "all three delivered", func() bool {
		return contractCount(t, conn, `SELECT count(*) FROM hookkeeper.outbox WHERE delivered_at IS NOT NULL`) == 3
	})
	sink.checkOnce(t)
}

// TestSinkContractDeadLetterThenRedriveDeliversOnceWithTheSameKey: a 4xx sink dead-letters
// after maxAttempts; once fixed, `hookkeeper replay --dead-letters` (RedriveDeadLetters)
// delivers it with the same Idempotency-Key; a second run re-sends nothing.
func TestSinkContractDeadLetterThenRedriveDeliversOnceWithTheSameKey(t *testing.T) {
	dbURL := testsupport.MigratedDatabase(t, "hookkeeper")
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
	rr := startContractReceiver(t, dbURL,
		contractManifest(sink.srv.URL, "maxAttempts: 3, backoff: {initial: 50ms, max: 100ms}"), true)
	id := contractEventID("dead")
	rr.send(t, id, "payment_intent.succeeded", "ord-dead", time.Now())
	key := receipt.DedupeKey(contractEndpointKey, id, "order.paid")
	conn := contractConn(t, dbURL)
	testsupport.Eventually(t, 20*time.Second, 50*time.Millisecond, "dead-lettered", func() bool {
		return contractCount(t, conn, `SELECT count(*) FROM hookkeeper.outbox WHERE dead_at IS NOT NULL`) == 1
	})
	if n := len(sink.requestsFor(key)); n != 3 {
		t.Errorf("%d attempts before the dead letter, want maxAttempts 3", n)
	}
	var lastErr string
	_ = conn.QueryRow(context.Background(), `SELECT last_error FROM hookkeeper.outbox`).Scan(&lastErr)
	if !strings.Contains(lastErr, "400") {
		t.Errorf("last_error %q, want the status", lastErr)
	}
	broken.Store(false)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tables := store.TablesIn("hookkeeper")
	rep, err := outbox.RedriveDeadLetters(context.Background(), pool, tables, outbox.Selection{Endpoint: contractEndpointKey}, outbox.ReplayOptions{})
	if err != nil || rep.Replayed != 1 {
		t.Fatalf("redrive: %+v, %v", rep, err)
	}
	testsupport.Eventually(t, 20*time.Second, 50*time.Millisecond, "re-driven dead letter delivered", func() bool {
		return sink.appliedCount() == 1
	})
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
