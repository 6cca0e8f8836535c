package receiver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookkeeper/hookkeeper/internal/event"
	"github.com/hookkeeper/hookkeeper/internal/metrics"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/refetch"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// RetryAfterSeconds is the Retry-After of a 503: long enough for a failover or a pool
// reconnect, short enough that providers which honour it deliver again soon.
const RetryAfterSeconds = 5

// DefaultTransactionTimeout bounds the database work of one request, so a stalled
// database turns into 503s instead of requests piling up until the provider gives up.
const DefaultTransactionTimeout = 10 * time.Second

// Outcome label values beyond the recorded outcomes of receipt.
const (
	outcomeDuplicate = "duplicate"
	outcomeRejected  = "rejected"
	outcomeError     = "error"
	outcomeHandshake = "handshake"
)

// Extractor reads the events of a verified body; *config.Extractor is one.
type Extractor interface {
	Extract(body []byte, header http.Header) ([]event.Event, error)
}

// Recorder commits events with their effects in one transaction; *receipt.Recorder is one.
type Recorder interface {
	RecordBatch(ctx context.Context, events []receipt.Event) ([]receipt.Result, error)
}

// Ack is the 2xx a provider expects.
type Ack struct {
	ContentType string
	// Body is sent as is when set; otherwise a small JSON says whether the delivery was
	// a duplicate.
	Body []byte
}

// HandlerOptions configure the webhook handler.
type HandlerOptions struct {
	// Endpoint is the endpoint key ("namespace/name"), the metrics' endpoint label.
	Endpoint string
	// Path is the only path that accepts deliveries (spec.receiver.path).
	Path string
	// MaxBodyBytes caps the body; larger requests get 413 before anything is read
	// past the cap.
	MaxBodyBytes int64
	Verifier     signature.Verifier
	Extractor    Extractor
	Recorder     Recorder
	Ack          Ack
	// Handshake answers a verified endpoint-verification request (ok true) instead of
	// treating it as a delivery; config.Handshake is one. Nil means none.
	Handshake func(body []byte) (contentType string, response []byte, ok bool)
	// TransactionTimeout bounds the database work; DefaultTransactionTimeout when zero.
	TransactionTimeout time.Duration
	// Clock is the request time given to the verifier; time.Now when nil.
	Clock  func() time.Time
	Logger logr.Logger
}

// handler serves webhook deliveries: cap -> read -> verify -> extract -> record -> ack.
type handler struct {
	opts HandlerOptions
	// Metric children resolved once: the endpoint label never changes.
	duration prometheus.Observer
}

