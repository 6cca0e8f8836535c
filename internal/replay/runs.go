package replay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/internal/store"
)

// RunRecord is one WebhookReplay's row in replay_runs: who asked for what, and what it
// did. The row is claimed before anything changes, so a run is never started twice.
type RunRecord struct {
	// UID is the WebhookReplay's metadata.uid: the key.
	UID       string
	Endpoint  string
	Namespace string
	Name      string
	Action    string
	Actor     string
	Reason    string
	DryRun    bool
	// Spec is the WebhookReplay's spec as JSON, for the audit trail.
	Spec []byte

	StartedAt  time.Time
	FinishedAt *time.Time
	// Starts counts the attempts: 1, more when a run that stopped midway resumed.
	Starts   int
	Selected int64
	Changed  int64
	Outcomes map[string]int64
	// Error is the last attempt's error; empty once finished.
	Error string
}

// Finished reports whether the run completed; its counts are then final.
func (r *RunRecord) Finished() bool { return r.FinishedAt != nil }

const runColumns = `uid, endpoint, namespace, name, action, actor, reason, dry_run, spec, started_at, finished_at, starts, selected, changed, outcomes, error`

func scanRun(row pgx.Row) (*RunRecord, error) {
	var r RunRecord
	err := row.Scan(&r.UID, &r.Endpoint, &r.Namespace, &r.Name, &r.Action, &r.Actor, &r.Reason, &r.DryRun, &r.Spec,
		&r.StartedAt, &r.FinishedAt, &r.Starts, &r.Selected, &r.Changed, &r.Outcomes, &r.Error)
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// Claim records run as started, or returns the record of an earlier attempt: finished
// (the caller runs nothing and reports it) or not (a run that stopped midway: Starts is
// incremented and the caller resumes it). The caller holds the run's Lock.
func Claim(ctx context.Context, pool *pgxpool.Pool, tables store.Tables, run RunRecord) (rec *RunRecord, fresh bool, err error) {
	spec := run.Spec
	if len(spec) == 0 {
		spec = []byte("{}")
	}
	rec, err = scanRun(pool.QueryRow(ctx, fmt.Sprintf(`
INSERT INTO %s (uid, endpoint, namespace, name, action, actor, reason, dry_run, spec)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (uid) DO NOTHING
RETURNING `+runColumns, tables.ReplayRuns),
		run.UID, run.Endpoint, run.Namespace, run.Name, run.Action, run.Actor, run.Reason, run.DryRun, spec))
	if err == nil {
		return rec, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("claim replay run %s: %w", run.UID, err)
	}
	// Claimed before: resume it when unfinished, else return the result.
	rec, err = scanRun(pool.QueryRow(ctx, fmt.Sprintf(`
WITH resumed AS (
	UPDATE %[1]s SET starts = starts + 1 WHERE uid = $1 AND finished_at IS NULL
	RETURNING `+runColumns+`
)
SELECT `+runColumns+` FROM resumed
UNION ALL
SELECT `+runColumns+` FROM %[1]s WHERE uid = $1 AND finished_at IS NOT NULL`, tables.ReplayRuns), run.UID))
	if err != nil {
		return nil, false, fmt.Errorf("read replay run %s: %w", run.UID, err)
	}
	return rec, false, nil
}

// ReadRun returns the record of uid, nil when there is none.
func ReadRun(ctx context.Context, pool *pgxpool.Pool, tables store.Tables, uid string) (*RunRecord, error) {
	rec, err := scanRun(pool.QueryRow(ctx, fmt.Sprintf(`SELECT `+runColumns+` FROM %s WHERE uid = $1`, tables.ReplayRuns), uid))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read replay run %s: %w", uid, err)
	}
	return rec, nil
}

// RecordProgress writes an unfinished run's counts so far.
func RecordProgress(ctx context.Context, pool *pgxpool.Pool, tables store.Tables, uid string, selected, changed int64) error {
	_, err := pool.Exec(ctx, fmt.Sprintf(`UPDATE %s SET selected = $2, changed = $3 WHERE uid = $1 AND finished_at IS NULL`, tables.ReplayRuns),
		uid, selected, changed)
	if err != nil {
		return fmt.Errorf("record progress of replay run %s: %w", uid, err)
	}
	return nil
}

// RecordError writes an unfinished run's last error; the run stays unfinished, to be
// resumed.
func RecordError(ctx context.Context, pool *pgxpool.Pool, tables store.Tables, uid, msg string) error {
	_, err := pool.Exec(ctx, fmt.Sprintf(`UPDATE %s SET error = $2 WHERE uid = $1 AND finished_at IS NULL`, tables.ReplayRuns), uid, msg)
	if err != nil {
		return fmt.Errorf("record error of replay run %s: %w", uid, err)
	}
	return nil
}

// Finish records the run's final counts and returns the finished record. A run already
// finished keeps its result.
func Finish(ctx context.Context, pool *pgxpool.Pool, tables store.Tables, uid string, selected, changed int64, outcomes map[string]int64) (*RunRecord, error) {
	if outcomes == nil {
		outcomes = map[string]int64{}
	}
	rec, err := scanRun(pool.QueryRow(ctx, fmt.Sprintf(`
UPDATE %s SET finished_at = now(), selected = $2, changed = $3, outcomes = $4, error = ''
WHERE uid = $1 AND finished_at IS NULL
RETURNING `+runColumns, tables.ReplayRuns), uid, selected, changed, outcomes))
	if errors.Is(err, pgx.ErrNoRows) {
		return ReadRun(ctx, pool, tables, uid)
	}
	if err != nil {
		return nil, fmt.Errorf("finish replay run %s: %w", uid, err)
	}
	return rec, nil
}

// ErrRunLocked says another process holds the run's lock: it is running it now.
var ErrRunLocked = errors.New("another operator process is running this replay")

// Lock takes a session advisory lock on uid, on a connection of its own that it keeps
// until unlock: two operator processes (an old leader that has not stopped yet, a new
// one) never run one WebhookReplay at once, and a run whose process died leaves no lock
// behind, so its unfinished record can be resumed. It returns ErrRunLocked when another
// session holds the lock.
func Lock(ctx context.Context, pool *pgxpool.Pool, uid string) (unlock func(), err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock replay run %s: %w", uid, err)
	}
	const key = `hashtextextended('hookkeeper.replay_run:' || $1, 0)`
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+key+`)`, uid).Scan(&ok); err != nil {
		conn.Release()
		return nil, fmt.Errorf("lock replay run %s: %w", uid, err)
	}
	if !ok {
		conn.Release()
		return nil, ErrRunLocked
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(`+key+`)`, uid); err != nil {
			// The lock lives as long as the session: end it rather than return a
			// connection that still holds it to the pool.
			_ = conn.Hijack().Close(ctx)
			return
		}
		conn.Release()
	}, nil
}
