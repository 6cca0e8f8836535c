// Package outbox delivers outbox rows to the endpoint's sink: it claims due rows with
// FOR UPDATE SKIP LOCKED under a lease, POSTs each outside any transaction with a stable
// Idempotency-Key (and Standard Webhooks signature when configured), records the result
// fenced on the claim's lease, retries with full-jitter backoff and dead-letters after
// maxAttempts. It also re-drives dead letters and stored receipts (replay).
//
// Delivery is at least once: a crash anywhere leaves the row claimable again once its
// lease ends, and every repeat carries the same key.
package outbox

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/internal/metrics"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// maxRecordBatch caps the results written by one statement.
const maxRecordBatch = 512

// leaseMargin is how long before its lease ends a delivery must be over, for the
// cancellation to take effect and for clock rates to differ.
const leaseMargin = time.Second

// Dispatcher delivers one endpoint's outbox rows.
type Dispatcher struct {
	pool *pgxpool.Pool
	// housekeeping is Options.Housekeeping, else pool.
	housekeeping *pgxpool.Pool
	opts         Options
	q            queries
	sq           sinkQueries
	client       *http.Client
	signingKey   []byte

	// wake is signalled (never blocking) by NOTIFY, by Wake, by recorded results and at
	// start.
	wake chan struct{}
	// sinkDown is what this dispatcher last learnt of the sink: set when its results
	// found it down, cleared when a claim got rows (the claim skips a down sink). Rows
	// already claimed go back unsent while it is set, so only the probe reaches the sink.
	sinkDown atomic.Bool
}

// NewDispatcher returns a dispatcher for opts (zero knobs take their defaults). Options
// are checked by Run.
func NewDispatcher(pool *pgxpool.Pool, opts Options) *Dispatcher {
	opts = opts.withDefaults()
	d := &Dispatcher{
		pool:         pool,
		housekeeping: pool,
		opts:         opts,
		q:            newQueries(opts.Tables, opts.Ordering),
		sq:           newSinkQueries(opts.Tables),
		wake:         make(chan struct{}, 1),
	}
	if opts.Housekeeping != nil {
		d.housekeeping = opts.Housekeeping
	}
	d.client = d.newHTTPClient()
	return d
}

// Run delivers until ctx ends, then stops claiming, waits up to ShutdownGrace for the
// deliveries in flight, releases the leases of rows it did not finish and returns nil.
// It returns an error only for unusable options.
func (d *Dispatcher) Run(ctx context.Context) error {
	if err := d.opts.validate(); err != nil {
		return err
	}
	if d.opts.SigningKey != "" {
		key, err := signature.DecodeWhsec(d.opts.SigningKey)
		if err != nil {
			return fmt.Errorf("delivery signing key: %w", err)
		}
		d.signingKey = key
	}
	log := d.opts.Logger.WithValues("endpoint", d.opts.Endpoint)
	log.Info("dispatcher started", "ordering", d.opts.Ordering, "concurrency", d.opts.Concurrency)

	// Side loops end with ctx.
	var side sync.WaitGroup
	// Woken by NOTIFY: through the process's shared Listener, or a Listener of its own
	// on the pool's database.
	listener := d.opts.Listener
	if listener == nil {
		listener = newListener(d.pool.Config().ConnConfig.Copy(), log)
		side.Go(func() { _ = listener.Run(ctx) })
	}
	defer listener.subscribe(d.opts.Endpoint, d.signal)()
	side.Go(func() { d.refreshGauges(ctx) })

	// Deliveries outlive ctx by the shutdown grace, then hard cuts them off. Recording
	// outlives them by another grace, so abandoned rows get their leases released.
	hard, stopHard := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHard()
	recordCtx, stopRecording := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRecording()

	// Up to 2*Concurrency rows are held: Concurrency in flight and as many claimed
	// ahead, so claims come in batches of at least Concurrency rows instead of one
	// statement per finished delivery.
	maxHeld := 2 * d.opts.Concurrency
	results := make(chan rowResult, maxHeld)
	freed := make(chan int, maxHeld)
	work := make(chan row, maxHeld)
	recorderDone := make(chan struct{})
	go func() {
		defer close(recorderDone)
		d.recordLoop(recordCtx, results, freed)
	}()
	var workers sync.WaitGroup
	for range d.opts.Concurrency {
		workers.Go(func() {
			for r := range work {
				results <- d.deliver(ctx, hard, r)
			}
		})
	}

	d.claimLoop(ctx, work, freed, maxHeld)

	// Shutdown: no more claims. Rows still queued come back unsent; wait for the
	// deliveries in flight, then cut them off.
	close(work)
	drained := make(chan struct{})
	go func() { workers.Wait(); close(drained) }()
	grace := time.NewTimer(d.opts.ShutdownGrace)
	select {
	case <-drained:
	case <-grace.C:
		log.Info("shutdown grace over: abandoning deliveries in flight", "grace", d.opts.ShutdownGrace)
		stopHard()
		<-drained
	}
	grace.Stop()
	close(results)
	// The recorder flushes what it has; after the grace it gets a short last chance.
	finalTimer := time.AfterFunc(max(d.opts.ShutdownGrace, 5*time.Second), stopRecording)
	<-recorderDone
	finalTimer.Stop()
	side.Wait()
	log.Info("dispatcher stopped")
	return nil
}

