package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// row is one claimed outbox row.
type row struct {
	ID            int64
	DedupeKey     string
	EntityKey     string
	EventType     string
	SourceEventID string
	Payload       json.RawMessage
	OccurredAt    *time.Time
	CreatedAt     time.Time
	// Attempt is the attempts column after the claim: this attempt's number.
	Attempt int
	// Lease is lease_until as the claim set it: the fence its result is recorded under.
	// Attempt numbers repeat (an attempt given back while the sink is down, a re-driven
	// dead letter starting again at 1); a claim's lease_until never does, so a late
	// worker whose lease ended cannot record over a newer claim of the row.
	Lease time.Time
	// leaseEnd is, by this process's monotonic clock, a time no later than the end of
	// the lease the claim took: the claim statement computes lease_until from its
	// transaction's start, which comes after the moment the claim was sent, so the
	// lease's length counted from that moment never overshoots, however long the
	// statement waited (a lock, a slow network, a paused process) before it returned.
	leaseEnd time.Time
	// probe: the row was claimed to probe a down sink.
	probe bool
}

// result is what became of one claimed row; its value is the result label of
// hookkeeper_outbox_deliveries_total for delivered, retry and dead.
type result string

const (
	// resultDelivered: the sink answered 2xx.
	resultDelivered result = "delivered"
	// resultRetry: a failure with attempts left; the row is due again after a delay.
	resultRetry result = "retry"
	// resultDead: a 410, or a failure on the last attempt.
	resultDead result = "dead"
	// resultUnsent: shutdown came before the request was sent; the claim is undone.
	resultUnsent result = "unsent"
	// resultAbandoned: the request was sent but shutdown cut it off; the lease is
	// released so another dispatcher retries now, and the attempt still counts.
	resultAbandoned result = "abandoned"
)

// rowResult is what became of one row, recorded fenced on the claim's lease.
type rowResult struct {
	ID      int64
	Attempt int
	// Lease is the claim's lease_until (row.Lease), the fence.
	Lease  time.Time
	Result result
	// Delay before the row is due again (resultRetry).
	Delay time.Duration
	// RetryAfter is the sink's Retry-After, zero when it sent none. A row is never due
	// again before it, even when its attempt is given back because the sink is down.
	RetryAfter time.Duration
	// Error is a short, secret-free description of the failure.
	Error string
	// Done is when the attempt finished; with the database's age of the row at record
	// time it yields commit-to-delivery without comparing two machines' clocks.
	Done time.Time
	// Unavailable: the sink gave no answer or one that means "not now" (sink.go).
	Unavailable bool
	// Probe: the attempt probed a down sink.
	Probe bool
}

// queries holds the dispatcher's SQL for one schema.
type queries struct {
	claim  string
	record string
	gauges string
}

