package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookkeeper/hookkeeper/internal/metrics"
	"github.com/hookkeeper/hookkeeper/internal/periodic"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// Backlog is the state of one endpoint's outbox.
type Backlog struct {
	// Pending rows are neither delivered nor dead.
	Pending int64
	// OldestPendingAge is the age of the oldest pending row, zero when none.
	OldestPendingAge time.Duration
	// Dead rows were dead-lettered and not discarded.
	Dead int64
	// SinkDown: the dispatchers hold deliveries because the sink is down (sink.go).
	SinkDown bool
}

// Backlog reads the endpoint's backlog from the database (on the housekeeping pool).
func (d *Dispatcher) Backlog(ctx context.Context) (Backlog, error) {
	return readBacklog(ctx, d.housekeeping, d.q.gauges, d.opts.Endpoint)
}

// readBacklog runs backlogQuery.
func readBacklog(ctx context.Context, db querier, query, endpoint string) (Backlog, error) {
	var b Backlog
	var age float64
	batch, backlog := store.OnIndexes(query, endpoint)
	backlog.QueryRow(func(r pgx.Row) error { return r.Scan(&b.Pending, &age, &b.Dead, &b.SinkDown) })
	if err := db.SendBatch(ctx, batch).Close(); err != nil {
		return Backlog{}, fmt.Errorf("read outbox backlog: %w", err)
	}
	b.OldestPendingAge = time.Duration(age * float64(time.Second))
	return b, nil
}

// refreshGauges publishes the backlog gauges every GaugeInterval until ctx ends.
func (d *Dispatcher) refreshGauges(ctx context.Context) {
	log := d.opts.Logger.WithValues("endpoint", d.opts.Endpoint)
	ep := d.opts.Endpoint
	_ = periodic.Run(ctx, d.opts.GaugeInterval, d.Backlog, func(b Backlog, err error) {
		if err != nil {
			log.Error(err, "reading the outbox backlog failed")
			return
		}
		metrics.OutboxBacklog.WithLabelValues(ep).Set(float64(b.Pending))
		metrics.OutboxOldestAge.WithLabelValues(ep).Set(b.OldestPendingAge.Seconds())
		metrics.OutboxDead.WithLabelValues(ep).Set(float64(b.Dead))
		down := 0.0
		if b.SinkDown {
			down = 1
		}
		metrics.SinkDown.WithLabelValues(ep).Set(down)
	})
}
