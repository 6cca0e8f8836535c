package receiver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/event"
	"github.com/hookkeeper/hookkeeper/internal/metrics"
	"github.com/hookkeeper/hookkeeper/internal/provider"
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
	// outcomeUnstorable: an authentic event PostgreSQL cannot store unaltered (422).
	outcomeUnstorable = "unstorable"
)

// Extractor reads the events of a verified body; *config.Extractor is one.
type Extractor interface {
	Extract(verified *signature.Verified, header http.Header) ([]event.Event, error)
}

// Recorder commits events with their effects in one transaction; *receipt.Recorder is one.
type Recorder interface {
	RecordBatch(ctx context.Context, events []receipt.Event) ([]receipt.Result, error)
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
	// Ack is the answer the provider expects to an accepted delivery; zero fields take
	// 200 and a small JSON that says whether the delivery was a duplicate.
	Ack provider.Response
	// Handshake answers a verified endpoint-verification request (ok true) instead of
	// treating it as a delivery: the provider's (internal/provider). Nil means none.
	Handshake func(verified *signature.Verified, header http.Header) (provider.Response, bool)
	// TransactionTimeout bounds the database work; DefaultTransactionTimeout when zero.
	TransactionTimeout time.Duration
	// Clock is the request time given to the verifier; time.Now when nil.
	Clock  func() time.Time
	Logger logr.Logger
	// RejectionLogInterval: after the first, at most one rejection line per reason per
	// interval is logged; DefaultRejectionLogInterval when zero.
	RejectionLogInterval time.Duration
}

// handler serves webhook deliveries: cap -> read -> verify -> extract -> record -> ack.
type handler struct {
	opts HandlerOptions
	// Metric children resolved once: the endpoint label never changes.
	duration prometheus.Observer
	// rejections logs rejected requests, rate-limited per reason.
	rejections *rejectionLog
	// guardErrors remembers the guard errors already logged.
	guardErrors seenOnce
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
	return &handler{
		opts:       opts,
		duration:   metrics.RequestDuration.WithLabelValues(opts.Endpoint),
		rejections: newRejectionLog(opts.Logger, opts.Endpoint, opts.RejectionLogInterval),
	}, nil
}

// allowed are the methods the webhook path answers.
const allowed = http.MethodPost + ", " + http.MethodHead

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if r.URL.Path != h.opts.Path {
		h.reject(w, http.StatusNotFound, "not found")
		return
	}
	if r.Method == http.MethodHead {
		// Some providers (Intercom) check a URL with an unsigned HEAD when it is saved:
		// it is answered 200, and nothing is read, verified or stored.
		w.Header().Set("Allow", allowed)
		w.WriteHeader(http.StatusOK)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", allowed)
		h.reject(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	defer func() { h.duration.Observe(time.Since(start).Seconds()) }()
	log := h.opts.Logger

	// 1. Cap, then read the raw bytes the signature covers. Rejections are logged
	// rate-limited per reason: anyone on the public URL can send them at will.
	if r.ContentLength > h.opts.MaxBodyBytes {
		h.rejections.Info("body_too_large", "webhook rejected: body too large", "contentLength", r.ContentLength, "limit", h.opts.MaxBodyBytes)
		h.reject(w, http.StatusRequestEntityTooLarge, "request body too large")
		return
	}
	buf, err := readBody(w, r, h.opts.MaxBodyBytes)
	if err != nil {
		if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
			h.rejections.Info("body_too_large", "webhook rejected: body too large", "limit", h.opts.MaxBodyBytes)
			h.reject(w, http.StatusRequestEntityTooLarge, "request body too large")
			return
		}
		h.rejections.Info("body_unreadable", "webhook rejected: body unreadable", "error", err.Error())
		h.reject(w, http.StatusBadRequest, "request body unreadable")
		return
	}
	body := buf.Bytes()
	// The buffer goes back to the pool when the request is done, unless a recorder that
	// failed may still hold the events (a group-commit leader can outlive a member
	// whose context ended), which may alias the body.
	recycle := true
	defer func() {
		if recycle {
			putBody(buf)
		}
	}()

	// 2. Verify before trusting anything in the body. The error's detail names what
	// was wrong, never a header value or a digest.
	// Open returns the documents it verified, parsed once; extraction reads only those.
	verified, err := h.opts.Verifier.Open(signature.Request{Header: r.Header, Body: body, Method: r.Method, Now: h.opts.Clock()})
	if err != nil {
		reason := string(signature.ReasonOf(err))
		if reason == "" {
			reason = "error"
		}
		metrics.SignatureFailures.WithLabelValues(h.opts.Endpoint, reason).Inc()
		h.rejections.Info("signature/"+reason, "webhook rejected: signature", "reason", reason, "error", err.Error(), "remote", r.RemoteAddr)
		h.reject(w, http.StatusUnauthorized, "signature verification failed")
		return
	}

	// A verified endpoint-verification request (Slack's url_verification, Zoom's
	// endpoint.url_validation, ...) is answered, not recorded: it carries no event.
	if h.opts.Handshake != nil {
		if response, ok := h.opts.Handshake(verified, r.Header); ok {
			log.Info("answered the provider's endpoint verification")
			h.respond(w, response.Status, outcomeHandshake, response.ContentType, response.Body)
			return
		}
	}

	// 3. Extract id, type, entity, amount and time.
	events, err := h.opts.Extractor.Extract(verified, r.Header)
	if err == nil && len(events) == 0 {
		err = errors.New("the payload holds no event")
	}
	if err != nil {
		h.rejections.Info("payload", "webhook rejected: payload", "error", err.Error())
		if errors.Is(err, config.ErrUnstorable) {
			// Authentic but not storable unaltered (NUL, not UTF-8): a clear 422,
			// counted as outcome "unstorable", not a 503 on every retry.
			h.respond(w, http.StatusUnprocessableEntity, outcomeUnstorable, "text/plain; charset=utf-8", []byte("payload cannot be stored unaltered\n"))
			return
		}
		h.reject(w, http.StatusBadRequest, "payload not understood")
		return
	}

	// 4. One transaction for the whole delivery: all of it commits, or nothing does
	// and the provider delivers again.
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.TransactionTimeout)
	results, err := h.opts.Recorder.RecordBatch(ctx, events)
	cancel()
	if err != nil {
		recycle = false
		h.unavailable(w, start, events, err, r.Context().Err() != nil)
		return
	}

	// 5. Acknowledge.
	h.ack(w, start, events, results)
}

