// Package receiver is hookkeeper's webhook receiver: the HTTP server that verifies,
// extracts and records each delivery in one transaction before it answers 2xx, and the
// admin server with /metrics, /healthz and /readyz. It also runs background work of
// the same process (the outbox dispatcher) and stops everything in order on shutdown.
package receiver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/metrics"
)

// DefaultShutdownTimeout bounds how long in-flight requests may take to finish after
// SIGTERM; it stays under Kubernetes' default 30s grace period, so the pool still
// closes cleanly before the kubelet kills the process.
const DefaultShutdownTimeout = 20 * time.Second

// Server timeouts: generous for a slow provider on a bad link, short enough that idle
// or stalled connections cannot pile up.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 90 * time.Second
	maxHeaderBytes    = 64 << 10
)

// Task is background work that shares the receiver's process, such as the outbox
// dispatcher. It runs until its context ends and returns nil after a clean stop.
type Task struct {
	Name string
	Run  func(ctx context.Context) error
}

// ServerOptions configure a Server.
type ServerOptions struct {
	// WebhookAddr and AdminAddr are the listen addresses (host:port).
	WebhookAddr string
	AdminAddr   string
	// Webhook handles deliveries on WebhookAddr; see NewHandler.
	Webhook http.Handler
	// Endpoint is the endpoint key ("namespace/name"), the metrics' endpoint label.
	Endpoint string
	// MaxInFlight caps the webhook requests handled at once (spec.receiver.maxInFlight);
	// beyond it a request gets 503 with Retry-After before its body is read. Zero means
	// v1alpha1.DefaultMaxInFlight.
	MaxInFlight int
	// PerEndpointLimits says Webhook enforces its own in-flight limits, one per endpoint
	// (LimitInFlight around each endpoint's handler, and in a receiver pool a shared
	// TotalLimit inside it): the server adds none, and MaxInFlight is not used.
	PerEndpointLimits bool
	// DB backs /readyz, unless Ready is set.
	DB Pinger
	// Ready, when set, replaces the database checks of /readyz: the pod is ready while
	// it returns nil (and shutdown has not begun); its error's text is the 503's body.
	// A receiver pool's readiness depends on no single endpoint's database.
	Ready func(ctx context.Context) error
	// AdminHandlers are more routes of the admin port ("GET /endpoints"), by pattern.
	AdminHandlers map[string]http.Handler
	// Schema, when set, is checked by /readyz after the ping: it returns an error that
	// says what is missing when the database cannot serve this receiver (no schema, an
	// older version), and the error's text is the body of the 503.
	Schema func(ctx context.Context) error
	// Gatherer is what /metrics exposes.
	Gatherer prometheus.Gatherer
	// Tasks run beside the servers and stop after the webhook server has drained.
	Tasks []Task
	// DrainDelay keeps accepting requests for a while after shutdown begins with
	// /readyz already failing, so load balancers stop routing here first.
	DrainDelay time.Duration
	// ShutdownTimeout bounds the wait for in-flight requests; DefaultShutdownTimeout
	// when zero.
	ShutdownTimeout time.Duration
	Logger          logr.Logger
}

// Server runs the webhook and admin HTTP servers and the background tasks of one
// receiver process.
type Server struct {
	opts     ServerOptions
	draining atomic.Bool
	webhook  *http.Server
	admin    *http.Server
}

