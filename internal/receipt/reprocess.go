package receipt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ErrReceiptNotFound is returned by Reprocess for an id that is not a receipt of the
// Recorder's endpoint.
var ErrReceiptNotFound = errors.New("receipt not found")

// ErrPayloadRemoved is returned by Reprocess for a receipt whose payload retention
// (spec.retention.payloadFor) or an erasure removed: it cannot run again.
var ErrPayloadRemoved = errors.New("its payload was removed by retention or an erasure")

// ReplayableOutcomes are the outcomes Reprocess may still apply, in the order docs and
// messages list them. unhandled is among them for the events delivered while a new
// transition for their type was rolling out: the replicas still on the old machine
// stored them as unhandled, and a replay re-runs them through the current one. An
// outcome that is final (applied, ignored_state) is not.
var ReplayableOutcomes = []Outcome{OutcomeUnmatched, OutcomeGuardFailed, OutcomeGuardError,
	OutcomeParked, OutcomeExpired, OutcomeUnhandled}

// JoinOutcomes writes outcomes as a list for messages and help: "a, b, c".
func JoinOutcomes(outcomes []Outcome) string {
	names := make([]string, len(outcomes))
	for i, o := range outcomes {
		names[i] = string(o)
	}
	return strings.Join(names, ", ")
}

// Replayable reports whether Reprocess may still apply a receipt with this outcome.
func Replayable(o Outcome) bool { return slices.Contains(ReplayableOutcomes, o) }

// Reprocess re-runs a stored receipt whose outcome is replayable (ReplayableOutcomes)
// through the same decision as a delivery,
// in one transaction: it locks the entity, re-reads the receipt under that lock (so
// concurrent replays of one receipt serialise), decides, applies, writes the outbox row
// with the same dedupe key a first delivery would have written, releases the parked
// events the move lets apply, and updates the receipt's outcome, detail and
// processed_at. A receipt whose outcome is no longer replayable (e.g. applied by an
// earlier call) is left alone: the result has Duplicate set and its stored Outcome. A
// receipt that still cannot apply stays as it was (parked or expired). onUnmatched
// Retry does not apply to replays: a receipt whose entity is still missing stays
// unmatched.
func (r *Recorder) Reprocess(ctx context.Context, receiptID int64) (Result, error) {
	var plan *entityPlan
	err := r.inTx(ctx, func(tx *pipelinedTx) (err error) {
		plan = nil
		var first storedEvent
		var firstKey string
		var firstOutcome Outcome
		tx.queue(r.loadStep(receiptID, false, &first, &firstKey, &firstOutcome))
		if err := tx.send(ctx); err != nil {
			return err
		}
		if !Replayable(firstOutcome) {
			plan = &entityPlan{primary: &candidate{res: Result{Duplicate: true, Outcome: firstOutcome, ReceiptID: receiptID}}}
			return nil
		}
		ev := first.event(firstKey)
		c := &candidate{ev: ev, receiptID: receiptID, was: firstOutcome}
		plan = &entityPlan{primary: c}
		var view *entityView
		if r.needsLock(&ev) {
			if c.live, err = r.fetchLive(ctx, ev); err != nil {
				return err
			}
			// Entity first, then the receipt: the order every receipt transaction takes.
			view = &entityView{}
			tx.queue(r.lockSteps(&ev, view)...)
		}
		// The receipt's row lock serialises concurrent replays of it.
		var again storedEvent
		tx.queue(r.loadStep(receiptID, true, &again, &firstKey, &c.was))
		if err := tx.send(ctx); err != nil {
			return err
		}
		if !Replayable(c.was) {
			c.res = Result{Duplicate: true, Outcome: c.was, ReceiptID: receiptID}
			return nil
		}
		if view == nil {
			tx.queue(r.writeStep(c, r.unlockedDecision(&ev), false))
			return nil
		}
		steps, err := r.planEntity(ctx, plan, view, false)
		if err != nil {
			return err
		}
		tx.queue(steps...)
		return nil
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Result{}, fmt.Errorf("reprocess receipt %d of %s: %w", receiptID, r.key, ErrReceiptNotFound)
	}
	if err != nil {
		return Result{}, fmt.Errorf("reprocess receipt %d: %w", receiptID, err)
	}
	res := plan.result()
	if !res.Duplicate && res.ReceiptID == 0 {
		res.ReceiptID = receiptID
	}
	r.afterCommit([]Result{res})
	return res, nil
}

// loadStep reads a stored receipt (and locks it when locked is set).
func (r *Recorder) loadStep(receiptID int64, locked bool, dst *storedEvent, entityKey *string, outcome *Outcome) step {
	sql := r.sql.load
	if locked {
		sql = r.sql.loadLocked
	}
	return step{sql: sql, args: pgx.NamedArgs{"receipt_id": receiptID, "endpoint": r.key}, read: func(br pgx.BatchResults) error {
		dst.ReceiptID = receiptID
		var payload []byte
		var o string
		if err := br.QueryRow().Scan(&dst.EventID, &dst.Type, entityKey, &payload, &dst.Headers, &dst.OccurredAt, &dst.Amount, &o); err != nil {
			return err
		}
		if payload == nil && Replayable(Outcome(o)) {
			return fmt.Errorf("receipt %d: %w", receiptID, ErrPayloadRemoved)
		}
		dst.Payload, *outcome = payload, Outcome(o)
		return nil
	}}
}
