package receipt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/expr"
	"github.com/hookkeeper/hookkeeper/internal/statemachine"
)

// Deciding one entity's events
//
// A receipt transaction locks the entity, then reads its context in a statement of its
// own (so it sees everything committed before the lock was granted): whether the
// delivered event is recorded already, and the entity's parked events in provider
// order. The rest is decided in Go, then written in one round trip:
//
//  1. the delivered event is judged against the entity (statemachine.Decide);
//  2. if it applies, the entity advances (state, last applied time);
//  3. the parked events, with the delivered one among them if it parked, are then
//     released in provider order: the first that now fits applies and the pass starts
//     again, until a pass applies nothing; one that is now stale, can never apply, or
//     whose guard is false or fails is closed with that outcome; the rest stay parked.
//
// Each applied event writes its own outbox row with its own dedupe key, exactly as if
// it had applied on arrival, and every write is guarded by the state the plan expects,
// so a plan the database disagrees with fails the whole transaction instead of
// committing part of it.

// entityView is what a receipt transaction knows of one entity once it holds its lock.
type entityView struct {
	found, created bool
	state          string
	amount         *int64
	lastAt         *time.Time
	// seen: the delivered event's receipt exists already (a duplicate).
	seen   bool
	parked []storedEvent
}

// storedEvent is a receipt read back: a parked event, or one Reprocess re-drives.
type storedEvent struct {
	ReceiptID  int64             `json:"id"`
	EventID    string            `json:"eventId"`
	Type       string            `json:"type"`
	Payload    json.RawMessage   `json:"payload"`
	Headers    map[string]string `json:"headers"`
	OccurredAt *time.Time        `json:"occurredAt"`
	Amount     *int64            `json:"amount"`
}

// event rebuilds the event guards see, with its body decoded from the stored payload.
func (s storedEvent) event(entityKey string) Event {
	ev := Event{ID: s.EventID, Type: s.Type, EntityKey: entityKey, Payload: s.Payload,
		Headers: s.Headers, OccurredAt: s.OccurredAt, Amount: s.Amount}
	if parsed, err := expr.DecodeJSON(s.Payload); err == nil {
		if body, ok := parsed.(map[string]any); ok {
			ev.Body = body
		}
	}
	return ev
}

// candidate is one event a transaction decides: the delivered one (receiptID 0) or a
// stored receipt (parked, or re-driven by Reprocess), and what was recorded for it.
type candidate struct {
	ev   Event
	live any
	// fetched: live was fetched in this transaction (judgeWaiting).
	fetched   bool
	receiptID int64
	// was is the stored receipt's outcome when it was read.
	was Outcome
	// predicted: decided on a prediction; its receipt is written only if it held
	// (predict.go).
	predicted bool
	res       Result
}

// entityPlan is everything one transaction decides about one entity.
type entityPlan struct {
	primary  *candidate
	released []*candidate
	// after is the entity as the plan leaves it, when it exists and nothing of it stays
	// parked (settled): what the next prediction of it starts from (predict.go).
	after   entityState
	settled bool
}

// result is the primary event's result with the parked events it released.
func (p *entityPlan) result() Result {
	res := p.primary.res
	for _, c := range p.released {
		res.Released = append(res.Released, c.res)
	}
	return res
}

// entityState is the entity as the plan has advanced it so far.
type entityState struct {
	state  string
	amount *int64
	lastAt *time.Time
}

func (s *entityState) advance(v decision, ev *Event) {
	s.state = v.t.To
	if ev.OccurredAt != nil && (s.lastAt == nil || ev.OccurredAt.After(*s.lastAt)) {
		s.lastAt = ev.OccurredAt
	}
}

// decision is what was decided for one event.
type decision struct {
	outcome Outcome
	detail  string
	// t is the applied transition, or the one whose guard failed to evaluate.
	t *statemachine.Transition
	// from and outboxKey are set when outcome is applied.
	from      string
	outboxKey string
}

// lockSteps lock ev's entity and read its context into view when they run.
func (r *Recorder) lockSteps(ev *Event, view *entityView) []step {
	lock := step{sql: r.sql.lock, args: r.lockArgs(ev), read: func(br pgx.BatchResults) error {
		if err := scanLock(br, view); err != nil {
			return fmt.Errorf("lock entity of event %s: %w", ev.ID, err)
		}
		return nil
	}}
	ctxArgs := pgx.NamedArgs{"endpoint": r.key, "entity_key": ev.EntityKey, "event_id": ev.ID}
	context := step{sql: r.sql.entityContext, args: ctxArgs, read: func(br pgx.BatchResults) error {
		var clock *time.Time
		var parked []byte
		if err := br.QueryRow().Scan(&view.seen, &clock, &parked); err != nil {
			return fmt.Errorf("read the entity of event %s: %w", ev.ID, err)
		}
		if r.mode == appTable {
			view.lastAt = clock
		}
		if parked != nil {
			if err := json.Unmarshal(parked, &view.parked); err != nil {
				return fmt.Errorf("read the parked events of entity %s: %w", ev.EntityKey, err)
			}
		}
		return nil
	}}
	return []step{lock, context}
}