// NewServer builds a Server; nothing listens until Run.
func NewServer(opts ServerOptions) (*Server, error) {
	if opts.Webhook == nil || (opts.DB == nil && opts.Ready == nil) || opts.Gatherer == nil {
		return nil, errors.New("receiver server: webhook handler, database (or readiness check) and metrics gatherer are required")
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	s := &Server{opts: opts}
	webhookLog := opts.Logger.WithName("webhook")
	webhook := opts.Webhook
	if !opts.PerEndpointLimits {
		webhook = LimitInFlight(webhook, opts.Endpoint, opts.MaxInFlight, webhookLog)
	}
	s.webhook = newHTTPServer(webhook, webhookLog)
	adm := newAdmin(opts.DB, opts.Schema, opts.Ready, &s.draining, opts.Gatherer, opts.Logger.WithName("admin"))
	for pattern, h := range opts.AdminHandlers {
		adm.mux.Handle(pattern, h)
	}
	s.admin = newHTTPServer(adm, opts.Logger.WithName("admin"))
	return s, nil
}

func newHTTPServer(h http.Handler, log logr.Logger) *http.Server {
	return &http.Server{
		Handler:           closeAfterChunked(h),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          newStdLogger(log),
		// Request contexts do not derive from Run's context: SIGTERM must let in-flight
		// transactions commit, not cancel them.
		BaseContext: func(net.Listener) context.Context { return context.Background() },
	}
}

// closeAfterChunked closes the connection after answering a request with a
// Transfer-Encoding. Go reads such a body by its chunks and drops a Content-Length sent
// beside it (the handler cannot tell it was there), but a proxy in front may have framed
// the request by that Content-Length: the two would disagree on where the next request
// on the connection starts, and bytes after the chunks would be served as a request the
// proxy never saw (request smuggling). RFC 9112 section 6.1: a server that gets both
// "MUST close the connection after responding". Providers send Content-Length; a
// chunked sender only reconnects.
func closeAfterChunked(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TransferEncoding) > 0 {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

// Draining reports whether shutdown has begun.
func (s *Server) Draining() bool { return s.draining.Load() }

// Run listens on both addresses and serves until ctx ends or a server or task fails.
// Then it shuts down in order: /readyz fails, the webhook listener closes and
// in-flight requests finish (up to ShutdownTimeout), the tasks stop, and the admin
// server closes last so probes and scrapes work while draining.
func (s *Server) Run(ctx context.Context) error {
	webhookLn, err := net.Listen("tcp", s.opts.WebhookAddr)
	if err != nil {
		return fmt.Errorf("listen for webhooks on %s: %w", s.opts.WebhookAddr, err)
	}
	adminLn, err := net.Listen("tcp", s.opts.AdminAddr)
	if err != nil {
		_ = webhookLn.Close()
		return fmt.Errorf("listen for admin on %s: %w", s.opts.AdminAddr, err)
	}
	return s.Serve(ctx, webhookLn, adminLn)
}

// Serve is Run on listeners the caller opened (tests use port 0).
func (s *Server) Serve(ctx context.Context, webhookLn, adminLn net.Listener) error {
	log := s.opts.Logger
	failed := make(chan error, 2+len(s.opts.Tasks))
	serve := func(name string, srv *http.Server, ln net.Listener) {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			failed <- fmt.Errorf("%s server: %w", name, err)
		}
	}
	go serve("webhook", s.webhook, webhookLn)
	go serve("admin", s.admin, adminLn)
	log.Info("receiver listening", "webhook", webhookLn.Addr().String(), "admin", adminLn.Addr().String())

	taskCtx, stopTasks := context.WithCancel(context.WithoutCancel(ctx))
	defer stopTasks()
	var tasks sync.WaitGroup
	for _, t := range s.opts.Tasks {
		tasks.Go(func() {
			err := t.Run(taskCtx)
			if err != nil && taskCtx.Err() == nil {
				failed <- fmt.Errorf("%s: %w", t.Name, err)
				return
			}
			log.Info("background task stopped", "task", t.Name)
		})
	}

	var cause error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case cause = <-failed:
		log.Error(cause, "shutting down after a failure")
	}

	s.draining.Store(true)
	if s.opts.DrainDelay > 0 && cause == nil {
		log.Info("draining: readiness fails, still accepting", "delay", s.opts.DrainDelay)
		time.Sleep(s.opts.DrainDelay)
	}

	shutdownCtx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	var errs []error
	if err := s.webhook.Shutdown(shutdownCtx); err != nil {
		errs = append(errs, fmt.Errorf("finish in-flight webhooks: %w", err))
		_ = s.webhook.Close()
	}
	stopTasks()
	tasks.Wait()
	if err := s.admin.Shutdown(shutdownCtx); err != nil {
		_ = s.admin.Close()
	}
	log.Info("receiver stopped")
	if cause != nil {
		errs = append([]error{cause}, errs...)
	}
	return errors.Join(errs...)
}

// outcomeOverloaded is the outcome label of a request refused because maxInFlight
// requests were in flight.
const outcomeOverloaded = "overloaded"

// Slots counts the requests in flight of one endpoint, or of a whole receiver pool pod,
// against a limit that may change while they run. A receiver pool keeps one per member
// across the versions of its configuration: requests still running on a version being
// drained count against the version that replaced it, so a member never holds more than
// its limit of the pod, even while it changes.
type Slots struct {
	mu       sync.Mutex
	inFlight int
	limit    int
}