func newQueries(tables store.Tables, ordering v1alpha1.Ordering) queries {
	outboxTable := tables.Outbox
	// Only the head of each entity's queue is a candidate under PerEntity: a row is
	// claimable when it is the first undelivered, not dead row of its entity, and that
	// earlier row stays so while it is leased. So two dispatchers (or one batch) never
	// hold two rows of one entity, and the next row becomes claimable only after the
	// previous one's result commits. SKIP LOCKED keeps concurrent claims from waiting
	// on each other; a row claimed and committed meanwhile fails the lease check on
	// re-evaluation.
	perEntity := ""
	if ordering == v1alpha1.OrderingPerEntity {
		// "The entity's first pending row is this one", a scalar subquery in id order,
		// stays a per-row probe of outbox_entity_pending_idx on (endpoint, entity_key,
		// id): the only index that returns an entity's rows in id order, so the LIMIT 1
		// reads one entry. Written as NOT EXISTS, the planner made it an anti join that
		// read the whole backlog for every candidate on a table it had no statistics for
		// yet; written as "no earlier pending row" (p.id < o.id), the generic plan made
		// on a small table scanned the table (or all of outbox_due_idx) per candidate
		// (TestPerEntityClaimProbesTheEntityIndex).
		perEntity = fmt.Sprintf(`
	  AND (SELECT p.id FROM %[1]s p
	       WHERE p.endpoint = o.endpoint AND p.entity_key = o.entity_key
	         AND p.delivered_at IS NULL AND p.dead_at IS NULL
	       ORDER BY p.id LIMIT 1) = o.id`, outboxTable)
	}
	return queries{
		// While the sink is down ($4 false) nothing is claimed: the uncorrelated
		// sub-select is evaluated once, before any outbox row is read. A probe ($4 true)
		// claims regardless (sink.go).
		claim: fmt.Sprintf(`
WITH async AS (SELECT %[3]s),
due AS (
	SELECT o.id FROM %[1]s o
	WHERE o.endpoint = $1 AND o.delivered_at IS NULL AND o.dead_at IS NULL
	  AND o.available_at <= now()
	  AND (o.lease_until IS NULL OR o.lease_until <= now())%[2]s
	  AND ($4 OR NOT EXISTS (SELECT 1 FROM %[4]s s WHERE s.endpoint = $1 AND s.down_since IS NOT NULL))
	ORDER BY o.available_at, o.id
	LIMIT $2
	FOR UPDATE OF o SKIP LOCKED
)
UPDATE %[1]s o
SET lease_until = now() + $3 * interval '1 microsecond', attempts = o.attempts + 1
FROM due, async WHERE o.id = due.id
RETURNING o.id, o.dedupe_key, o.entity_key, o.event_type, o.source_event_id, o.payload,
	o.occurred_at, o.created_at, o.attempts, o.lease_until`, outboxTable, perEntity, asyncCommit, tables.SinkState),

		// One statement records a batch of results and what they say of the sink. Each
		// row is fenced on the lease it was claimed with (row.Lease) and on not being
		// delivered, so a late worker whose lease expired cannot overwrite a newer
		// claim's result, and a result is recorded at most once. An unavailable answer
		// recorded while the sink is down (after this batch) gives the attempt back and
		// never dead-letters the row; the row goes behind every row already due (and is
		// not due before the sink's Retry-After), so the next probe takes another row and
		// one row the sink always fails (a 500 on one payload) cannot hold the outage
		// open while the sink takes every other row. not_before keeps the sink's
		// Retry-After for the end of an outage (sink.go, resume).
		record: fmt.Sprintf(`
WITH async AS (SELECT %[2]s),%[3]s,
held AS (SELECT COALESCE((SELECT down FROM sink), false) AS down),
upd AS (
	UPDATE %[1]s o SET
		lease_until  = NULL,
		attempts     = CASE WHEN r.result = 'unsent' OR (r.unavailable AND held.down) THEN o.attempts - 1 ELSE o.attempts END,
		delivered_at = CASE WHEN r.result = 'delivered' THEN now() END,
		dead_at      = CASE WHEN r.result = 'dead' AND NOT (r.unavailable AND held.down) THEN now() ELSE o.dead_at END,
		available_at = CASE WHEN r.unavailable AND held.down
		                    THEN GREATEST(o.available_at, now() + r.retry_after_us * interval '1 microsecond')
		                    WHEN r.result = 'retry' THEN now() + r.delay_us * interval '1 microsecond'
		                    ELSE o.available_at END,
		last_error   = CASE WHEN r.result IN ('retry', 'dead') THEN r.err ELSE o.last_error END,
		not_before   = CASE WHEN r.retry_after_us > 0 THEN now() + r.retry_after_us * interval '1 microsecond' END
	FROM unnest($1::bigint[], $2::int[], $3::text[], $4::bigint[], $5::text[], $7::bool[], $14::timestamptz[], $15::bigint[])
		AS r(id, attempt, result, delay_us, err, unavailable, lease, retry_after_us), async, held
	WHERE o.id = r.id AND o.endpoint = $6 AND o.attempts = r.attempt AND o.lease_until = r.lease
	  AND o.delivered_at IS NULL
	RETURNING o.id, extract(epoch FROM now() - o.created_at)::float8 AS age
)
SELECT COALESCE((SELECT array_agg(id) FROM upd), '{}'), COALESCE((SELECT array_agg(age) FROM upd), '{}'),
	COALESCE((SELECT down FROM sink), false), COALESCE((SELECT opened FROM sink), false),
	COALESCE((SELECT recovered FROM sink), false)`, outboxTable, asyncCommit, sinkStateUpdate(tables.SinkState)),

		gauges: backlogQuery(tables),
	}
}