// lockArgs are the lock statement's parameters for ev.
func (r *Recorder) lockArgs(ev *Event) pgx.NamedArgs {
	args := r.entityArgs(ev.EntityKey)
	if r.mode == managedCreate {
		args["initial"] = r.ep.Machine.Initial()
		args["amount"] = r.createdAmount(ev)
	}
	return args
}

// createdAmount is the amount onUnmatched Create gives an entity ev's lock creates: the
// amount of an event that can start its history (a transition of its type leaves the
// initial state), never of whichever event arrived first: a partial refund delivered
// before the capture would otherwise fix the order's amount at the refund's and fail
// the capture's guard.
func (r *Recorder) createdAmount(ev *Event) *int64 {
	if r.ep.Machine.LeavesInitial(ev.Type) {
		return ev.Amount
	}
	return nil
}

// scanLock reads the lock statement's result: no row when the entity does not exist.
func scanLock(br pgx.BatchResults, view *entityView) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
		var state *string
		if err := rows.Scan(&view.found, &state, &view.amount, &view.lastAt, &view.created); err != nil {
			return err
		}
		if state != nil {
			view.state = *state
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if n > 1 {
		return fmt.Errorf("the entity key matches %d rows; the key column (with the tenant) must identify one row", n)
	}
	return nil
}

// planEntity decides the plan's primary event and the parked events it releases, and
// returns the steps that record them. canRetry is set for deliveries (not replays):
// with onUnmatched Retry a missing entity returns ErrRetryLater.
func (r *Recorder) planEntity(ctx context.Context, plan *entityPlan, view *entityView, canRetry bool) ([]step, error) {
	c := plan.primary
	if view.seen && c.receiptID == 0 {
		// A copy of a recorded event: nothing is written, not even the entity the lock
		// may have created for it. Whether the entity exists does not matter: with
		// onUnmatched Retry, a copy of an event whose entity the app has deleted since
		// is a duplicate, not a delivery to refuse until the entity comes back.
		c.res = Result{Duplicate: true}
		plan.after = entityState{state: view.state, amount: view.amount, lastAt: view.lastAt}
		plan.settled = view.found && !view.created && len(view.parked) == 0
		if view.created {
			return []step{execWriteStep(r.sql.undoCreate, r.entityArgs(c.ev.EntityKey))}, nil
		}
		return nil, nil
	}
	if !view.found {
		if canRetry && r.ep.Spec.Entity.OnUnmatched == v1alpha1.UnmatchedRetry {
			return nil, ErrRetryLater
		}
		return []step{r.writeStep(c, decision{outcome: OutcomeUnmatched, detail: DetailNoEntity}, false)}, nil
	}

	cur := entityState{state: view.state, amount: view.amount, lastAt: view.lastAt}
	var waiting []*candidate
	for _, p := range view.parked {
		if p.ReceiptID != c.receiptID {
			waiting = append(waiting, &candidate{ev: p.event(c.ev.EntityKey), receiptID: p.ReceiptID, was: OutcomeParked})
		}
	}

	var steps []step
	v := r.judge(&c.ev, c.live, cur, view.created)
	if v.outcome == OutcomeParked && r.parkFor <= 0 {
		v.outcome, v.detail = OutcomeIgnoredState, joinDetail(v.detail, detailParkingOff)
	}
	if v.outcome == OutcomeParked {
		waiting = insertInProviderOrder(waiting, c)
	} else {
		steps = append(steps, r.writeStep(c, v, view.created))
		if v.outcome == OutcomeApplied {
			cur.advance(v, &c.ev)
		}
	}
	if len(waiting) == 0 {
		plan.after, plan.settled = cur, true
		return steps, nil
	}

	// Release the waiting events in provider order until a pass applies nothing.
	for {
		applied := false
		var still []*candidate
		for _, w := range waiting {
			if applied {
				still = append(still, w)
				continue
			}
			wv := r.judgeWaiting(ctx, w, cur)
			switch wv.outcome {
			case OutcomeParked:
				still = append(still, w)
				continue
			case OutcomeApplied:
				cur.advance(wv, &w.ev)
				applied = true
			}
			steps = append(steps, r.writeStep(w, wv, view.created && w == c))
			if w != c {
				plan.released = append(plan.released, w)
			}
		}
		waiting = still
		if !applied {
			break
		}
	}
	plan.after, plan.settled = cur, len(waiting) == 0
	if slices.Contains(waiting, c) {
		// The delivered (or replayed) event waits: recorded as parked.
		steps = append(steps, r.writeStep(c, v, view.created))
	}
	return steps, nil
}