// NewSlots returns Slots with limit (zero or less: v1alpha1.DefaultMaxInFlight).
func NewSlots(limit int) *Slots {
	s := &Slots{}
	s.SetLimit(limit)
	return s
}

// SetLimit changes the limit; requests already admitted run on, and none is admitted
// until fewer than the new limit are in flight.
func (s *Slots) SetLimit(limit int) {
	if limit <= 0 {
		limit = v1alpha1.DefaultMaxInFlight
	}
	s.mu.Lock()
	s.limit = limit
	s.mu.Unlock()
}

// take admits one request if fewer than the limit are in flight, and returns the limit.
func (s *Slots) take() (bool, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inFlight >= s.limit {
		return false, s.limit
	}
	s.inFlight++
	return true, s.limit
}

func (s *Slots) give() {
	s.mu.Lock()
	s.inFlight--
	s.mu.Unlock()
}

// LimitInFlight admits at most limit requests into next at once and answers the rest
// 503 with Retry-After at once, before any body byte is read. It never queues: a queue
// would hold the very connections the limit exists to shed, and the provider retries.
// endpoint is the metrics' label; a limit of zero or less means
// v1alpha1.DefaultMaxInFlight.
func LimitInFlight(next http.Handler, endpoint string, limit int, log logr.Logger) http.Handler {
	return LimitInFlightOn(next, endpoint, NewSlots(limit), log)
}

// LimitInFlightOn is LimitInFlight counting on slots, which other handlers may share (a
// receiver pool member's versions do). A receiver pool wraps each member's handler in
// its own, so one member's flood is refused without touching the others.
func LimitInFlightOn(next http.Handler, endpoint string, slots *Slots, log logr.Logger) http.Handler {
	inFlight := metrics.InFlight.WithLabelValues(endpoint)
	overloaded := metrics.Overloaded.WithLabelValues(endpoint)
	refused := metrics.Requests.WithLabelValues(endpoint, strconv.Itoa(http.StatusServiceUnavailable), outcomeOverloaded)
	rejections := newRejectionLog(log, endpoint, DefaultRejectionLogInterval)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok, limit := slots.take()
		if !ok {
			overloaded.Inc()
			refused.Inc()
			rejections.Info(outcomeOverloaded, "webhook refused: too many requests in flight", "maxInFlight", limit)
			refuseOverloaded(w)
			return
		}
		inFlight.Inc()
		defer func() {
			inFlight.Dec()
			slots.give()
		}()
		next.ServeHTTP(w, r)
	})
}

// TotalLimit caps the requests a receiver pool pod handles at once, whichever endpoint
// they are for (the pool's spec.maxInFlight). Without it a pod's body memory would grow
// with the number of endpoints, each admitting its maxInFlight bodies, and one pod's
// exhaustion takes every endpoint of the pool down. Refusals count in
// hookkeeper_receiver_pool_overloaded_total.
type TotalLimit struct {
	slots      *Slots
	rejections *rejectionLog
}

// NewTotalLimit is a TotalLimit of limit slots; zero or less means
// v1alpha1.DefaultMaxInFlight.
func NewTotalLimit(limit int, log logr.Logger) *TotalLimit {
	return &TotalLimit{slots: NewSlots(limit), rejections: newRejectionLog(log, "", DefaultRejectionLogInterval)}
}

// Wrap admits a request into next while one of the pod's slots is free and answers the
// rest as LimitInFlight does. Each endpoint puts it inside its own LimitInFlight, so a
// request its endpoint refuses never holds a slot: a flooded or stuck endpoint keeps at
// most its own limit of the pod's slots, however many more requests it is sent.
func (l *TotalLimit) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok, limit := l.slots.take()
		if !ok {
			metrics.PoolOverloaded.Inc()
			l.rejections.Info(outcomeOverloaded, "webhook refused: too many requests in flight in this pool pod", "maxInFlight", limit)
			refuseOverloaded(w)
			return
		}
		defer l.slots.give()
		next.ServeHTTP(w, r)
	})
}

// overloadedBody is the answer to a request refused for too many in flight.
var overloadedBody = []byte("too many requests in flight, retry later\n")

// refuseOverloaded answers 503 with Retry-After before any body byte is read.
func refuseOverloaded(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(overloadedBody)))
	h.Set("Cache-Control", "no-store")
	// The unread body is not worth a slot: close rather than drain it.
	h.Set("Connection", "close")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(overloadedBody)
}
