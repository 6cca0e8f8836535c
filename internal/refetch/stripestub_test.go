package refetch_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// testAPIKey is what the stub accepts; tests check it never leaks.
const testAPIKey = "sk_test_51HkKeeperRefetchSecretKeyValue0123456789"

// stubAnswer is one canned answer of the stub.
type stubAnswer struct {
	status int
	body   []byte
}

// stripeStub speaks Stripe's object API on a local httptest server: GET
// /v1/<collection>/<id> with `Authorization: Bearer <key>`, answers set per path by the
// test, 401 for a wrong key, 404 (Stripe's resource_missing body) for an unknown path.
// It counts requests so tests can prove which transitions called it.
type stripeStub struct {
	t   *testing.T
	srv *httptest.Server

	requests atomic.Int64
	inFlight atomic.Int64

	mu      sync.Mutex
	answers map[string]stubAnswer
	headers []http.Header
	paths   []string
	// hold, when set, keeps every request waiting until it is closed or the client
	// gives up: a provider that does not answer.
	hold chan struct{}
}

func newStripeStub(t *testing.T) *stripeStub {
	t.Helper()
	s := &stripeStub{t: t, answers: map[string]stubAnswer{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		s.release()
		s.srv.Close()
	})
	return s
}

func (s *stripeStub) URL() string { return s.srv.URL }

func (s *stripeStub) serve(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	s.mu.Lock()
	s.headers = append(s.headers, r.Header.Clone())
	s.paths = append(s.paths, r.URL.Path)
	hold := s.hold
	answer, known := s.answers[r.URL.Path]
	s.mu.Unlock()

	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Request-Id", "req_stub")
	w.Header().Set("Content-Type", "application/json")
	if r.Method != http.MethodGet {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+testAPIKey {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write(fixture(s.t, "error_401.json"))
		return
	}
	if !known {
		answer = stubAnswer{status: http.StatusNotFound, body: fixture(s.t, "error_404.json")}
	}
	w.WriteHeader(answer.status)
	_, _ = w.Write(answer.body)
}

// set makes path answer status with body.
func (s *stripeStub) set(path string, status int, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers[path] = stubAnswer{status: status, body: body}
}

// holdRequests makes requests wait until release.
func (s *stripeStub) holdRequests() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hold == nil {
		s.hold = make(chan struct{})
	}
}

func (s *stripeStub) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hold != nil {
		close(s.hold)
		s.hold = nil
	}
}

func (s *stripeStub) lastHeader() http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.headers) == 0 {
		return nil
	}
	return s.headers[len(s.headers)-1]
}

func (s *stripeStub) lastPath() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.paths) == 0 {
		return ""
	}
	return s.paths[len(s.paths)-1]
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("read fixture: %v", err)
	}
	return b
}

// objectFixture is a fixture object with its id (and metadata.client_txn_id, when
// txnID is set) replaced, so each test works on objects of its own.
func objectFixture(t *testing.T, name, id, txnID string) []byte {
	t.Helper()
	var obj map[string]any
	if err := json.Unmarshal(fixture(t, name), &obj); err != nil {
		t.Fatalf("parse fixture %s: %v", name, err)
	}
	obj["id"] = id
	if txnID != "" {
		obj["metadata"] = map[string]any{"client_txn_id": txnID}
	}
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatalf("encode fixture %s: %v", name, err)
	}
	return b
}