// insertInProviderOrder places c among the waiting events: by occurredAt (an event
// without one goes last), then arrival (c arrived last).
func insertInProviderOrder(waiting []*candidate, c *candidate) []*candidate {
	i := len(waiting)
	if at := c.ev.OccurredAt; at != nil {
		i = slices.IndexFunc(waiting, func(w *candidate) bool {
			return w.ev.OccurredAt == nil || w.ev.OccurredAt.After(*at)
		})
		if i < 0 {
			i = len(waiting)
		}
	}
	return slices.Insert(waiting, i, c)
}

// judgeWaiting judges a waiting event. A stored event whose type re-fetches is first
// judged without `live`: only when a transition of it starts from the entity's state is
// the provider's object fetched (once per transaction, however many release passes judge
// it), inside the transaction and holding the entity's lock; parked events are rare. A
// failed fetch leaves the event parked.
func (r *Recorder) judgeWaiting(ctx context.Context, w *candidate, cur entityState) decision {
	d := r.judge(&w.ev, w.live, cur, false)
	if w.receiptID == 0 || w.fetched || r.live == nil || !r.ep.Machine.NeedsLive(w.ev.Type) ||
		d.outcome == OutcomeParked || d.outcome == OutcomeIgnoredState {
		return d
	}
	w.fetched = true
	var err error
	if w.live, err = r.fetchLive(ctx, w.ev); err != nil {
		w.live = errLiveUnavailable
	}
	return r.judge(&w.ev, w.live, cur, false)
}

// errLiveUnavailable marks a waiting event whose re-fetch failed: it stays parked.
var errLiveUnavailable = errors.New("the provider's object could not be fetched")

// judge evaluates one event against the entity as the plan has advanced it.
func (r *Recorder) judge(ev *Event, live any, cur entityState, created bool) decision {
	if err, ok := live.(error); ok && errors.Is(err, errLiveUnavailable) {
		return decision{outcome: OutcomeParked, detail: errLiveUnavailable.Error()}
	}
	live, liveDetail, rejected := unwrapLive(live)
	d := r.ep.Machine.Decide(statemachine.Input{
		Event:  *ev,
		Entity: statemachine.Entity{Key: ev.EntityKey, State: cur.state, Amount: cur.amount, LastEventAt: cur.lastAt},
		Live:   live,
	})
	// The fetch speaks for the transitions that re-fetch: their guard failing (or failing
	// to evaluate on the object the provider says does not exist) or holding.
	if d.Outcome == statemachine.GuardFailed || (d.Outcome == statemachine.GuardError && rejected != nil) ||
		(d.Outcome == statemachine.Apply && d.Transition.Refetch) {
		if rejected != nil {
			d = statemachine.Decision{Outcome: statemachine.GuardFailed, Detail: rejected.Detail}
		} else {
			d.Detail = joinDetail(d.Detail, liveDetail)
		}
	}
	detail := d.Detail
	if created {
		detail = joinDetail(DetailCreated, detail)
	}
	v := decision{outcome: d.Outcome, detail: detail, t: d.Transition}
	if d.Outcome == statemachine.Apply {
		v.from = cur.state
		if d.Transition.Emit != "" {
			v.outboxKey = DedupeKey(r.key, ev.ID, d.Transition.Emit)
		}
	}
	return v
}

