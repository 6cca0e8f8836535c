package dataplanecmd_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// TestSinkContractTwoReceiversOneSinkEachEffectOnceInOrder: two receivers (two dispatchers)
// on one database, webhooks spread over both with copies, a sink that sometimes answers
// 503 and sometimes processes the request but loses its answer (connection closed).
// Every effect arrives, under one key, never two requests of one key at once, and each
// order's effects in order.
func TestSinkContractTwoReceiversOneSinkEachEffectOnceInOrder(t *testing.T) {
	dbURL := testsupport.MigratedDatabase(t, "hookkeeper")
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
	manifest := contractManifest(sink.srv.URL, "concurrency: 4, backoff: {initial: 50ms, max: 300ms}")
	a := startContractReceiver(t, dbURL, manifest, true)
	b := startContractReceiver(t, dbURL, manifest, true)
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
	testsupport.Eventually(t, 60*time.Second, 100*time.Millisecond, "every effect at the sink", func() bool {
		return sink.appliedCount() == 2*orders
	})
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
	dbURL := testsupport.MigratedDatabase(t, "hookkeeper")
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
	manifest := contractManifest(sink.srv.URL, "timeout: 30s, backoff: {initial: 50ms, max: 300ms}")
	a := startContractReceiver(t, dbURL, manifest, true)
	id := contractEventID("crash")
	a.send(t, id, "payment_intent.succeeded", "ord-crash", time.Now())
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
	b := startContractReceiver(t, dbURL, manifest, true)
	_ = b
	key := receipt.DedupeKey(contractEndpointKey, id, "order.paid")
	conn := contractConn(t, dbURL)
	testsupport.Eventually(t, 60*time.Second, 100*time.Millisecond, "delivered by the second receiver", func() bool {
		return contractCount(t, conn, `SELECT count(*) FROM hookkeeper.outbox WHERE delivered_at IS NOT NULL`) == 1
	})
	if n := len(sink.requestsFor(key)); n < 2 {
		t.Errorf("%d requests with the key, want the re-delivery too", n)
	}
	if n := sink.appliedCount(); n != 1 {
		t.Errorf("%d distinct effects, want 1", n)
	}
	sink.checkOnce(t)
}