// claimLoop claims rows into the work queue until ctx ends. It claims when woken
// (NOTIFY, recorded results, a retry falling due, a full batch) or when the poll
// interval passes, and only once at most Concurrency rows are held, topping up to maxHeld.
func (d *Dispatcher) claimLoop(ctx context.Context, work chan<- row, freed <-chan int, maxHeld int) {
	log := d.opts.Logger.WithValues("endpoint", d.opts.Endpoint)
	held := 0
	due := true // claim at start: rows may have been waiting
	// woken: something other than the poll timer asked for the next claim (NOTIFY, Wake,
	// recorded results, a full batch). A claim only the timer asked for, or the one at
	// start, runs on the housekeeping pool: a quiet endpoint's dispatcher opens no session.
	woken := false
	poll := time.NewTimer(d.opts.PollInterval)
	defer poll.Stop()
	failures := 0
	// After a claim that found nothing, NOTIFY and poll wake-ups are held back for ten
	// times what the claim took (at most the poll interval). When the backlog is stuck (the sink is
	// down, every head is backing off) a claim scans the blocked rows, and one per
	// NOTIFY would spend the database's CPU on finding nothing.
	var quietUntil time.Time
	sinkRowReady := false
	for {
		if wait := time.Until(quietUntil); due && wait > 0 {
			resetTimer(poll, wait)
			due = false
		}
		if due && held <= d.opts.Concurrency && ctx.Err() == nil {
			limit := min(maxHeld-held, d.opts.BatchSize)
			// The lease runs from the statement's start in the database, which is after
			// this moment: the fence counts from here, not from when the rows arrive.
			began := time.Now()
			leaseEnd := began.Add(d.opts.Lease)
			db := d.pool
			if !woken {
				db = d.housekeeping
			}
			rows, err := d.claim(ctx, db, limit, &sinkRowReady)
			woken = false
			if err == nil && len(rows) == 0 {
				quietUntil = time.Now().Add(min(d.opts.PollInterval, 10*time.Since(began)))
			}
			switch {
			case err != nil && ctx.Err() != nil:
				return
			case err != nil:
				failures++
				if failures == 1 || failures%60 == 0 {
					log.Error(err, "claim failed; retrying at the poll interval", "failures", failures)
				}
				due = false
			default:
				failures = 0
				for _, r := range rows {
					r.leaseEnd = leaseEnd
					held++
					work <- r
				}
				// A full batch means more may be due right away (a probe is never full).
				due = len(rows) == limit && (len(rows) != 1 || !rows[0].probe)
				woken = due
			}
			if !due {
				resetTimer(poll, d.opts.PollInterval)
			}
		}
		select {
		case <-ctx.Done():
			return
		case n := <-freed:
			// Our own results may unblock rows (the next of an entity), and they come
			// no faster than deliveries: claim now.
			held -= n
			due, woken = true, true
			quietUntil = time.Time{}
		case <-d.wake:
			due, woken = true, true
		case <-poll.C:
			due = true
		}
	}
}

// claim leases up to limit due rows on db. Nothing is claimed while the sink is down;
// when a claim finds nothing, this dispatcher may take the one probe (sink.go). The
// sink's row is created before the first claim (ready records that it exists).
func (d *Dispatcher) claim(ctx context.Context, db *pgxpool.Pool, limit int, ready *bool) ([]row, error) {
	if !*ready {
		if _, err := db.Exec(ctx, d.sq.ensure, d.opts.Endpoint); err != nil {
			return nil, fmt.Errorf("create the sink state: %w", err)
		}
		*ready = true
	}
	rows, err := d.q.claimRows(ctx, db, d.opts.Endpoint, limit, d.opts.Lease, false)
	if err != nil {
		return nil, err
	}
	if len(rows) > 0 {
		d.sinkDown.Store(false)
		return rows, nil
	}
	return d.claimProbe(ctx, db)
}

