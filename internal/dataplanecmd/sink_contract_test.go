package dataplanecmd_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// TestSinkContractSinkGetsWhatTheDocsPromise: every effect of real webhooks (with duplicates)
// arrives once, signed, with Idempotency-Key == webhook-id == body id, the envelope's
// fields as docs/concepts.md shows them, and an entity's effects in order.
func TestSinkContractSinkGetsWhatTheDocsPromise(t *testing.T) {
	dbURL := testsupport.MigratedDatabase(t, "hookkeeper")
	sink := newContractSink(t)
	rr := startContractReceiver(t, dbURL, contractManifest(sink.srv.URL, "backoff: {initial: 50ms, max: 500ms}"), true)

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
	testsupport.Eventually(t, 20*time.Second, 50*time.Millisecond, "every effect at the sink", func() bool {
		return sink.appliedCount() == 2*orders
	})
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
	dbURL := testsupport.MigratedDatabase(t, "hookkeeper")
	sink := newContractSink(t)
	sink.hook = func(w http.ResponseWriter, d *contractDelivery, seen int) bool {
		switch seen {
		case 0:
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			return false
		case 1:
			w.WriteHeader(http.StatusServiceUnavailable)
			return false
		}
		w.WriteHeader(http.StatusOK)
		return true
	}
	rr := startContractReceiver(t, dbURL, contractManifest(sink.srv.URL, "backoff: {initial: 50ms, max: 5s}"), true)
	id := contractEventID("retry")
	rr.send(t, id, "payment_intent.succeeded", "ord-r", time.Now())
	key := receipt.DedupeKey(contractEndpointKey, id, "order.paid")
	testsupport.Eventually(t, 20*time.Second, 50*time.Millisecond, "delivered after two failures", func() bool {
		return sink.appliedCount() == 1
	})
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
