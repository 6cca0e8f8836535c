package outbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/internal/store"
)

// A sink that is down.
//
// The dispatchers of one endpoint share what they know of its sink in one row of
// sink_state, updated by the statement that records their results (sql.go). A failure
// that says the sink is unavailable (no answer, a timeout, a 5xx, 408 or 429) adds one
// to consecutive_failures; any answer (a 2xx, or a 4xx, which is about the row) sets it
// back to zero. At Options.SinkDownAfter the sink is down (down_since is set), and:
//
//   - no dispatcher claims rows: the claim statement skips an endpoint whose sink is down;
//   - one dispatcher at a time, across all replicas, sends one row as a probe: it takes
//     the probe with a conditional UPDATE of the row (next_probe_at has passed and no
//     other probe's lease, probe_until, runs), which also sets the next probe time; the
//     delay doubles from BackoffInitial up to ProbeIntervalMax. A failed probe's row
//     goes behind the rows already due, so the next probe takes the next due row: one
//     row the sink always fails (a 500 on one payload) cannot be the only probe while
//     the sink takes every other row;
//   - a failure recorded while the sink is down does not count against the row's
//     attempts and never dead-letters it, so a sink down for days leaves every row with
//     the budget it had;
//   - the first answer (a probe's, or a request sent before the sink went down) ends the
//     outage: rows held back by their own backoff are made due, the dispatchers are
//     woken, and delivery resumes.
//
// The operator reads the same row (ReadSinkHealth) for the endpoint's SinkHealthy
// condition: receiver pods hold no Kubernetes credentials.

// Defaults of the sink-down knobs.
const (
	// DefaultSinkDownAfter is the number of consecutive unavailable answers after which
	// the sink is down.
	DefaultSinkDownAfter = 5
	// DefaultProbeIntervalMax caps the time between two probes, and so bounds how long
	// after the sink is back delivery resumes: at most this plus one attempt's timeout.
	DefaultProbeIntervalMax = 30 * time.Second
)

// unavailable reports whether an attempt says the sink cannot take deliveries now,
// rather than refusing this row: no answer at all, or a status that means "not now".
func (a attempt) unavailable() bool {
	if a.err != nil {
		return a.sent
	}
	return a.status >= 500 || a.status == http.StatusRequestTimeout || a.status == http.StatusTooManyRequests
}

// sinkChange is what recording a batch did to the sink's state.
type sinkChange struct {
	// Down is the state after the batch.
	Down bool
	// Opened: this batch made the sink down. Recovered: this batch ended an outage.
	Opened, Recovered bool
}

// sinkTally sums a batch for the sink's state, in the order the attempts finished.
type sinkTally struct {
	// answered: some attempt got an answer; trailing failures came after the last one.
	answered  bool
	trailing  int
	lastError string
	probe     bool
}

func tally(batch []rowResult) sinkTally {
	var t sinkTally
	for _, r := range batch {
		t.probe = t.probe || r.Probe
		switch {
		case r.Unavailable:
			t.trailing++
			t.lastError = r.Error
		case r.Result == resultDelivered || r.Result == resultRetry || r.Result == resultDead:
			t.answered, t.trailing = true, 0
		}
	}
	return t
}

// sinkQueries are the statements on sink_state.
type sinkQueries struct {
	ensure, takeProbe, releaseProbe, resume string
}

