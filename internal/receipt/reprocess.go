package receipt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookkeeper/hookkeeper/internal/expr"
)

// ErrReceiptNotFound is returned by Reprocess for an id that is not a receipt of the
// Recorder's endpoint.
var ErrReceiptNotFound = errors.New("receipt not found")

// Replayable reports whether Reprocess may still apply a receipt with this outcome.
func Replayable(o Outcome) bool { return o == OutcomeUnmatched || o == OutcomeGuardFailed }

// Reprocess re-runs a stored receipt whose outcome is unmatched or guard_failed through
// the same transition logic, in one transaction: it locks the receipt row (FOR UPDATE,
// so concurrent replays of one receipt serialise), locks the entity, decides, applies,
// writes the outbox row with the same dedupe key a first delivery would have written,
// and updates the receipt's outcome, detail and processed_at. A receipt whose outcome is
// no longer replayable (e.g. applied by an earlier call) is left alone: the result has
// Duplicate set and its stored Outcome. onUnmatched Retry does not apply to replays: a
// receipt whose entity is still missing stays unmatched.
func (r *Recorder) Reprocess(ctx context.Context, eventRowID int64) (res Result, err error) {
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("acquire database connection: %w", err)
	}
	defer func() {
		if err != nil {
			rollback(conn)
		}
		conn.Release()
	}()

	var ev Event
	var outcome string
	var headers map[string]string
	var payload []byte
	load := step{sql: r.sql.load, args: []any{eventRowID, r.key}, read: func(br pgx.BatchResults) error {
		return br.QueryRow().Scan(&ev.ID, &ev.Type, &ev.EntityKey, &payload, &headers, &ev.OccurredAt, &ev.Amount, &outcome)
	}}
	if err := pipeline(ctx, conn, []step{beginStep, load}); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return Result{}, fmt.Errorf("reprocess receipt %d of %s: %w", eventRowID, r.key, ErrReceiptNotFound)
		}
		return Result{}, fmt.Errorf("load receipt %d: %w", eventRowID, err)
	}
	if !Replayable(Outcome(outcome)) {
		if err := pipeline(ctx, conn, []step{commitStep}); err != nil {
			return Result{}, fmt.Errorf("end reprocess of receipt %d: %w", eventRowID, err)
		}
		return Result{Duplicate: true, Outcome: Outcome(outcome), ReceiptID: eventRowID}, nil
	}
	ev.Payload = json.RawMessage(payload)
	ev.Headers = headers
	if parsed, err := expr.DecodeJSON(payload); err == nil {
		if body, ok := parsed.(map[string]any); ok {
			ev.Body = body
		}
	}

	var live any
	if r.live != nil && r.ep.Machine.NeedsLive(ev.Type) {
		live, err = r.live(ctx, ev)
		if rejected := (*LiveRejected)(nil); errors.As(err, &rejected) {
			live, err = rejected, nil
		}
		if err != nil {
			return Result{}, fmt.Errorf("re-fetch the provider's object for event %s: %w", ev.ID, err)
		}
	}

	var next step
	switch {
	case !r.ep.Machine.Handles(ev.Type):
		res = Result{ReceiptID: eventRowID, Outcome: OutcomeUnhandled, Detail: detailNotHandled}
		next = execStep(r.sql.outcome, eventRowID, string(OutcomeUnhandled), detailNotHandled)
	case ev.EntityKey == "":
		res = Result{ReceiptID: eventRowID, Outcome: OutcomeUnmatched, Detail: DetailNoKey}
		next = execStep(r.sql.outcome, eventRowID, string(OutcomeUnmatched), DetailNoKey)
	default:
		var ent locked
		if err := pipeline(ctx, conn, []step{r.lockStep(&ev, &ent)}); err != nil {
			return Result{}, fmt.Errorf("reprocess receipt %d: %w", eventRowID, err)
		}
		v, _ := r.judge(&ev, live, ent, false)
		next = r.reprocessStep(&ev, v, eventRowID, &res)
	}
	if err := pipeline(ctx, conn, []step{next, commitStep}); err != nil {
		return Result{}, fmt.Errorf("reprocess receipt %d: %w", eventRowID, err)
	}
	r.afterCommit([]Result{res})
	return res, nil
}

// ReplayableSince lists the ids of this endpoint's replayable receipts received at or
// after since, oldest first, at most limit; `hookkeeper replay` feeds them to Reprocess.
func (r *Recorder) ReplayableSince(ctx context.Context, since time.Time, limit int) ([]int64, error) {
	rows, err := r.pool.Query(ctx, fmt.Sprintf(`SELECT id FROM %s
WHERE endpoint = $1 AND outcome IN ('unmatched', 'guard_failed') AND received_at >= $2
ORDER BY received_at, id LIMIT $3`, r.ep.Tables.Events), r.key, since, limit)
	if err != nil {
		return nil, fmt.Errorf("list replayable receipts: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("list replayable receipts: %w", err)
	}
	return ids, nil
}