// backlogQuery reads an endpoint's pending rows, the age of the oldest, its dead letters
// that were not discarded, and whether its sink is down.
func backlogQuery(tables store.Tables) string {
	return fmt.Sprintf(`
SELECT
	(SELECT count(*) FROM %[1]s WHERE endpoint = $1 AND delivered_at IS NULL AND dead_at IS NULL),
	(SELECT COALESCE(extract(epoch FROM now() - min(created_at)), 0)::float8 FROM %[1]s
	   WHERE endpoint = $1 AND delivered_at IS NULL AND dead_at IS NULL),
	(SELECT count(*) FROM %[1]s WHERE endpoint = $1 AND dead_at IS NOT NULL AND discarded_at IS NULL),
	EXISTS (SELECT 1 FROM %[2]s WHERE endpoint = $1 AND down_since IS NOT NULL)`, tables.Outbox, tables.SinkState)
}

// asyncCommit turns synchronous_commit off for the statement's own (implicit)
// transaction; the setting is read when it commits. The dispatcher's writes are leases
// and results, and losing the last few hundred milliseconds of them to a PostgreSQL
// crash only repeats work the contract already allows to repeat: a claim lost means the
// row is claimed again (a repeat delivery with the same key), a result lost means it is
// delivered or retried again. Not waiting for the WAL flush takes two fsyncs off every
// delivery's path. The receiver's transaction, which must be durable before its 2xx,
// is untouched: the setting is local to these statements.
const asyncCommit = `set_config('synchronous_commit', 'off', true)`

// querier is what the dispatcher needs of a pool or connection.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// claim leases up to limit due rows and returns them with their attempt numbers.
// A probe claims while the sink is down.
func (q queries) claimRows(ctx context.Context, db querier, endpoint string, limit int, lease time.Duration, probe bool) ([]row, error) {
	var claimed []row
	b, claim := store.OnIndexes(q.claim, endpoint, limit, lease.Microseconds(), probe)
	claim.Query(func(rows pgx.Rows) error {
		var err error
		claimed, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var x row
			err := r.Scan(&x.ID, &x.DedupeKey, &x.EntityKey, &x.EventType, &x.SourceEventID, &x.Payload,
				&x.OccurredAt, &x.CreatedAt, &x.Attempt, &x.Lease)
			return x, err
		})
		return err
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("claim outbox rows: %w", err)
	}
	return claimed, nil
}

// recorded is a row whose result the fence accepted.
type recorded struct {
	ID int64
	// AgeSeconds is the row's age (now - created_at) when the result was recorded.
	AgeSeconds float64
}

// recordResults writes a batch of results and what they say of the sink (downAfter is
// Options.SinkDownAfter, probeFirst the delay before the first probe), and returns the
// rows the fence accepted and the sink's state.
func (q queries) recordResults(ctx context.Context, db querier, endpoint string, results []rowResult, downAfter int, probeFirst time.Duration) ([]recorded, sinkChange, error) {
	ids := make([]int64, len(results))
	attempts := make([]int32, len(results))
	resultNames := make([]string, len(results))
	delays := make([]int64, len(results))
	errs := make([]string, len(results))
	unavailable := make([]bool, len(results))
	leases := make([]time.Time, len(results))
	retryAfter := make([]int64, len(results))
	for i, r := range results {
		leases[i], retryAfter[i] = r.Lease, r.RetryAfter.Microseconds()
		ids[i], attempts[i], resultNames[i] = r.ID, int32(r.Attempt), string(r.Result) //nolint:gosec // attempts are bounded by maxAttempts (<= 100) plus crash retries
		delays[i], errs[i], unavailable[i] = r.Delay.Microseconds(), r.Error, r.Unavailable
	}
	t := tally(results)
	var (
		accepted []int64
		ages     []float64
		change   sinkChange
	)
	b, record := store.OnIndexes(q.record, ids, attempts, resultNames, delays, errs, endpoint, unavailable,
		t.answered, t.trailing, t.lastError, t.probe, downAfter, probeFirst.Microseconds(), leases, retryAfter)
	record.QueryRow(func(r pgx.Row) error {
		return r.Scan(&accepted, &ages, &change.Down, &change.Opened, &change.Recovered)
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, sinkChange{}, fmt.Errorf("record delivery results: %w", err)
	}
	out := make([]recorded, len(accepted))
	for i := range accepted {
		out[i] = recorded{ID: accepted[i], AgeSeconds: ages[i]}
	}
	return out, change, nil
}