func newSinkQueries(tables store.Tables) sinkQueries {
	return sinkQueries{
		ensure: fmt.Sprintf(`INSERT INTO %s (endpoint) VALUES ($1) ON CONFLICT (endpoint) DO NOTHING`, tables.SinkState),
		// The delay before the next probe doubles from $3 up to $4 (microseconds).
		takeProbe: fmt.Sprintf(`
UPDATE %s SET probe_until = now() + $2 * interval '1 microsecond', probes = probes + 1,
	next_probe_at = now() + LEAST($4::float8, $3::float8 * power(2, LEAST(probes + 1, 60)))::bigint * interval '1 microsecond',
	updated_at = now()
WHERE endpoint = $1 AND down_since IS NOT NULL AND next_probe_at <= now()
  AND (probe_until IS NULL OR probe_until <= now())
RETURNING probes`, tables.SinkState),
		releaseProbe: fmt.Sprintf(`UPDATE %s SET probe_until = NULL WHERE endpoint = $1`, tables.SinkState),
		// Rows whose own backoff ran into the outage are due as soon as it ends; a row
		// whose last answer carried a Retry-After is not due before it (not_before): the
		// sink said when it can take that row again.
		resume: fmt.Sprintf(`
UPDATE %s SET available_at = GREATEST(now(), not_before)
WHERE endpoint = $1 AND delivered_at IS NULL AND dead_at IS NULL AND available_at > now()`, tables.Outbox),
	}
}

// sinkStateUpdate is the CTE of the record statement that updates sink_state from the
// batch's tally: $6 endpoint, $8 answered, $9 trailing failures, $10 last error, $11 a
// probe's result is in the batch, $12 SinkDownAfter, $13 BackoffInitial (microseconds).
// It writes only when the batch failed, held a probe, or the row counts failures, so a
// healthy sink costs no write. RETURNING reports the state and whether this statement
// changed it (now() is the statement's transaction time).
func sinkStateUpdate(sinkTable string) string {
	n := `(CASE WHEN $8 THEN $9 ELSE s.consecutive_failures + $9 END)`
	return fmt.Sprintf(`
sink AS (
	UPDATE %[1]s s SET
		consecutive_failures = %[2]s,
		failing_since = CASE WHEN %[2]s = 0 THEN NULL
		                     WHEN $8 OR s.failing_since IS NULL THEN now() ELSE s.failing_since END,
		down_since    = CASE WHEN %[2]s >= $12 THEN COALESCE(s.down_since, now()) END,
		recovered_at  = CASE WHEN %[2]s < $12 AND s.down_since IS NOT NULL THEN now() ELSE s.recovered_at END,
		last_error    = CASE WHEN $9 > 0 THEN $10 ELSE s.last_error END,
		probes        = CASE WHEN %[2]s >= $12 THEN s.probes ELSE 0 END,
		next_probe_at = CASE WHEN %[2]s < $12 THEN NULL
		                     WHEN s.down_since IS NULL THEN now() + $13 * interval '1 microsecond'
		                     ELSE s.next_probe_at END,
		probe_until   = CASE WHEN $11 OR %[2]s < $12 THEN NULL ELSE s.probe_until END,
		updated_at    = now()
	WHERE s.endpoint = $6 AND ($9 > 0 OR $11 OR s.consecutive_failures > 0)
	RETURNING s.down_since IS NOT NULL AS down, s.down_since = now() AS opened,
		s.down_since IS NULL AND s.recovered_at = now() AS recovered
)`, sinkTable, n)
}

// takeProbe tries to become the one dispatcher that probes the down sink now.
func (d *Dispatcher) takeProbe(ctx context.Context, db *pgxpool.Pool) (bool, error) {
	var probes int
	err := db.QueryRow(ctx, d.sq.takeProbe, d.opts.Endpoint, d.opts.Lease.Microseconds(),
		d.opts.BackoffInitial.Microseconds(), d.opts.ProbeIntervalMax.Microseconds()).Scan(&probes)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("take the sink probe: %w", err)
	}
	return true, nil
}

