package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/internal/store"
)

// DefaultReplayBatch is how many rows one replay step handles (and how often progress
// is reported).
const DefaultReplayBatch = 500

// DefaultReplayOutcomes are the receipt outcomes a receipt replay selects when
// Selection.Outcomes is empty: the entity did not exist yet (unmatched), a guard such as
// the amount check was false (guard_failed) or failed to evaluate (guard_error). Parked
// and expired receipts are replayed when asked for (receipt.Replayable lists every
// outcome a replay may re-run).
var DefaultReplayOutcomes = []string{"unmatched", "guard_failed", "guard_error"}

// Selection narrows a replay to one endpoint's rows, a time range and/or ids.
type Selection struct {
	// Endpoint is the endpoint key ("namespace/name"); required.
	Endpoint string
	// Since and Until bound the time the row reached its state (dead_at for dead
	// letters, received_at for receipts): Since <= t < Until. Zero means unbounded.
	Since, Until time.Time
	// IDs, when not empty, limits the replay to these row ids.
	IDs []int64
	// Outcomes are the receipt outcomes to select (receipt replay only);
	// DefaultReplayOutcomes when empty.
	Outcomes []string
}

// ReplayOptions shape a replay run.
type ReplayOptions struct {
	// DryRun lists what would change (through Each) and changes nothing.
	DryRun bool
	// BatchSize is the rows per step; DefaultReplayBatch when zero.
	BatchSize int
	// Each is called for every selected row: in a dry run instead of changing it,
	// otherwise as it is replayed.
	Each func(ReplayItem)
	// Progress is called after every step with the rows handled so far and the rows
	// selected at the start.
	Progress func(done, total int)
}

// ReplayItem describes one selected row.
type ReplayItem struct {
	ID        int64
	Key       string // dedupe key (dead letters) or provider event id (receipts)
	EntityKey string
	EventType string
	// At is dead_at (dead letters) or received_at (receipts).
	At time.Time
	// State is the last error (dead letters) or the outcome (receipts).
	State string
}

// ReplayReport sums up a replay run.
type ReplayReport struct {
	// Selected rows matched the selection when the run started.
	Selected int
	// Replayed rows were changed: re-driven, re-run or discarded (zero in a dry run).
	Replayed int
	// Outcomes counts the receipts' outcomes after reprocessing (receipt replay only).
	Outcomes map[string]int
	// Skipped receipts were selected but gone when their turn came: retention or an
	// erasure removed the receipt or its payload during the run (receipt replay only).
	Skipped int
}

// ErrReceiptGone is wrapped by a Reprocess whose receipt, or its payload, was removed
// (by retention or an erasure) after the run selected it: the run skips it and goes on.
var ErrReceiptGone = errors.New("the receipt or its payload was removed")

func (o ReplayOptions) batch() int {
	if o.BatchSize > 0 {
		return o.BatchSize
	}
	return DefaultReplayBatch
}

// selectionArgs are the bind parameters $2..$4 of the replay queries.
func selectionArgs(s Selection) []any {
	var since, until *time.Time
	if !s.Since.IsZero() {
		since = &s.Since
	}
	if !s.Until.IsZero() {
		until = &s.Until
	}
	ids := s.IDs
	if ids == nil {
		ids = []int64{}
	}
	return []any{since, until, ids}
}

// RedriveDeadLetters makes the selected dead letters due again with a fresh attempt
// budget: dead_at, attempts and the lease are reset and available_at set to now. A
// re-driven row becomes the head of its entity's queue again; while a later row of the
// entity is leased (its POST may be in flight), the re-driven row is held until that
// lease ends, so PerEntity never has two rows of one entity at the sink at once. The
// dedupe key is untouched, so the sink sees the same Idempotency-Key. Rows that are no
// longer dead are not selected, so running it twice re-drives nothing the second time.
// Discarded dead letters are not selected.
func RedriveDeadLetters(ctx context.Context, pool *pgxpool.Pool, tables store.Tables, sel Selection, opts ReplayOptions) (ReplayReport, error) {
	return eachDeadLetter(ctx, pool, tables, sel, opts, deadLetterAction{
		verb: "redrive",
		change: func(batch string) string {
			return fmt.Sprintf(`
WITH batch AS (%[2]s)
UPDATE %[1]s o
SET dead_at = NULL, attempts = 0, available_at = now(),
    lease_until = (SELECT max(p.lease_until) FROM %[1]s p
                   WHERE p.endpoint = o.endpoint AND p.entity_key = o.entity_key AND p.id <> o.id
                     AND p.delivered_at IS NULL AND p.dead_at IS NULL AND p.lease_until > now())
FROM batch WHERE o.id = batch.id
RETURNING o.id, o.dedupe_key, o.entity_key, o.event_type, batch.dead_at, COALESCE(o.last_error, '')`, tables.Outbox, batch)
		},
		// Wake the dispatchers now rather than at their next poll.
		afterBatch: func(ctx context.Context) error { return Notify(ctx, pool, sel.Endpoint) },
	})
}

