package dataplanecmd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/metrics"
	"github.com/hookkeeper/hookkeeper/internal/outbox"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/receiver"
	"github.com/hookkeeper/hookkeeper/internal/refetch"
	"github.com/hookkeeper/hookkeeper/internal/retention"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// unitOptions build one endpointUnit.
type unitOptions struct {
	Endpoint *config.Endpoint
	// Getenv reads the rest of the endpoint's environment (the refetch API key).
	Getenv      func(string) string
	Dispatcher  bool
	GroupCommit receipt.GroupCommit
	// MaxInFlight overrides spec.receiver.maxInFlight when positive.
	MaxInFlight int
	// MaxShare, when positive, caps the unit's in-flight limit: a receiver pool gives a
	// member at most half of the pod's slots, so one stuck or flooded member cannot
	// take them all.
	MaxShare int
	// Slots, in a receiver pool, count the member's requests in flight across the
	// versions of its configuration (the pool sets their limit when a version starts
	// serving); nil: the unit's own, at its maxInFlight.
	Slots *receiver.Slots
	// Total, in a receiver pool, is the pod's cap on requests in flight; a request takes
	// one of its slots only once the member's own limit admitted it.
	Total             *receiver.TotalLimit
	RetentionInterval time.Duration
	// Pooled builds the unit for a receiver pool: its database pool connects on first
	// use (an endpoint whose database is down still starts, and answers 503) and closes
	// idle connections, so a quiet endpoint holds no session; the dispatcher wakes
	// through Listener instead of a LISTEN connection of its own. A dedicated receiver
	// opens (and pings) its pool at start, as it always has.
	Pooled   bool
	Listener *outbox.Listener
	// Gate bounds the connections being opened at once to the endpoint's database,
	// across the endpoints of a pool that share it (nil: no bound).
	Gate *store.ConnectGate
	// Housekeeping, in a pool, is the small pool its endpoints on this database share
	// for their periodic work: readiness checks and heartbeats, the parking sweep's and
	// the dispatcher's idle reads. Nil: the unit's own pool does it.
	Housekeeping *pgxpool.Pool
	Log          logr.Logger
}

// A pooled endpoint is usually quiet: its database pool closes connections idle this
// long, checked this often, and its dispatcher, woken by the shared LISTEN, polls and
// refreshes its gauges rarely, so that between polls it holds no session. (Polling every
// second kept about two sessions open per idle endpoint: 800 for 200 endpoints on two
// replicas, against PostgreSQL's default max_connections of 100.) A retry due sooner than
// the next poll still gets its own timer (Dispatcher). The periodic work itself (polls
// that only the timer asked for, gauges, the parking sweep's reads, heartbeats) runs on
// the housekeeping pool the endpoints of one database share, whose few sessions stay
// open while there are ticks: without it every tick of every endpoint opened a session
// (about 80 connects a second for 200 endpoints on two replicas).
const (
	pooledConnIdleTime   = time.Second
	pooledHealthInterval = 500 * time.Millisecond
	pooledPollInterval   = 10 * time.Second
	pooledGaugeInterval  = 30 * time.Second
	// pooledStartSpread: a pooled endpoint's periodic tasks (dispatcher polls, parking
	// sweep, retention) start after a random delay up to this, and its heartbeat up to a
	// fifth of it, so that hundreds of endpoints loaded at once do not open their
	// sessions in the same instant at every tick (200 endpoints on two replicas did:
	// 1,200 connections within a second every 30 s, which a 2-core PostgreSQL answered
	// with connection timeouts).
	pooledStartSpread = pooledPollInterval
	// pooledRecentEvents: a pooled endpoint remembers fewer committed event ids than a
	// receiver of its own (receipt.DefaultRecentEvents), so hundreds of busy endpoints in
	// one pod stay within its memory: 0.25 MiB each when full.
	pooledRecentEvents = 4096
	// pooledPredictedEntities: likewise for the entities a pooled endpoint remembers to
	// predict (receipt.DefaultPredictedEntities): about 0.17 MiB each when full.
	pooledPredictedEntities = 1024
)

// Names of the tasks startDelay treats apart.
const (
	taskNotifier  = "notifier"
	taskHeartbeat = "heartbeat"
)

// endpointUnit is everything one endpoint needs in a receiver process: its database
// pool, recorder, webhook handler (behind its own in-flight limit), and background
// tasks (notifier, dispatcher, parking sweep, retention). A dedicated receiver (Serve)
// runs one under receiver.Server; a receiver pool runs many, starting, swapping and
// draining them as its directory changes.
type endpointUnit struct {
	ep *config.Endpoint
	db *pgxpool.Pool
	// housekeeping runs the readiness checks and the heartbeat's writes
	// (unitOptions.Housekeeping, else db).
	housekeeping *pgxpool.Pool
	log          logr.Logger
	// handler is the webhook handler behind the endpoint's in-flight limit; it answers
	// spec.receiver.path.
	handler     http.Handler
	tasks       []receiver.Task
	maxInFlight int

	// Pool mode only: requests in flight, the tasks' lifetime and what they failed with.
	active    inflight
	stopTasks context.CancelFunc
	tasksDone sync.WaitGroup
	taskMu    sync.Mutex
	taskErr   error
	// status is the last readiness check: nil when ready.
	status atomic.Pointer[unitStatus]
	// spread is pooledStartSpread for a pooled unit, 0 for a dedicated one (startDelay).
	spread time.Duration
}

