package demo

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
)

func TestSinkListsAndLogsDeliveries(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{})
	s := newSink(log)

	post := func(key, body string, signed bool) {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, "/events", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		if signed {
			// The server sees the dispatcher's lower-case names canonicalised.
			req.Header.Set("webhook-id", key)
			req.Header.Set("webhook-signature", "v1,abc")
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("POST %s: status %d", key, rec.Code)
		}
	}
	get := func() []DeliverySummary {
		t.Helper()
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/events", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET: status %d: %s", rec.Code, rec.Body)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("GET content type %q", ct)
		}
		var out []DeliverySummary
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("GET body: %v: %s", err, rec.Body)
		}
		return out
	}

	if got := get(); got == nil || len(got) != 0 {
		t.Fatalf("empty sink lists %#v, want []", got)
	}

	post("k1", `{"id":"k1","type":"order.paid","data":{}}`, true)
	post("k2", `not json`, false)
	got := get()
	if len(got) != 2 {
		t.Fatalf("listed %d deliveries, want 2: %#v", len(got), got)
	}
	first, second := got[0], got[1]
	if first.IdempotencyKey != "k1" || first.EventType != "order.paid" || !first.Signed || first.WebhookID != "k1" ||
		first.BodyBytes != len(`{"id":"k1","type":"order.paid","data":{}}`) || first.At.IsZero() {
		t.Errorf("first delivery listed as %#v", first)
	}
	if second.IdempotencyKey != "k2" || second.EventType != "" || second.Signed || second.BodyBytes != len("not json") {
		t.Errorf("second delivery listed as %#v", second)
	}
	if second.At.Before(first.At) {
		t.Errorf("not oldest first: %v then %v", first.At, second.At)
	}

	mu.Lock()
	if len(lines) != 2 || !strings.Contains(lines[0], `"idempotencyKey"="k1"`) || !strings.Contains(lines[0], `"eventType"="order.paid"`) {
		t.Errorf("log lines: %q", lines)
	}
	mu.Unlock()

	// Only the newest SinkListLimit are listed; Deliveries keeps everything.
	for i := range SinkListLimit {
		post(fmt.Sprintf("n%d", i), `{}`, false)
	}
	got = get()
	if len(got) != SinkListLimit || got[0].IdempotencyKey != "n0" || got[len(got)-1].IdempotencyKey != fmt.Sprintf("n%d", SinkListLimit-1) {
		t.Errorf("capped list: %d entries, %s .. %s", len(got), got[0].IdempotencyKey, got[len(got)-1].IdempotencyKey)
	}
	if n := len(s.Deliveries()); n != SinkListLimit+2 {
		t.Errorf("Deliveries() has %d, want %d", n, SinkListLimit+2)
	}

	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/events", nil))
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") == "" {
		t.Errorf("PUT: status %d, Allow %q", rec.Code, rec.Header().Get("Allow"))
	}
}
