package receiver

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// readyTimeout bounds the database ping behind /readyz, well under the kubelet's
// default probe timeout, so a hung database shows as not ready instead of a probe
// timing out.
const readyTimeout = 2 * time.Second

// Pinger reports whether the database answers; *pgxpool.Pool is one.
type Pinger interface {
	Ping(ctx context.Context) error
}

// admin serves the operational endpoints on their own port, so exposing the webhook
// port to the internet never exposes metrics or probes.
type admin struct {
	db       Pinger
	schema   func(ctx context.Context) error
	ready    func(ctx context.Context) error
	draining *atomic.Bool
	log      logr.Logger
	mux      *http.ServeMux
}

func newAdmin(db Pinger, schema, ready func(ctx context.Context) error, draining *atomic.Bool, gatherer prometheus.Gatherer, log logr.Logger) *admin {
	a := &admin{db: db, schema: schema, ready: ready, draining: draining, log: log, mux: http.NewServeMux()}
	a.mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{
		ErrorLog: promLogger{log},
	}))
	a.mux.HandleFunc("GET /healthz", a.healthz)
	a.mux.HandleFunc("GET /readyz", a.readyz)
	return a
}

func (a *admin) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// healthz answers while the process can serve HTTP at all: a database outage must not
// make the kubelet restart every receiver.
func (a *admin) healthz(w http.ResponseWriter, _ *http.Request) {
	writePlain(w, http.StatusOK, "ok\n")
}

// readyz takes the pod out of the Service while it drains, cannot reach the database
// or finds the database without the schema this binary needs (a receiver started
// before its migration), so providers' retries land on a replica that can commit.
func (a *admin) readyz(w http.ResponseWriter, r *http.Request) {
	if a.draining.Load() {
		writePlain(w, http.StatusServiceUnavailable, "shutting down\n")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if answer, err := a.notReady(ctx); err != nil {
		a.log.V(1).Info("readiness check failed", "error", err.Error())
		writePlain(w, http.StatusServiceUnavailable, answer+"\n")
		return
	}
	writePlain(w, http.StatusOK, "ok\n")
}

// notReady runs the readiness checks: ready alone when set, else the database ping and
// then the schema. It returns the first failure and what the probe answers with it.
func (a *admin) notReady(ctx context.Context) (answer string, err error) {
	if a.ready != nil {
		if err := a.ready(ctx); err != nil {
			return err.Error(), err
		}
		return "", nil
	}
	if err := a.db.Ping(ctx); err != nil {
		// The driver's error may name the URL: the probe's answer does not.
		return "database unreachable", err
	}
	if a.schema != nil {
		if err := a.schema(ctx); err != nil {
			// The message names the schema and the versions, never the URL.
			return err.Error(), err
		}
	}
	return "", nil
}

func writePlain(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}

// promLogger routes promhttp's encoding errors into the structured log.
type promLogger struct{ log logr.Logger }

func (p promLogger) Println(v ...any) { p.log.Error(nil, "serve metrics", "detail", v) }