type unitStatus struct {
	err       error
	checkedAt time.Time
}

// newEndpointUnit builds a unit; nothing runs until its tasks do. On error nothing is
// left open.
func newEndpointUnit(ctx context.Context, o unitOptions) (_ *endpointUnit, err error) {
	ep, log, group := o.Endpoint, o.Log, o.GroupCommit
	u := &endpointUnit{ep: ep, log: log}

	var dispatcherOpts outbox.Options
	if o.Dispatcher {
		dispatcherOpts = outbox.FromEndpoint(ep)
		dispatcherOpts.Logger = log.WithName("dispatcher")
		dispatcherOpts.Listener = o.Listener
		if o.Pooled {
			dispatcherOpts.PollInterval, dispatcherOpts.GaugeInterval = pooledPollInterval, pooledGaugeInterval
			// A pool refuses a configuration its dispatcher would fail on, and keeps
			// serving the previous one; a dedicated receiver fails as it always did.
			if err := dispatcherOpts.Check(); err != nil {
				return nil, err
			}
		}
	}
	recOpts, err := refetch.RecorderOptions(ep.Spec.Provider, o.Getenv, refetch.Options{Logger: log.WithName("refetch")})
	if err != nil {
		return nil, fmt.Errorf("configure refetch: %w", err)
	}

	if o.Pooled {
		u.spread = pooledStartSpread
		recOpts = append(recOpts, receipt.WithRecentEvents(pooledRecentEvents),
			receipt.WithPredictedEntities(pooledPredictedEntities))
		u.db, err = store.NewPool(ctx, ep.DatabaseURL, store.PoolOptions{
			MaxConns:          ep.Spec.Database.MaxConnections,
			MaxConnIdleTime:   pooledConnIdleTime,
			HealthCheckPeriod: pooledHealthInterval,
			Gate:              o.Gate,
		})
	} else {
		openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		u.db, err = store.Open(openCtx, ep.DatabaseURL, ep.Spec.Database.MaxConnections)
		cancel()
	}
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	defer func() {
		if err != nil {
			u.db.Close()
		}
	}()
	pool := u.db
	u.housekeeping = pool
	if o.Housekeeping != nil {
		u.housekeeping = o.Housekeeping
		dispatcherOpts.Housekeeping = o.Housekeeping
		recOpts = append(recOpts, receipt.WithHousekeeping(o.Housekeeping))
	}

	// Wake-ups leave the receipt transaction: after a commit that wrote outbox rows, the
	// in-process dispatcher is woken directly and the other replicas' by a NOTIFY that
	// the notifier sends on its own connection, at most one in flight.
	notifier := outbox.NewNotifier(pool, ep.Key(), log.WithName("notifier"))
	u.tasks = []receiver.Task{{Name: "notifier", Run: notifier.Run}}
	wake := notifier.Notify
	if o.Dispatcher {
		d := outbox.NewDispatcher(pool, dispatcherOpts)
		u.tasks = append(u.tasks, receiver.Task{Name: "dispatcher", Run: d.Run})
		wake = func() {
			d.Wake()
			notifier.Notify()
		}
	}
	groupSize := metrics.GroupSize.WithLabelValues(ep.Key())
	group.Observe = func(n int) { groupSize.Observe(float64(n)) }
	group.ObservePrediction = func(result string) { metrics.Predictions.WithLabelValues(ep.Key(), result).Inc() }
	recOpts = append(recOpts, receipt.WithOutboxWritten(wake), receipt.WithGroupCommit(group))
	recorder := receipt.NewRecorder(pool, ep, recOpts...)
	handler, err := receiver.HandlerFor(ep, recorder, log.WithName("webhook"))
	if err != nil {
		return nil, err
	}
	u.tasks = append(u.tasks, receiver.Task{Name: "parking", Run: func(ctx context.Context) error {
		return recorder.RunParking(ctx, parkingInterval, parkingReporter(ep.Key(), log.WithName("parking")))
	}})
	u.tasks = append(u.tasks, receiver.Task{Name: "retention", Run: func(ctx context.Context) error {
		return retention.Run(ctx, pool, retention.Options{
			Endpoint: ep.Key(),
			Tables:   store.TablesIn(ep.Spec.Database.Schema),
			Policy:   retention.PolicyOf(ep),
			Interval: o.RetentionInterval,
		}, retentionReporter(ep.Key(), log.WithName("retention")))
	}})

	u.maxInFlight = int(ep.Spec.Receiver.MaxInFlight)
	if o.MaxInFlight > 0 {
		u.maxInFlight = o.MaxInFlight
	}
	if o.MaxShare > 0 {
		u.maxInFlight = min(u.maxInFlight, o.MaxShare)
	}
	if o.Total != nil {
		handler = o.Total.Wrap(handler)
	}
	slots := o.Slots
	if slots == nil {
		slots = receiver.NewSlots(u.maxInFlight)
	}
	u.handler = receiver.LimitInFlightOn(handler, ep.Key(), slots, log.WithName("webhook"))
	return u, nil
}

