package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// SinkListLimit is how many of the newest deliveries a GET on the sink lists.
const SinkListLimit = 1000

// Delivery is one request the Sink received.
type Delivery struct {
	IdempotencyKey string
	// WebhookID is the Standard Webhooks webhook-id header (set when deliveries are
	// signed).
	WebhookID string
	Signed    bool
	// EventType is the envelope's "type" when the body is a JSON object that has one.
	EventType string
	Body      []byte
	At        time.Time
}

// DeliverySummary is how a GET on the sink lists one delivery.
type DeliverySummary struct {
	At             time.Time `json:"at"`
	IdempotencyKey string    `json:"idempotencyKey"`
	WebhookID      string    `json:"webhookId,omitempty"`
	Signed         bool      `json:"signed"`
	EventType      string    `json:"eventType,omitempty"`
	BodyBytes      int       `json:"bodyBytes"`
}

// Sink stands in for the app service that receives hookkeeper's deliveries: it answers
// 200 to every POST, remembers what it got and logs one line for each; a GET on any path
// lists the newest SinkListLimit deliveries as a JSON array, oldest first.
type Sink struct {
	srv      *http.Server
	listener net.Listener
	log      logr.Logger

	mu         sync.Mutex
	deliveries []Delivery
}

// StartSink listens on 127.0.0.1:<free port>; log receives one line per delivery.
func StartSink(ctx context.Context, log logr.Logger) (*Sink, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for sink: %w", err)
	}
	s := newSink(log)
	s.listener = l
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

func newSink(log logr.Logger) *Sink {
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	return &Sink{log: log}
}

// ServeHTTP records a POST and lists deliveries on GET.
func (s *Sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		s.receive(w, r)
	case http.MethodGet, http.MethodHead:
		s.list(w)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		http.Error(w, "POST a delivery or GET the list of deliveries", http.StatusMethodNotAllowed)
	}
}

func (s *Sink) receive(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	d := Delivery{
		IdempotencyKey: r.Header.Get("Idempotency-Key"),
		WebhookID:      r.Header.Get("Webhook-Id"),
		Signed:         r.Header.Get("Webhook-Signature") != "",
		EventType:      eventType(body),
		Body:           body,
		At:             time.Now(),
	}
	s.mu.Lock()
	s.deliveries = append(s.deliveries, d)
	s.mu.Unlock()
	s.log.Info("delivery received", "path", r.URL.Path, "idempotencyKey", d.IdempotencyKey,
		"eventType", d.EventType, "signed", d.Signed, "bytes", len(body))
	w.WriteHeader(http.StatusOK)
}

// eventType reads the "type" of a delivery envelope; empty when the body is not a JSON
// object with a string type.
func eventType(body []byte) string {
	var env struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(body, &env) != nil {
		return ""
	}
	return env.Type
}

func (s *Sink) list(w http.ResponseWriter) {
	all := s.Deliveries()
	if len(all) > SinkListLimit {
		all = all[len(all)-SinkListLimit:]
	}
	out := make([]DeliverySummary, 0, len(all))
	for _, d := range all {
		out = append(out, DeliverySummary{
			At:             d.At.UTC(),
			IdempotencyKey: d.IdempotencyKey,
			WebhookID:      d.WebhookID,
			Signed:         d.Signed,
			EventType:      d.EventType,
			BodyBytes:      len(d.Body),
		})
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out)
}

// URL is the sink's base URL (http://127.0.0.1:port).
func (s *Sink) URL() string { return "http://" + s.listener.Addr().String() }

// Deliveries returns a copy of everything received so far, oldest first.
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