// claimProbe claims one row to probe the down sink with, when no other dispatcher is
// probing and the next probe is due; it returns no row otherwise.
func (d *Dispatcher) claimProbe(ctx context.Context, db *pgxpool.Pool) ([]row, error) {
	taken, err := d.takeProbe(ctx, db)
	if err != nil || !taken {
		return nil, err
	}
	rows, err := d.q.claimRows(ctx, db, d.opts.Endpoint, 1, d.opts.Lease, true)
	if err != nil || len(rows) == 0 {
		// Nothing to probe with (or the claim failed): let the next probe come sooner
		// than the lease's end.
		if _, rerr := db.Exec(ctx, d.sq.releaseProbe, d.opts.Endpoint); rerr != nil && err == nil {
			err = fmt.Errorf("release the sink probe: %w", rerr)
		}
		return nil, err
	}
	rows[0].probe = true
	return rows, nil
}

// sinkChanged logs an outage's start and end and, at its end, makes the rows held back
// by their own backoff due and wakes every dispatcher of the endpoint.
func (d *Dispatcher) sinkChanged(ctx context.Context, c sinkChange) {
	log := d.opts.Logger.WithValues("endpoint", d.opts.Endpoint)
	switch {
	case c.Opened:
		log.Info("the sink is down: deliveries are held and one probe at a time is sent, their attempts not counted",
			"consecutiveFailures", d.opts.SinkDownAfter, "probeIntervalMax", d.opts.ProbeIntervalMax)
	case c.Recovered:
		var madeDue int64
		b, resume := store.OnIndexes(d.sq.resume, d.opts.Endpoint)
		resume.Exec(func(tag pgconn.CommandTag) error {
			madeDue = tag.RowsAffected()
			return nil
		})
		if err := d.pool.SendBatch(ctx, b).Close(); err != nil {
			log.Error(err, "the sink answers again; making held rows due failed (they are due after their backoff)")
		} else {
			log.Info("the sink answers again: delivery resumes", "rowsMadeDue", madeDue)
		}
		if err := Notify(ctx, d.pool, d.opts.Endpoint); err != nil {
			log.Error(err, "waking the other dispatchers failed; they resume at their next poll")
		}
		d.signal()
	}
}

// SinkHealth is what the dispatchers know of one endpoint's sink, and its backlog.
type SinkHealth struct {
	// Down: the dispatchers hold deliveries and probe.
	Down bool
	// ConsecutiveFailures is the number of unavailable answers since the last answer.
	ConsecutiveFailures int
	// FailingSince is the first failure of the current streak, DownSince when it went
	// down, RecoveredAt when the last outage ended, NextProbeAt when the next probe is
	// due; nil when not applicable.
	FailingSince, DownSince, RecoveredAt, NextProbeAt *time.Time
	// LastError describes the last unavailable answer: a status or the kind of
	// transport error, never the sink's URL, host or address.
	LastError string
	// Backlog is the endpoint's outbox.
	Backlog Backlog
	// Now is the database's clock, for ages.
	Now time.Time
}

// ReadSinkHealth reads the sink state the dispatchers of endpoint keep, and its backlog.
// An endpoint whose dispatchers never started has a healthy, empty state.
func ReadSinkHealth(ctx context.Context, db querier, tables store.Tables, endpoint string) (SinkHealth, error) {
	var h SinkHealth
	err := db.QueryRow(ctx, fmt.Sprintf(`
SELECT now(), COALESCE(s.down_since IS NOT NULL, false), COALESCE(s.consecutive_failures, 0),
	s.failing_since, s.down_since, s.recovered_at, s.next_probe_at, COALESCE(s.last_error, '')
FROM (SELECT $1::text AS endpoint) e LEFT JOIN %s s ON s.endpoint = e.endpoint`, tables.SinkState), endpoint).
		Scan(&h.Now, &h.Down, &h.ConsecutiveFailures, &h.FailingSince, &h.DownSince, &h.RecoveredAt, &h.NextProbeAt, &h.LastError)
	if err != nil {
		return SinkHealth{}, fmt.Errorf("read the sink state of %s: %w", endpoint, err)
	}
	if h.Backlog, err = readBacklog(ctx, db, backlogQuery(tables), endpoint); err != nil {
		return SinkHealth{}, err
	}
	return h, nil
}