// maxPooledBody is the largest buffer kept for reuse: typical webhook bodies fit, and
// one large body does not pin its memory in the pool.
const maxPooledBody = 64 << 10

// bodyPool holds *bytes.Buffer for request bodies.
var bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// readBody reads at most limit bytes into a pooled buffer; a longer body fails with
// *http.MaxBytesError. The buffer grows with the bytes that arrive, never with the
// Content-Length a client announces: a client that announces a large body and sends
// nothing costs no more than one that announces nothing. Give it back with putBody.
//
// The buffer grows with the bytes that arrive, never with the Content-Length announced,
// and never past the limit (or the Content-Length) plus one byte: bytes.Buffer.ReadFrom
// doubles its buffer as bytes arrive, so a body just under the limit would hold twice
// the limit.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) (*bytes.Buffer, error) {
	most := limit
	if r.ContentLength >= 0 && r.ContentLength < limit {
		most = r.ContentLength
	}
	buf := bodyPool.Get().(*bytes.Buffer)
	buf.Reset()
	b, err := readCapped(http.MaxBytesReader(w, r.Body, limit), buf.AvailableBuffer(), most)
	if err != nil {
		putBody(buf)
		return nil, fmt.Errorf("read request body: %w", err)
	}
	*buf = *bytes.NewBuffer(b)
	return buf, nil
}

// readCapped appends r to the end onto b (a pooled buffer's free space), doubling the
// slice from bytes.MinRead but never past most+1 bytes: the one more lets the last read
// see the end, or the MaxBytesReader's too-large error.
func readCapped(r io.Reader, b []byte, most int64) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			next := max(min(2*int64(cap(b)), most+1), int64(bytes.MinRead), int64(cap(b))+1)
			grown := make([]byte, len(b), next)
			copy(grown, b)
			b = grown
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if errors.Is(err, io.EOF) {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// putBody returns buf to the pool unless it grew too large to keep.
func putBody(buf *bytes.Buffer) {
	if buf.Cap() <= maxPooledBody {
		buf.Reset()
		bodyPool.Put(buf)
	}
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
		h.recorded(res, ev.ID, ev.Type, ev.EntityKey, latency)
		for _, rel := range res.Released {
			h.recorded(rel, rel.EventID, "", ev.EntityKey, latency)
		}
		if outcome == "" || res.Outcome == receipt.OutcomeApplied {
			outcome = string(res.Outcome)
		}
	}
	if duplicate {
		outcome = outcomeDuplicate
	}
	status, body, contentType := h.opts.Ack.Status, h.opts.Ack.Body, h.opts.Ack.ContentType
	if body == nil && status != http.StatusNoContent {
		body, _ = json.Marshal(ackJSON{Received: true, Duplicate: duplicate})
		contentType = "application/json"
	}
	h.respond(w, status, outcome, contentType, body)
}

// recorded counts and logs one decision: a delivered event's, or a parked event's that
// the delivery released. A guard that failed to evaluate is logged at error level once
// per distinct error (the metric counts every one).
func (h *handler) recorded(res receipt.Result, id, typ, entity string, latency time.Duration) {
	metrics.Transitions.WithLabelValues(h.opts.Endpoint, string(res.Outcome)).Inc()
	if res.Outcome == receipt.OutcomeGuardError {
		metrics.GuardErrors.WithLabelValues(h.opts.Endpoint, res.Transition).Inc()
		if h.guardErrors.first(res.Detail) {
			h.opts.Logger.Error(nil, "a guard failed to evaluate: the event was recorded as guard_error and nothing applied; fix the guard, then replay it (hookkeeper replay --receipts)",
				"transition", res.Transition, "error", res.Detail, "eventID", id)
		}
	}
	h.opts.Logger.V(1).Info("webhook recorded", "eventID", id, "type", typ, "entity", entity,
		"outcome", res.Outcome, "detail", res.Detail, "transition", res.Transition, "latency", latency)
}

// seenOnce remembers up to 256 distinct strings, so a repeated error is logged once.
type seenOnce struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (s *seenOnce) first(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen[key] || len(s.seen) >= 256 {
		return false
	}
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	s.seen[key] = true
	return true
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
	if code == 0 {
		code = http.StatusOK // a provider's Response may leave the status to the default
	}
	metrics.Requests.WithLabelValues(h.opts.Endpoint, strconv.Itoa(code), outcome).Inc()
	if contentType != "" {
		w.Header().Set("Content-Type", contentType)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