// checkSchema is the unit's readiness beyond a ping: the schema at this binary's version.
func (u *endpointUnit) checkSchema(ctx context.Context) error {
	return store.CheckSchema(ctx, u.housekeeping, u.ep.Spec.Database.Schema)
}

// checkReady pings the database and checks the schema, and remembers the result for
// /endpoints.
func (u *endpointUnit) checkReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, unitCheckTimeout)
	defer cancel()
	err := u.housekeeping.Ping(ctx)
	if err != nil {
		err = fmt.Errorf("database unreachable: %w", err)
	} else {
		err = u.checkSchema(ctx)
	}
	u.status.Store(&unitStatus{err: err, checkedAt: time.Now()})
	return err
}

// unitCheckTimeout bounds one readiness check of a pooled endpoint.
const unitCheckTimeout = 5 * time.Second

// start runs the unit's tasks (and extra, such as the heartbeat) until stop; a task
// that fails is logged and reported in status, and the others keep running: in a pool
// one endpoint's failure never ends the process.
func (u *endpointUnit) start(ctx context.Context, extra ...receiver.Task) {
	ctx, u.stopTasks = context.WithCancel(context.WithoutCancel(ctx))
	for _, t := range append(append([]receiver.Task(nil), u.tasks...), extra...) {
		u.tasksDone.Go(func() {
			if d := u.startDelay(t.Name); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
			err := t.Run(ctx)
			if err != nil && ctx.Err() == nil {
				err = fmt.Errorf("%s stopped: %w", t.Name, err)
				u.log.Error(err, "background task of the endpoint failed; the endpoint still receives, the task stays stopped until its configuration changes", "task", t.Name)
				u.taskMu.Lock()
				u.taskErr = errors.Join(u.taskErr, err)
				u.taskMu.Unlock()
				return
			}
			u.log.V(1).Info("background task stopped", "task", t.Name)
		})
	}
}

// startDelay is how long task waits before it starts: a random part of spread for a
// pooled unit's periodic tasks, none for the notifier (it only sends what a commit
// asks) nor for any task of a dedicated receiver.
func (u *endpointUnit) startDelay(task string) time.Duration {
	switch {
	case u.spread <= 0 || task == taskNotifier:
		return 0
	case task == taskHeartbeat:
		return rand.N(u.spread / 5) //nolint:gosec // a start delay, not a secret
	default:
		return rand.N(u.spread) //nolint:gosec // a start delay, not a secret
	}
}

// failedTasks is what the unit's tasks failed with, nil while all run.
func (u *endpointUnit) failedTasks() error {
	u.taskMu.Lock()
	defer u.taskMu.Unlock()
	return u.taskErr
}

// drain stops the unit once it is no longer routed: it waits up to timeout for the
// requests in flight on it, then stops its tasks (the dispatcher finishes its
// deliveries within its own grace). The caller closes the database pool after.
func (u *endpointUnit) drain(timeout time.Duration) {
	if !u.active.drain(timeout) {
		u.log.Info("drain: requests still in flight after the shutdown timeout; stopping anyway", "timeout", timeout)
	}
	if u.stopTasks != nil {
		u.stopTasks()
	}
	u.tasksDone.Wait()
}

// inflight counts the requests on a unit, so a unit swapped out of the routes is
// drained: acquire fails once drain has begun, and drain waits for the count to reach
// zero. Atomics only: it sits on every request's path.
type inflight struct {
	n       atomic.Int64
	closing atomic.Bool
	once    sync.Once
	idle    chan struct{}
	initMu  sync.Once
}

func (f *inflight) init() { f.initMu.Do(func() { f.idle = make(chan struct{}) }) }

// acquire admits one request unless drain has begun.
func (f *inflight) acquire() bool {
	f.n.Add(1)
	if f.closing.Load() {
		f.release()
		return false
	}
	return true
}

func (f *inflight) release() {
	if f.n.Add(-1) == 0 && f.closing.Load() {
		f.init()
		f.once.Do(func() { close(f.idle) })
	}
}

// drain refuses new requests and waits up to timeout for those admitted; it reports
// whether they all finished.
func (f *inflight) drain(timeout time.Duration) bool {
	f.init()
	f.closing.Store(true)
	if f.n.Load() == 0 {
		f.once.Do(func() { close(f.idle) })
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-f.idle:
		return true
	case <-t.C:
		return false
	}
}
