package outbox

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// Defaults of the knobs the spec does not have; those it has (maxAttempts, backoff,
// timeout, ordering, concurrency) default to the v1alpha1 constants.
const (
	DefaultPollInterval  = time.Second
	DefaultGaugeInterval = 10 * time.Second
	DefaultShutdownGrace = 10 * time.Second
	// DefaultBatchSize caps the rows one claim statement takes; the free delivery slots
	// cap it further.
	DefaultBatchSize = 128
)

// Options configure one Dispatcher: one endpoint's outbox rows, one sink.
type Options struct {
	// Endpoint is the endpoint key ("namespace/name"), the outbox rows' endpoint column
	// and the NOTIFY payload.
	Endpoint string
	// Tables names the endpoint's schema.
	Tables store.Tables
	// SinkURL receives every row as a POST.
	SinkURL string
	// SigningKey is a Standard Webhooks key ("whsec_<base64>"); deliveries are unsigned
	// when it is empty.
	SigningKey string
	// MaxAttempts is the number of failed attempts after which a row is dead-lettered.
	MaxAttempts int
	// BackoffInitial and BackoffMax shape the full-jitter exponential backoff: the delay
	// after attempt n is uniform in [0, min(BackoffMax, BackoffInitial*2^(n-1))].
	BackoffInitial time.Duration
	BackoffMax     time.Duration
	// SinkDownAfter is the number of consecutive unavailable answers (no answer, a
	// timeout, a 5xx, 408 or 429), across all the endpoint's dispatchers, after which the
	// sink is down: rows are held and one probe at a time is sent (sink.go).
	SinkDownAfter int
	// ProbeIntervalMax caps the delay between two probes of a down sink, which doubles
	// from BackoffInitial; it bounds how long after the sink is back delivery resumes.
	ProbeIntervalMax time.Duration
	// Timeout bounds one delivery attempt.
	Timeout time.Duration
	// Ordering PerEntity keeps at most one row per entity in flight, in id order.
	Ordering v1alpha1.Ordering
	// Concurrency is the number of deliveries in flight.
	Concurrency int
	// Lease is how long a claimed row stays invisible to other dispatchers. It must
	// outlast Timeout, or a slow attempt is claimed again while it runs; a crashed
	// dispatcher's rows are re-delivered once it ends.
	Lease time.Duration
	// PollInterval is the fallback when no NOTIFY arrives (missed, or a retry falls due).
	PollInterval time.Duration
	// GaugeInterval is how often the backlog gauges are refreshed.
	GaugeInterval time.Duration
	// ShutdownGrace bounds how long Run waits for in-flight deliveries after its context
	// ends; attempts still running then are abandoned and their leases released.
	// Recording the last results gets up to max(ShutdownGrace, 5s) more.
	ShutdownGrace time.Duration
	// BatchSize caps the rows taken by one claim statement.
	BatchSize int
	// Logger receives operational logs; never payloads or keys.
	Logger logr.Logger
	// Clock stamps webhook-timestamp; time.Now when nil.
	Clock func() time.Time
	// Random returns a uniform float in [0, 1) for the backoff jitter; math/rand/v2 when
	// nil. Tests inject a fixed source.
	Random func() float64
	// Listener, when set, wakes the dispatcher on NOTIFY instead of a LISTEN connection
	// of its own (a receiver pool shares one per database); it must be running.
	Listener *Listener
	// Housekeeping, when set, runs the backlog gauges and the claims that only the poll
	// timer asked for (no NOTIFY, no result since the last claim: the endpoint is likely
	// quiet) instead of the dispatcher's own pool. A receiver pool shares one small
	// housekeeping pool per database among its endpoints, so a quiet endpoint's ticks
	// reuse a warm session instead of each opening one (its own pool keeps none).
	Housekeeping *pgxpool.Pool
	// HTTPClient, when set, replaces the dispatcher's own client (whose transport keeps
	// Concurrency idle connections to the sink). Neither follows redirects: the
	// dispatcher uses a copy of it whose CheckRedirect refuses them.
	HTTPClient *http.Client
}

// withDefaults fills every zero knob.
func (o Options) withDefaults() Options {
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = v1alpha1.DefaultMaxAttempts
	}
	if o.BackoffInitial <= 0 {
		o.BackoffInitial = v1alpha1.DefaultBackoffInitial
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = v1alpha1.DefaultBackoffMax
	}
	o.BackoffMax = max(o.BackoffMax, o.BackoffInitial)
	if o.SinkDownAfter <= 0 {
		o.SinkDownAfter = DefaultSinkDownAfter
	}
	if o.ProbeIntervalMax <= 0 {
		o.ProbeIntervalMax = DefaultProbeIntervalMax
	}
	o.ProbeIntervalMax = max(min(o.ProbeIntervalMax, o.BackoffMax), o.BackoffInitial)
	if o.Timeout <= 0 {
		o.Timeout = v1alpha1.DefaultTimeout
	}
	if o.Ordering == "" {
		o.Ordering = v1alpha1.DefaultOrdering
	}
	if o.Concurrency <= 0 {
		o.Concurrency = v1alpha1.DefaultConcurrency
	}
	if o.Lease <= 0 {
		// Long enough for one attempt plus recording its result, short enough that a
		// crashed dispatcher's rows come back soon.
		o.Lease = o.Timeout + max(5*time.Second, o.Timeout)
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.GaugeInterval <= 0 {
		o.GaugeInterval = DefaultGaugeInterval
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = DefaultShutdownGrace
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Random == nil {
		o.Random = rand.Float64
	}
	return o
}

// validate reports what makes the options unusable. Errors never contain the key.
// Check reports what Run would refuse in these options (with defaults applied), so a
// receiver pool can turn a bad endpoint configuration down before serving it.
func (o Options) Check() error { return o.withDefaults().validate() }

func (o Options) validate() error {
	if o.Endpoint == "" {
		return errors.New("dispatcher options: endpoint key is empty")
	}
	if o.Tables.Outbox == "" {
		return errors.New("dispatcher options: outbox table is not set")
	}
	u, err := url.Parse(o.SinkURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// The URL may carry credentials: do not echo it.
		return errors.New("dispatcher options: sink URL must be an absolute http or https URL")
	}
	if o.Lease < o.Timeout+2*time.Second {
		return fmt.Errorf("dispatcher options: lease %s must exceed the attempt timeout %s by at least 2s", o.Lease, o.Timeout)
	}
	switch o.Ordering {
	case v1alpha1.OrderingPerEntity, v1alpha1.OrderingNone:
	default:
		return fmt.Errorf("dispatcher options: unknown ordering %q", o.Ordering)
	}
	if o.SigningKey != "" {
		if _, err := signature.DecodeWhsec(o.SigningKey); err != nil {
			return fmt.Errorf("dispatcher options: delivery signing key: %w", err)
		}
	}
	return nil
}
