package receipt

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookkeeper/hookkeeper/internal/periodic"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// Parking's deadline
//
// A parked event waits for its entity for spec.stateMachine.parkFor. ExpireParked closes
// older ones as expired: one transaction per entity, holding the entity's lock like
// every receipt transaction, so an event is never expired by one transaction while
// another releases it. RunParking does it periodically and reports what it saw.

// ParkingReport is what one round of RunParking saw.
type ParkingReport struct {
	// Parked is how many events are parked now; OldestAge is the oldest one's age.
	Parked    int64
	OldestAge time.Duration
	// Expired is how many events this round expired.
	Expired int64
}

// expireBatch is the most entities one ExpireParked call visits.
const expireBatch = 500

// ExpireParked closes as expired every parked event received longer than parkFor ago,
// up to expireBatch entities, and returns how many events it expired.
func (r *Recorder) ExpireParked(ctx context.Context) (int64, error) {
	q := rewrite(r.sql.expirable)
	args, err := q.bind(pgx.NamedArgs{"endpoint": r.key, "park_for_seconds": r.parkFor.Seconds(), "limit": expireBatch})
	if err != nil {
		return 0, err
	}
	var keys []string
	b, list := store.OnIndexes(q.sql, args...)
	list.Query(func(rows pgx.Rows) (err error) {
		keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err := r.housekeeping.SendBatch(ctx, b).Close(); err != nil {
		return 0, fmt.Errorf("list expired parked events: %w", err)
	}
	detail := fmt.Sprintf("parked for longer than stateMachine.parkFor (%s)", r.parkFor)
	var total int64
	for _, key := range keys {
		var n int64
		err := r.inTx(ctx, func(tx *pipelinedTx) error {
			args := r.entityArgs(key)
			args["park_for_seconds"], args["detail"] = r.parkFor.Seconds(), detail
			tx.queue(step{sql: r.sql.lockExisting, args: args, read: func(br pgx.BatchResults) error {
				rows, err := br.Query()
				if err != nil {
					return err
				}
				rows.Close()
				return rows.Err()
			}}, step{sql: r.sql.expire, args: args, write: true, read: func(br pgx.BatchResults) error {
				tag, err := br.Exec()
				n = tag.RowsAffected()
				return err
			}})
			return nil
		})
		if err != nil {
			return total, fmt.Errorf("expire parked events of entity %s: %w", key, err)
		}
		total += n
	}
	return total, nil
}

// ParkedStats counts the endpoint's parked events and the oldest one's age.
func (r *Recorder) ParkedStats(ctx context.Context) (n int64, oldest time.Duration, err error) {
	var secs float64
	q := rewrite(r.sql.parkedStats)
	args, err := q.bind(pgx.NamedArgs{"endpoint": r.key})
	if err != nil {
		return 0, 0, err
	}
	b, count := store.OnIndexes(q.sql, args...)
	count.QueryRow(func(row pgx.Row) error { return row.Scan(&n, &secs) })
	if err := r.housekeeping.SendBatch(ctx, b).Close(); err != nil {
		return 0, 0, fmt.Errorf("count parked events: %w", err)
	}
	return n, time.Duration(secs * float64(time.Second)), nil
}

// RunParking expires parked events and reports the parked backlog every interval until
// ctx ends. Errors are reported through report's err and the loop goes on.
func (r *Recorder) RunParking(ctx context.Context, interval time.Duration, report func(ParkingReport, error)) error {
	return periodic.Run(ctx, interval, func(ctx context.Context) (rep ParkingReport, err error) {
		if rep.Expired, err = r.ExpireParked(ctx); err == nil {
			rep.Parked, rep.OldestAge, err = r.ParkedStats(ctx)
		}
		return rep, err
	}, report)
}
