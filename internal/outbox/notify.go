package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// notifyTimeout bounds one NOTIFY; a wake-up that cannot be sent in time is left to the
// dispatchers' polling.
const notifyTimeout = 5 * time.Second

// DefaultNotifySpacing is the least time between two NOTIFYs of one Notifier. Under load
// every request wants a wake-up; one transaction per request only for that would cost
// the database about as many commits again. A woken dispatcher claims everything due,
// so one NOTIFY per spacing wakes the other replicas as well, at most this much later.
const DefaultNotifySpacing = 10 * time.Millisecond

// Notify sends NOTIFY on NotifyChannel with endpoint as the payload, in a transaction of
// its own with asynchronous commit. Call it after the transaction that wrote outbox rows
// has committed: a NOTIFY queued inside that transaction would hold PostgreSQL's
// database-wide notify-queue lock across its commit flush, serialising all such commits.
// Here the lock is held only for an unflushed commit, and a lost notification costs at
// most a dispatcher's poll interval.
func Notify(ctx context.Context, pool *pgxpool.Pool, endpoint string) error {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SET LOCAL synchronous_commit = off")
	b.Queue("SELECT pg_notify($1, $2)", NotifyChannel, endpoint)
	b.Queue("COMMIT")
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("notify dispatchers of %s: %w", endpoint, err)
	}
	return nil
}

// Notifier sends NOTIFY for one endpoint on behalf of many committing requests, with at
// most one NOTIFY in flight and at least its spacing between two: requests that commit
// in the meantime fold into a single next one. Wake-ups that arrive while it is stopped are dropped; the dispatchers'
// polling covers them.
type Notifier struct {
	pool     *pgxpool.Pool
	endpoint string
	log      logr.Logger
	kick     chan struct{}
	spacing  time.Duration
}

// NewNotifier returns a Notifier for endpoint (the endpoint key, the NOTIFY payload).
func NewNotifier(pool *pgxpool.Pool, endpoint string, log logr.Logger) *Notifier {
	return &Notifier{pool: pool, endpoint: endpoint, log: log, kick: make(chan struct{}, 1), spacing: DefaultNotifySpacing}
}

// Notify asks for one NOTIFY soon. It never blocks.
func (n *Notifier) Notify() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// Run sends the requested notifications until ctx ends, then returns nil.
func (n *Notifier) Run(ctx context.Context) error {
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-n.kick:
		}
		sent := time.Now()
		sendCtx, cancel := context.WithTimeout(ctx, notifyTimeout)
		err := Notify(sendCtx, n.pool, n.endpoint)
		cancel()
		select {
		case <-ctx.Done():
			// Stopping: a failure now is the cancellation, not the database.
			return nil
		default:
		}
		if err == nil {
			failures = 0
		} else {
			failures++
			if failures == 1 || failures%100 == 0 {
				n.log.Error(err, "NOTIFY failed; dispatchers on other replicas wait for their poll", "failures", failures)
			}
		}
		if wait := n.spacing - time.Since(sent); wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
	}
}
