package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Delivery is one request the Sink received.
type Delivery struct {
	IdempotencyKey string
	// WebhookID is the Standard Webhooks webhook-id header (set when deliveries are
	// signed).
	WebhookID string
	Signed    bool
	Body      []byte
	At        time.Time
}

// Sink stands in for the app service that receives hookkeeper's deliveries: it answers
// 200 to every POST and remembers what it got.
type Sink struct {
	srv      *http.Server
	listener net.Listener

	mu         sync.Mutex
	deliveries []Delivery
}

// StartSink listens on 127.0.0.1:<free port>.
func StartSink(ctx context.Context) (*Sink, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for sink: %w", err)
	}
	s := &Sink{listener: l}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.handle), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

func (s *Sink) handle(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.deliveries = append(s.deliveries, Delivery{
		IdempotencyKey: r.Header.Get("Idempotency-Key"),
		WebhookID:      r.Header.Get("Webhook-Id"),
		Signed:         r.Header.Get("Webhook-Signature") != "",
		Body:           body,
		At:             time.Now(),
	})
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// URL is the sink's base URL (http://127.0.0.1:port).
func (s *Sink) URL() string { return "http://" + s.listener.Addr().String() }

// Deliveries returns a copy of everything received so far.
func (s *Sink) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Delivery, len(s.deliveries))
	copy(out, s.deliveries)
	return out
}

// Stop closes the sink.
func (s *Sink) Stop(ctx context.Context) error {
	if err := s.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("stop sink: %w", err)
	}
	return nil
}