// Discard says who discards dead letters and why.
type Discard struct {
	// Actor is who decided (a person's name or an OS user); required.
	Actor string
	// Reason is why; required, at most MaxDiscardReason bytes.
	Reason string
}

// MaxDiscardReason caps a discard's reason.
const MaxDiscardReason = 1000

// Check reports a missing actor or reason, or a reason over MaxDiscardReason.
func (d Discard) Check() error {
	reason := strings.TrimSpace(d.Reason)
	switch {
	case reason == "":
		return errors.New("discard dead letters: a reason is required")
	case len(reason) > MaxDiscardReason:
		return fmt.Errorf("discard dead letters: the reason is %d bytes, at most %d", len(reason), MaxDiscardReason)
	case strings.TrimSpace(d.Actor) == "":
		return errors.New("discard dead letters: who discards them (the actor) is required")
	}
	return nil
}

// DiscardDeadLetters marks the selected dead letters discarded: a deliberate decision
// that they will not be delivered, recorded in dead_letter_discards (who, when, why, how
// many). The rows are kept, with the discard that took them; they no longer count as
// dead letters (the gauge and its alert), nor are they selected by a replay or another
// discard, so running it twice discards nothing the second time. Nothing is recorded when
// nothing is selected, nor in a dry run.
func DiscardDeadLetters(ctx context.Context, pool *pgxpool.Pool, tables store.Tables, sel Selection, d Discard, opts ReplayOptions) (ReplayReport, error) {
	d.Actor, d.Reason = strings.TrimSpace(d.Actor), strings.TrimSpace(d.Reason)
	if err := d.Check(); err != nil {
		return ReplayReport{}, err
	}
	var record int64
	return eachDeadLetter(ctx, pool, tables, sel, opts, deadLetterAction{
		verb: "discard",
		begin: func(ctx context.Context) error {
			err := pool.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s (endpoint, actor, reason) VALUES ($1, $2, $3) RETURNING id`,
				tables.DeadLetterDiscards), sel.Endpoint, d.Actor, d.Reason).Scan(&record)
			if err != nil {
				return fmt.Errorf("record the discard: %w", err)
			}
			return nil
		},
		// The record counts the rows of each batch in the batch's own statement.
		change: func(batch string) string {
			return fmt.Sprintf(`
WITH batch AS (%[2]s),
upd AS (
	UPDATE %[1]s o SET discarded_at = now(), discard_id = %[4]d
	FROM batch WHERE o.id = batch.id
	RETURNING o.id, o.dedupe_key, o.entity_key, o.event_type, o.dead_at, COALESCE(o.last_error, '')
),
counted AS (UPDATE %[3]s SET rows = rows + (SELECT count(*) FROM upd) WHERE id = %[4]d)
SELECT * FROM upd`, tables.Outbox, batch, tables.DeadLetterDiscards, record)
		},
	})
}

// deadLetterAction is what a run over dead letters does to each batch.
type deadLetterAction struct {
	verb string
	// begin runs once, when rows are selected and it is not a dry run.
	begin func(ctx context.Context) error
	// change is the statement that changes a batch, given the batch's locking SELECT;
	// it returns the changed rows as ReplayItems.
	change func(batch string) string
	// afterBatch runs after each changed batch.
	afterBatch func(ctx context.Context) error
}

// eachDeadLetter runs a over the selected dead letters (not discarded), in batches of
// ascending id, or lists them in a dry run.
func eachDeadLetter(ctx context.Context, pool *pgxpool.Pool, tables store.Tables, sel Selection, opts ReplayOptions, a deadLetterAction) (ReplayReport, error) {
	if sel.Endpoint == "" {
		return ReplayReport{}, fmt.Errorf("%s dead letters: endpoint key is empty", a.verb)
	}
	where := `endpoint = $1 AND dead_at IS NOT NULL AND discarded_at IS NULL
	  AND ($2::timestamptz IS NULL OR dead_at >= $2)
	  AND ($3::timestamptz IS NULL OR dead_at < $3)
	  AND (cardinality($4::bigint[]) = 0 OR id = ANY($4))`
	args := append([]any{sel.Endpoint}, selectionArgs(sel)...)

	var report ReplayReport
	if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE %s`, tables.Outbox, where), args...).
		Scan(&report.Selected); err != nil {
		return report, fmt.Errorf("count dead letters: %w", err)
	}
	if report.Selected == 0 {
		return report, nil
	}

	query := fmt.Sprintf(`
SELECT id, dedupe_key, entity_key, event_type, dead_at, COALESCE(last_error, '')
FROM %s WHERE %s AND id > $5 ORDER BY id LIMIT $6`, tables.Outbox, where)
	if !opts.DryRun {
		if a.begin != nil {
			if err := a.begin(ctx); err != nil {
				return report, fmt.Errorf("%s dead letters: %w", a.verb, err)
			}
		}
		// The batch is locked so a concurrent run over the same rows skips them rather
		// than changing them twice; the dispatcher never claims dead rows.
		query = a.change(fmt.Sprintf(`SELECT id, dead_at FROM %s WHERE %s AND id > $5 ORDER BY id LIMIT $6 FOR UPDATE SKIP LOCKED`,
			tables.Outbox, where))
	}
	done := 0
	last := int64(0)
	for {
		items, err := collectItems(ctx, pool, query, append(args, last, opts.batch())...)
		if err != nil {
			return report, fmt.Errorf("%s dead letters: %w", a.verb, err)
		}
		if len(items) == 0 {
			break
		}
		for _, it := range items {
			last = max(last, it.ID)
			if opts.Each != nil {
				opts.Each(it)
			}
		}
		done += len(items)
		if !opts.DryRun {
			report.Replayed += len(items)
			if a.afterBatch != nil {
				if err := a.afterBatch(ctx); err != nil {
					return report, err
				}
			}
		}
		if opts.Progress != nil {
			opts.Progress(done, report.Selected)
		}
		if len(items) < opts.batch() {
			break
		}
	}
	return report, nil
}

// Reprocess re-runs one stored receipt through the receipt transaction; it must be a
// no-op for a receipt that was already applied (receipt.Recorder.Reprocess).
type Reprocess func(ctx context.Context, receiptID int64) error

// ReplayReceipts re-runs the selected receipts (by default those whose outcome is
// unmatched, guard_failed or guard_error) through reprocess, for example once the order they name exists. The
// report counts the outcomes afterwards; receipts that now apply are no longer selected,
// so a second run touches only those that still do not.
func ReplayReceipts(ctx context.Context, pool *pgxpool.Pool, tables store.Tables, sel Selection, reprocess Reprocess, opts ReplayOptions) (ReplayReport, error) {
	if sel.Endpoint == "" {
		return ReplayReport{}, fmt.Errorf("replay receipts: endpoint key is empty")
	}
	if reprocess == nil && !opts.DryRun {
		return ReplayReport{}, fmt.Errorf("replay receipts: no reprocessor")
	}
	// A receipt whose payload retention or an erasure removed cannot run again.
	where := `endpoint = $1 AND outcome = ANY($5) AND payload IS NOT NULL
	  AND ($2::timestamptz IS NULL OR received_at >= $2)
	  AND ($3::timestamptz IS NULL OR received_at < $3)
	  AND (cardinality($4::bigint[]) = 0 OR id = ANY($4))`
	outcomes := sel.Outcomes
	if len(outcomes) == 0 {
		outcomes = DefaultReplayOutcomes
	}
	args := append(append([]any{sel.Endpoint}, selectionArgs(sel)...), outcomes)

	report := ReplayReport{Outcomes: map[string]int{}}
	if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE %s`, tables.Events, where), args...).
		Scan(&report.Selected); err != nil {
		return report, fmt.Errorf("count replayable receipts: %w", err)
	}
	list := fmt.Sprintf(`
SELECT id, event_id, entity_key, event_type, received_at, outcome
FROM %s WHERE %s AND id > $6 ORDER BY id LIMIT $7`, tables.Events, where)
	outcomeCounts := fmt.Sprintf(`SELECT outcome, count(*) FROM %s WHERE id = ANY($1) GROUP BY outcome`, tables.Events)

	done := 0
	last := int64(0)
	for {
		items, err := collectItems(ctx, pool, list, append(args, last, opts.batch())...)
		if err != nil {
			return report, fmt.Errorf("list replayable receipts: %w", err)
		}
		if len(items) == 0 {
			break
		}
		ids := make([]int64, 0, len(items))
		for _, it := range items {
			last = max(last, it.ID)
			if opts.Each != nil {
				opts.Each(it)
			}
			if opts.DryRun {
				continue
			}
			if err := reprocess(ctx, it.ID); errors.Is(err, ErrReceiptGone) {
				report.Skipped++
				continue
			} else if err != nil {
				// What this batch already re-ran is counted (its outcomes are not read).
				report.Replayed += len(ids)
				return report, fmt.Errorf("reprocess receipt %d: %w", it.ID, err)
			}
			ids = append(ids, it.ID)
		}
		done += len(items)
		report.Replayed += len(ids)
		if len(ids) > 0 {
			// Outbox rows written by the reprocessing are due now; wake the dispatchers
			// rather than leave them to their next poll.
			if err := Notify(ctx, pool, sel.Endpoint); err != nil {
				return report, err
			}
			rows, err := pool.Query(ctx, outcomeCounts, ids)
			if err != nil {
				return report, fmt.Errorf("read outcomes of replayed receipts: %w", err)
			}
			var outcome string
			var n int
			if _, err := pgx.ForEachRow(rows, []any{&outcome, &n}, func() error {
				report.Outcomes[outcome] += n
				return nil
			}); err != nil {
				return report, fmt.Errorf("read outcomes of replayed receipts: %w", err)
			}
		}
		if opts.Progress != nil {
			opts.Progress(done, report.Selected)
		}
	}
	return report, nil
}

func collectItems(ctx context.Context, pool *pgxpool.Pool, query string, args ...any) ([]ReplayItem, error) {
	rows, err := pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ReplayItem, error) {
		var it ReplayItem
		err := r.Scan(&it.ID, &it.Key, &it.EntityKey, &it.EventType, &it.At, &it.State)
		return it, err
	})
}