// deliver makes one attempt at r and decides what becomes of it. stop is the run
// context (ended at shutdown), hard the one that cuts requests off after the grace.
func (d *Dispatcher) deliver(stop, hard context.Context, r row) rowResult {
	res := rowResult{ID: r.ID, Attempt: r.Attempt, Lease: r.Lease, Probe: r.probe}
	// A row whose lease could end during the attempt (its claim was slow, or it waited
	// in the queue) goes back unsent rather than risk a concurrent second delivery by
	// the dispatcher that claims it next. So does a row claimed before this dispatcher
	// learnt that the sink is down, unless it is the probe.
	fence := r.leaseEnd.Add(-leaseMargin)
	if stop.Err() != nil || time.Until(fence) < d.opts.Timeout || (d.sinkDown.Load() && !r.probe) {
		res.Result, res.Done = resultUnsent, time.Now()
		return res
	}
	// The request is also cut off at the fence, whatever the timeout says: past the
	// lease's end another dispatcher may already be posting the same row.
	postCtx, cancel := context.WithDeadline(hard, fence)
	a := d.post(postCtx, r)
	cancel()
	res.Done = time.Now()
	switch {
	case a.err == nil && a.status >= 200 && a.status < 300:
		res.Result = resultDelivered
	case hard.Err() != nil && a.sent:
		res.Result = resultAbandoned
	case hard.Err() != nil:
		res.Result = resultUnsent
	case a.err == nil && a.status == http.StatusGone:
		// The sink says this will never be accepted: retrying cannot help.
		res.Result, res.Error = resultDead, d.describe(a)
	case r.Attempt >= d.opts.MaxAttempts:
		// Unless the sink is down by the time this is recorded: then the attempt does
		// not count and the row stays (sql.go, record).
		res.Result, res.Error, res.Unavailable = resultDead, d.describe(a), a.unavailable()
		res.RetryAfter = a.retryAfter
	default:
		res.Result, res.Error, res.Unavailable = resultRetry, d.describe(a), a.unavailable()
		res.Delay, res.RetryAfter = d.backoff(r.Attempt, a.retryAfter), a.retryAfter
	}
	return res
}

// recordLoop writes results in batches (whatever arrived while the previous write ran)
// and frees their slots. On a database error it keeps the batch and retries: the rows
// stay leased meanwhile, and the fence discards a result whose lease another
// dispatcher took over.
func (d *Dispatcher) recordLoop(ctx context.Context, results <-chan rowResult, freed chan<- int) {
	log := d.opts.Logger.WithValues("endpoint", d.opts.Endpoint)
	var batch []rowResult
	retry := time.Duration(0)
	for {
		if len(batch) == 0 {
			r, ok := <-results
			if !ok {
				return
			}
			batch = append(batch, r)
		}
	drain:
		for len(batch) < maxRecordBatch {
			select {
			case r, ok := <-results:
				if !ok {
					break drain
				}
				batch = append(batch, r)
			default:
				break drain
			}
		}
		recordedRows, change, err := d.q.recordResults(ctx, d.pool, d.opts.Endpoint, batch, d.opts.SinkDownAfter, d.opts.BackoffInitial)
		if err != nil {
			if ctx.Err() != nil {
				log.Info("shutdown: results not recorded; their rows are re-delivered after the lease", "rows", len(batch), "error", err.Error())
				freed <- len(batch)
				// Anything still queued is lost the same way; keep draining so workers finish.
				n := 0
				for range results {
					n++
				}
				if n > 0 {
					freed <- n
				}
				return
			}
			retry = min(max(2*retry, 100*time.Millisecond), 5*time.Second)
			log.Error(err, "recording delivery results failed; retrying", "rows", len(batch), "in", retry)
			select {
			case <-time.After(retry):
			case <-ctx.Done():
			}
			continue
		}
		retry = 0
		d.observe(batch, recordedRows, change.Down)
		d.sinkDown.Store(change.Down)
		d.sinkChanged(ctx, change)
		for _, r := range batch {
			// A retry due before the next poll would otherwise wait for it (while the
			// sink is down, rows wait for the probe instead).
			if r.Result == resultRetry && r.Delay < d.opts.PollInterval && !change.Down {
				time.AfterFunc(r.Delay, d.signal)
			}
		}
		freed <- len(batch)
		batch = batch[:0]
	}
}

// observe updates the delivery metrics for a recorded batch. sinkDown is the sink's
// state after it: a failure on the last attempt then was not a death (sql.go, record).
func (d *Dispatcher) observe(batch []rowResult, accepted []recorded, sinkDown bool) {
	ep := d.opts.Endpoint
	age := make(map[int64]float64, len(accepted))
	for _, r := range accepted {
		age[r.ID] = r.AgeSeconds
	}
	for _, r := range batch {
		if r.Result == resultDead && r.Unavailable && sinkDown {
			r.Result = resultRetry
		}
		switch r.Result {
		case resultDelivered, resultRetry, resultDead:
			metrics.Deliveries.WithLabelValues(ep, string(r.Result)).Inc()
		default:
			continue
		}
		a, ok := age[r.ID]
		if !ok || r.Result == resultRetry {
			continue
		}
		metrics.DeliveryAttempts.WithLabelValues(ep).Observe(float64(r.Attempt))
		if r.Result == resultDelivered {
			// The age at record time less the local wait between the 2xx and the record.
			metrics.CommitToDelivery.WithLabelValues(ep).Observe(max(0, a-time.Since(r.Done).Seconds()))
		}
	}
}

// Wake asks the dispatcher to claim now, for example right after a transaction in the
// same process committed outbox rows. It never blocks, and wake-ups that arrive before
// the next claim fold into one.
func (d *Dispatcher) Wake() { d.signal() }

// signal wakes the claim loop without blocking.
func (d *Dispatcher) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	select {
	case <-t.C:
	default:
	}
	t.Reset(d)
}
