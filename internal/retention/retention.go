// Package retention bounds what an endpoint keeps (spec.retention) and erases an
// entity's stored data on request.
//
// Three kinds of data age out, each on its own clock (docs/operations.md, "Retention"):
//
//   - a receipt's payload and headers, payloadFor after it was received: the row stays
//     as the dedupe record, so a late redelivery is still a duplicate;
//   - the dedupe record itself, dedupeFor after it was received;
//   - a delivered outbox row, deliveredFor after it was created and delivered.
//
// Parked receipts (they still need their payload to apply) and outbox rows that were
// not delivered (pending, dead-lettered, discarded) are never pruned.
//
// Every receiver pod runs the pruner; a session advisory lock lets one replica at a
// time prune an endpoint. It works in small batches, each its own short transaction
// that skips rows a receipt transaction holds, with a pause between batches, so the
// receivers' latency stays flat while it runs. Rows are removed by batched statements
// rather than by dropping time partitions: the dedupe key (endpoint, event_id) must be
// unique across all time, and a partitioned table's unique key must include the
// partition key.
package retention

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/periodic"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// Defaults of the pruner; the retention windows themselves are spec.retention's
// (api/v1alpha1 defaults them).
const (
	// DefaultInterval is how often a receiver prunes.
	DefaultInterval = 10 * time.Minute
	// DefaultBatchSize is how many rows one pruning statement touches.
	DefaultBatchSize = 500
	// DefaultPause is the pause between two batches, which leaves the database to the
	// receivers.
	DefaultPause = 20 * time.Millisecond
)

// Policy is how long an endpoint keeps each kind of data; zero keeps it forever.
type Policy struct {
	PayloadFor, DedupeFor, DeliveredFor time.Duration
}

// PolicyOf reads spec.retention of a compiled endpoint (defaulted by config).
func PolicyOf(ep *config.Endpoint) Policy {
	r := ep.Spec.Retention
	var p Policy
	if r.PayloadFor != nil {
		p.PayloadFor = r.PayloadFor.Duration
	}
	if r.DedupeFor != nil {
		p.DedupeFor = r.DedupeFor.Duration
	}
	if r.DeliveredFor != nil {
		p.DeliveredFor = r.DeliveredFor.Duration
	}
	return p
}

// Options shape a pruner.
type Options struct {
	// Endpoint is the endpoint key ("namespace/name"); required.
	Endpoint string
	// Tables are the endpoint's tables; required.
	Tables store.Tables
	// Policy is what to prune.
	Policy Policy
	// Interval between runs; DefaultInterval when zero.
	Interval time.Duration
	// BatchSize rows per statement; DefaultBatchSize when zero.
	BatchSize int
	// Pause between batches; DefaultPause when zero, none when negative.
	Pause time.Duration
	// Now is the clock; time.Now when nil. Tests move it forward.
	Now func() time.Time
	// Logger receives one line per run that removed something.
	Logger logr.Logger
}

func (o Options) interval() time.Duration {
	if o.Interval > 0 {
		return o.Interval
	}
	return DefaultInterval
}

func (o Options) batch() int {
	if o.BatchSize > 0 {
		return o.BatchSize
	}
	return DefaultBatchSize
}

func (o Options) pause() time.Duration {
	switch {
	case o.Pause < 0:
		return 0
	case o.Pause == 0:
		return DefaultPause
	}
	return o.Pause
}

func (o Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// Report counts what one run removed.
type Report struct {
	// Payloads are receipts whose payload and headers were removed.
	Payloads int64
	// Receipts are dedupe records deleted.
	Receipts int64
	// Deliveries are delivered outbox rows deleted.
	Deliveries int64
	// Batches is the number of statements that removed something.
	Batches int
	// Skipped is true when another replica was pruning this endpoint.
	Skipped bool
	// Took is how long the run lasted.
	Took time.Duration
}

// Removed is the number of rows the run changed.
func (r Report) Removed() int64 { return r.Payloads + r.Receipts + r.Deliveries }

// Prune runs once: it removes what the policy says is too old, batch by batch, unless
// another replica holds the endpoint's retention lock (Report.Skipped).
func Prune(ctx context.Context, pool *pgxpool.Pool, o Options) (Report, error) {
	if o.Endpoint == "" {
		return Report{}, errors.New("prune: endpoint key is empty")
	}
	start := time.Now()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("prune %s: acquire a connection: %w", o.Endpoint, err)
	}
	defer conn.Release()

	lockKey := "hookkeeper.retention " + o.Tables.Schema + " " + o.Endpoint
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, lockKey).Scan(&locked); err != nil {
		return Report{}, fmt.Errorf("prune %s: take the retention lock: %w", o.Endpoint, err)
	}
	if !locked {
		return Report{Skipped: true, Took: time.Since(start)}, nil
	}
	defer func() {
		// A fresh context: the lock must go even when ctx was cancelled mid-run.
		unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(unlockCtx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, lockKey); err != nil {
			// A lock that could not be released goes with the connection.
			_ = conn.Conn().Close(unlockCtx)
		}
	}()

	var rep Report
	now := o.now()
	q := queriesFor(o.Tables)
	steps := []struct {
		what   string
		keep   time.Duration
		before string // the statement finding the first id too young to prune ("" when not needed)
		prune  string
		count  *int64
	}{
		{"payloads", o.Policy.PayloadFor, "", q.prunePayloads, &rep.Payloads},
		{"dedupe records", o.Policy.DedupeFor, q.firstYoungReceipt, q.pruneReceipts, &rep.Receipts},
		{"delivered outbox rows", o.Policy.DeliveredFor, q.firstYoungDelivery, q.pruneDeliveries, &rep.Deliveries},
	}
	for _, s := range steps {
		if s.keep <= 0 {
			continue // kept forever
		}
		args := pgx.NamedArgs{"endpoint": o.Endpoint, "cutoff": now.Add(-s.keep), "limit": o.batch()}
		if s.before != "" {
			var before int64
			b, first := store.OnIndexes(s.before, args)
			first.QueryRow(func(row pgx.Row) error { return row.Scan(&before) })
			if err := conn.SendBatch(ctx, b).Close(); err != nil {
				return rep, fmt.Errorf("prune %s of %s: %w", s.what, o.Endpoint, err)
			}
			args["before"] = before
		}
		for {
			var n int64
			b, prune := store.OnIndexes(s.prune, args)
			prune.Exec(func(tag pgconn.CommandTag) error {
				n = tag.RowsAffected()
				return nil
			})
			if err := conn.SendBatch(ctx, b).Close(); err != nil {
				return rep, fmt.Errorf("prune %s of %s: %w", s.what, o.Endpoint, err)
			}
			*s.count += n
			if n == 0 {
				break
			}
			rep.Batches++
			if n < int64(o.batch()) {
				break
			}
			if err := pause(ctx, o.pause()); err != nil {
				return rep, err
			}
		}
	}
	rep.Took = time.Since(start)
	return rep, nil
}

// Run prunes now and then every Interval until ctx ends, handing each run's report (or
// error: the next run tries again) to report.
func Run(ctx context.Context, pool *pgxpool.Pool, o Options, report func(Report, error)) error {
	return periodic.Run(ctx, o.interval(), func(ctx context.Context) (Report, error) {
		return Prune(ctx, pool, o)
	}, report)
}

func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