// NewHandler returns the webhook handler.
func NewHandler(opts HandlerOptions) (http.Handler, error) {
	if opts.Verifier == nil || opts.Extractor == nil || opts.Recorder == nil {
		return nil, errors.New("webhook handler: verifier, extractor and recorder are required")
	}
	if opts.Path == "" {
		opts.Path = "/"
	}
	if opts.MaxBodyBytes <= 0 {
		return nil, errors.New("webhook handler: max body bytes must be positive")
	}
	if opts.TransactionTimeout <= 0 {
		opts.TransactionTimeout = DefaultTransactionTimeout
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	return &handler{opts: opts, duration: metrics.RequestDuration.WithLabelValues(opts.Endpoint)}, nil
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if r.URL.Path != h.opts.Path {
		h.reject(w, http.StatusNotFound, "not found")
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.reject(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	defer func() { h.duration.Observe(time.Since(start).Seconds()) }()
	log := h.opts.Logger

	// 1. Cap, then read the raw bytes the signature covers.
	if r.ContentLength > h.opts.MaxBodyBytes {
		log.Info("webhook rejected: body too large", "contentLength", r.ContentLength, "limit", h.opts.MaxBodyBytes)
		h.reject(w, http.StatusRequestEntityTooLarge, "request body too large")
		return
	}
	body, err := readBody(w, r, h.opts.MaxBodyBytes)
	if err != nil {
		if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
			log.Info("webhook rejected: body too large", "limit", h.opts.MaxBodyBytes)
			h.reject(w, http.StatusRequestEntityTooLarge, "request body too large")
			return
		}
		log.Info("webhook rejected: body unreadable", "error", err.Error())
		h.reject(w, http.StatusBadRequest, "request body unreadable")
		return
	}

	// 2. Verify before trusting anything in the body. The error's detail names what
	// was wrong, never a header value or a digest.
	if err := h.opts.Verifier.Verify(signature.Request{Header: r.Header, Body: body, Now: h.opts.Clock()}); err != nil {
		reason := string(signature.ReasonOf(err))
		if reason == "" {
			reason = "error"
		}
		metrics.SignatureFailures.WithLabelValues(h.opts.Endpoint, reason).Inc()
		log.Info("webhook rejected: signature", "reason", reason, "error", err.Error(), "remote", r.RemoteAddr)
		h.reject(w, http.StatusUnauthorized, "signature verification failed")
		return
	}

	// A verified endpoint-verification request (Slack's url_verification) is answered,
	// not recorded: it carries no event.
	if h.opts.Handshake != nil {
		if contentType, response, ok := h.opts.Handshake(body); ok {
			log.Info("answered the provider's endpoint verification")
			h.respond(w, http.StatusOK, outcomeHandshake, contentType, response)
			return
		}
	}

	// 3. Extract id, type, entity, amount and time.
	events, err := h.opts.Extractor.Extract(body, r.Header)
	if err == nil && len(events) == 0 {
		err = errors.New("the payload holds no event")
	}
	if err != nil {
		log.Info("webhook rejected: payload", "error", err.Error())
		h.reject(w, http.StatusBadRequest, "payload not understood")
		return
	}

	// 4. One transaction for the whole delivery: all of it commits, or nothing does
	// and the provider delivers again.
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.TransactionTimeout)
	results, err := h.opts.Recorder.RecordBatch(ctx, events)
	cancel()
	if err != nil {
		h.unavailable(w, start, events, err, r.Context().Err() != nil)
		return
	}

	// 5. Acknowledge.
	h.ack(w, start, events, results)
}

// readBody reads at most limit bytes; a longer body fails with *http.MaxBytesError.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength))
	}
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// unavailable answers 503 with Retry-After: nothing was committed, and the provider's
// retry is what completes the delivery.
func (h *handler) unavailable(w http.ResponseWriter, start time.Time, events []event.Event, err error, clientGone bool) {
	outcome := outcomeError
	log := h.opts.Logger.WithValues("eventID", events[0].ID, "type", events[0].Type, "events", len(events),
		"latency", time.Since(start))
	switch {
	case errors.Is(err, receipt.ErrRetryLater):
		// Policy, not failure: onUnmatched Retry waits for the entity to exist.
		outcome = string(receipt.OutcomeUnmatched)
		log.Info("webhook deferred: retry later", "reason", err.Error())
	case clientGone:
		// The provider hung up mid-transaction: it rolled back, and the provider's
		// retry records the event. Not a database failure.
		log.Info("webhook not recorded: client went away")
	case errors.Is(err, refetch.ErrUnavailable):
		// The provider's read API failed (or rejected the key): nothing was stored.
		log.Error(err, "webhook not recorded: provider re-fetch")
	default:
		log.Error(err, "webhook not recorded: database")
	}
	w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
	h.respond(w, http.StatusServiceUnavailable, outcome, "text/plain; charset=utf-8", []byte("temporarily unavailable, retry later\n"))
}

// ack answers a committed delivery. Its log lines are debug level: at a provider's
// volume one line per event costs the receiver more than a tenth of its CPU, and the
// receipts table and the metrics already say what happened to every event.
func (h *handler) ack(w http.ResponseWriter, start time.Time, events []event.Event, results []receipt.Result) {
	latency := time.Since(start)
	duplicate := len(results) > 0
	outcome := ""
	for i, res := range results {
		ev := events[min(i, len(events)-1)]
		if res.Duplicate {
			metrics.Duplicates.WithLabelValues(h.opts.Endpoint).Inc()
			h.opts.Logger.V(1).Info("webhook duplicate", "eventID", ev.ID, "type", ev.Type, "latency", latency)
			continue
		}
		duplicate = false
		metrics.Transitions.WithLabelValues(h.opts.Endpoint, string(res.Outcome)).Inc()
		h.opts.Logger.V(1).Info("webhook recorded", "eventID", ev.ID, "type", ev.Type, "entity", ev.EntityKey,
			"outcome", res.Outcome, "detail", res.Detail, "latency", latency)
		if outcome == "" || res.Outcome == receipt.OutcomeApplied {
			outcome = string(res.Outcome)
		}
	}
	if duplicate {
		outcome = outcomeDuplicate
	}
	body := h.opts.Ack.Body
	if body == nil {
		body, _ = json.Marshal(ackJSON{Received: true, Duplicate: duplicate})
	}
	contentType := h.opts.Ack.ContentType
	if contentType == "" {
		contentType = "application/json"
	}
	h.respond(w, http.StatusOK, outcome, contentType, body)
}

type ackJSON struct {
	Received  bool `json:"received"`
	Duplicate bool `json:"duplicate"`
}

// reject answers a request that is not processed at all.
func (h *handler) reject(w http.ResponseWriter, code int, msg string) {
	h.respond(w, code, outcomeRejected, "text/plain; charset=utf-8", []byte(msg+"\n"))
}

func (h *handler) respond(w http.ResponseWriter, code int, outcome, contentType string, body []byte) {
	metrics.Requests.WithLabelValues(h.opts.Endpoint, strconv.Itoa(code), outcome).Inc()
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