// writeStep records c's decision: a new receipt for the delivered event, an update of a
// stored one. It fills c.res when it runs.
func (r *Recorder) writeStep(c *candidate, v decision, created bool) step {
	c.res = Result{Outcome: v.outcome, Detail: v.detail, ReceiptID: c.receiptID, EventID: c.ev.ID}
	if v.t != nil {
		c.res.Transition = v.t.Name
	}
	if v.outcome == OutcomeApplied {
		c.res.FromState, c.res.ToState = v.from, v.t.To
	}
	args := r.entityArgs(c.ev.EntityKey)
	args["detail"] = v.detail
	args["occurred_at"] = c.ev.OccurredAt
	if v.outcome == OutcomeApplied {
		r.moveArgs(args, v)
	}

	if c.receiptID != 0 {
		if v.outcome != OutcomeApplied {
			if v.outcome == OutcomeParked && c.was == OutcomeParked {
				// Still waiting: a parked event stays parked, its deadline unchanged.
				c.res.Outcome = c.was
				return step{sql: "SELECT 1", read: func(br pgx.BatchResults) error { _, err := br.Exec(); return err }}
			}
			// An expired event replayed that may still apply later is parked again, with a
			// new deadline: left expired, it would never be released by the event it waits
			// for, and a replay's result would depend on the order the receipts arrived
			// in (a refund replayed before the capture it follows stayed expired).
			args["receipt_id"], args["outcome"] = c.receiptID, string(v.outcome)
			return execWriteStep(r.sql.setOutcome, args)
		}
		args["receipt_id"], args["was"] = c.receiptID, string(c.was)
		return step{sql: r.sql.applyStored, args: args, write: true, read: func(br pgx.BatchResults) error {
			var wroteOutbox bool
			if err := br.QueryRow().Scan(&wroteOutbox, nil); err != nil {
				return fmt.Errorf("apply transition %s to stored event %s: %w", v.t.Name, c.ev.ID, err)
			}
			if wroteOutbox {
				c.res.OutboxKey = v.outboxKey
			}
			return nil
		}}
	}

	r.receiptArgs(args, &c.ev)
	if r.mode == managedCreate {
		args["created"] = created
	}
	insertOutcome, insertApplied := r.sql.insertOutcome, r.sql.insertApplied
	if c.predicted {
		insertOutcome, insertApplied = r.sql.predictedOutcome, r.sql.predictedApplied
	}
	if v.outcome != OutcomeApplied {
		args["outcome"] = string(v.outcome)
		return step{sql: insertOutcome, args: args, write: true, read: func(br pgx.BatchResults) error {
			if err := br.QueryRow().Scan(&c.res.ReceiptID); err != nil {
				if errors.Is(err, pgx.ErrNoRows) {
					c.res = Result{Duplicate: true}
					return nil
				}
				return fmt.Errorf("insert receipt of event %s: %w", c.ev.ID, err)
			}
			return nil
		}}
	}
	return step{sql: insertApplied, args: args, write: true, read: func(br pgx.BatchResults) error {
		var wroteOutbox bool
		if err := br.QueryRow().Scan(&c.res.ReceiptID, &wroteOutbox, nil); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				c.res = Result{Duplicate: true}
				return nil
			}
			return fmt.Errorf("apply transition %s to event %s: %w", v.t.Name, c.ev.ID, err)
		}
		if wroteOutbox {
			c.res.OutboxKey = v.outboxKey
		}
		return nil
	}}
}

// entityArgs are the parameters that name the endpoint and the entity.
func (r *Recorder) entityArgs(entityKey string) pgx.NamedArgs {
	a := pgx.NamedArgs{"endpoint": r.key, "entity_key": entityKey}
	if r.mode == appTable {
		a["app_key"] = entityKey
		if tn := r.ep.Spec.Entity.Table.Tenant; tn != nil {
			a["tenant"] = tn.Value
		}
	}
	return a
}

// receiptArgs add a new receipt's columns.
func (r *Recorder) receiptArgs(a pgx.NamedArgs, ev *Event) {
	headers := ev.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	a["event_id"], a["event_type"], a["payload"] = ev.ID, ev.Type, rawJSON(ev.Payload)
	a["headers"], a["amount"] = headers, ev.Amount
}

// moveArgs add an applied transition's parameters.
func (r *Recorder) moveArgs(a pgx.NamedArgs, v decision) {
	a["from"], a["to"] = v.from, v.t.To
	if r.mode == appTable {
		a["app_from"], a["app_to"] = v.from, v.t.To
	}
	a["transition"], a["emit"], a["outbox_key"] = v.t.Name, v.t.Emit, v.outboxKey
}

// rawJSON passes the payload to a jsonb parameter unchanged; an empty payload is
// stored as JSON null rather than failing the insert.
func rawJSON(p json.RawMessage) any {
	if len(p) == 0 {
		return "null"
	}
	return string(p)
}

// unwrapLive splits what a LiveFunc produced into the guard's value, the detail of the
// fetch, and the provider's rejection of the event.
func unwrapLive(live any) (value any, detail string, rejected *LiveRejected) {
	switch v := live.(type) {
	case LiveValue:
		return v.Value, v.Detail, nil
	case *LiveRejected:
		return nil, "", v
	}
	return live, "", nil
}

func joinDetail(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
