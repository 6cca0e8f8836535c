package receipt

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
)

// Predicted groups: one round trip
//
// A group's decisions need its entities' rows, so a group costs two round trips: lock
// and read, then write and commit. Most of the time the receiver already knows what the
// read will return: the entity is as this Recorder's own last commit left it, or it is
// new (in the initial state, with the event's amount, no clock, nothing parked). A
// predicted group decides every member against that prediction and sends everything at
// once:
//
//	[BEGIN + per member, in entity-key order: expectLock, expectContext, the member's
//	    receipt-and-effects statement + COMMIT]                         one round trip
//
// expectLock takes the lock exactly as lock does and checks the locked row against the
// prediction; expectContext (after the lock, in its own snapshot, like entityContext)
// checks that the event is unrecorded and nothing of the entity is parked. They record
// the answer in a transaction-local setting, and the member's receipt statement writes
// nothing unless it says "held". A decision is a function of the entity's row, its
// clock, whether the event is recorded and the entity's parked events (planEntity
// reads nothing else), so where the prediction held the writes are the ones the
// two-round-trip path would have sent. Members whose prediction missed wrote nothing;
// after the commit they run again as a group of their own, unpredicted. The database
// stays the only authority; the prediction only saves the wait. Nothing fails on a
// miss: a failed statement would roll back the members that held, and pgx forgets
// every prepared statement of a batch that failed.
//
// The batch reaches the server whole, COMMIT included. A caller that gives up while it
// waits for a lock (its context cancelled: pgx closes the socket) is answered an error
// at once, but PostgreSQL goes on when the lock frees and commits what the batch says:
// unacknowledged, so the provider's retry is a duplicate (grouper.record says the same
// of any group its caller leaves). The unpredicted path sends COMMIT only after reading
// the locks, so there a caller that leaves during a lock wait commits nothing.
//
// A miss costs its member a second transaction, so predictions are made only while
// they mostly hold (credit): a miss costs more credit than a hit earns, and with no
// credit left every probeEvery-th group is predicted anyway, to notice when they hold
// again (another replica stopped writing the same entities, say).

// What became of a member's prediction (GroupCommit.ObservePrediction).
const (
	// PredictionHeld: the entity was as predicted; written in one round trip.
	PredictionHeld = "held"
	// PredictionDuplicate: the event was recorded already; answered in one round trip.
	PredictionDuplicate = "duplicate"
	// PredictionMissed: not as predicted; the member ran again, unpredicted.
	PredictionMissed = "missed"
)

// predictions is what a Recorder knows of the entities it wrote, and its credit.
type predictions struct {
	mu sync.Mutex
	// settled: an entity's state after this Recorder's last commit that touched it, for
	// entities that exist with nothing parked. Cleared when it would pass max entries.
	settled map[string]entityState
	max     int
	credit  int
	groups  int
}

// DefaultPredictedEntities is how many entities a Recorder remembers the state of, to
// predict them (WithPredictedEntities): 0.7 MiB of heap when full with 24-character
// keys (174 bytes an entity, measured over 16,384), grown only as entities are written.
// Enough for an entity's next event within about a minute at 100 entities a second;
// an entity forgotten is predicted new, which holds while it is in the initial state.
const DefaultPredictedEntities = 4096

// WithPredictedEntities sets how many entities the Recorder remembers the state of (see
// DefaultPredictedEntities); entities it does not remember are predicted new.
func WithPredictedEntities(n int) Option {
	return func(r *Recorder) { r.predictedEntities = n }
}

const (
	// maxCredit is where credit starts and stops growing; a hit earns 1, a miss costs
	// missCost, so predictions go on while more than two in three hold.
	maxCredit  = 8
	missCost   = 2
	probeEvery = 16
)

func newPredictions(max int) *predictions {
	return &predictions{settled: map[string]entityState{}, max: max, credit: maxCredit}
}

// prediction is the entity view predicted for one member: what expectLock and
// expectContext check, and what planEntity decides on.
type prediction struct {
	view entityView
	// answer is what the database found (predictionHeld, predictionSeen, a miss), once
	// the group ran.
	answer string
}

// held: the member's writes were made.
func (p *prediction) held() bool { return p.answer == predictionHeld }

// seen: the member is a copy of a recorded event.
func (p *prediction) seen() bool {
	return p.answer == predictionSeen || p.answer == predictionSeenCreated
}

// missed: the member wrote nothing and runs again.
func (p *prediction) missed() bool { return !p.held() && !p.seen() }

// predict predicts the view of every member that needs a lock, or reports false when
// the group should not be predicted: a member whose entity is neither known nor a
// likely new one, or no credit.
func (r *Recorder) predict(group []*groupMember) ([]prediction, bool) {
	p := r.predictions
	if p == nil {
		return nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.groups++
	if p.credit <= 0 && p.groups%probeEvery != 0 {
		return nil, false
	}
	out := make([]prediction, len(group))
	for i, m := range group {
		ev := &m.ev
		if !r.needsLock(ev) {
			continue
		}
		if s, ok := p.settled[ev.EntityKey]; ok {
			out[i].view = entityView{found: true, state: s.state, amount: s.amount, lastAt: s.lastAt}
			continue
		}
		if !r.ep.Machine.LeavesInitial(ev.Type) {
			return nil, false // an entity's first event starts its history
		}
		out[i].view = entityView{found: true, state: r.ep.Machine.Initial(), amount: ev.Amount}
		if r.mode == managedCreate {
			out[i].view.created = true
			out[i].view.amount = r.createdAmount(ev)
		}
	}
	return out, true
}

// expectSteps lock ev's entity and check it is as predicted (statements.expectLock):
// once they have run, pred.answer says what the database found.
func (r *Recorder) expectSteps(ev *Event, pred *prediction) []step {
	args := r.lockArgs(ev)
	v := pred.view
	args["expect_state"], args["expect_amount"] = v.state, v.amount
	args["expect_last_at"], args["expect_created"] = v.lastAt, v.created
	args["event_id"] = ev.ID
	check := func(what string) func(pgx.BatchResults) error {
		return func(br pgx.BatchResults) error {
			if err := br.QueryRow().Scan(&pred.answer); err != nil {
				return fmt.Errorf("%s of event %s: %w", what, ev.ID, err)
			}
			return nil
		}
	}
	return []step{
		{sql: r.sql.expectLock, args: args, read: check("lock entity")},
		{sql: r.sql.expectContext, args: args, read: check("read the entity")},
	}
}

// recordPredicted runs the group's transaction in one round trip, its decisions made on
// preds (see above), then the members whose prediction missed as a group of their own.
// An error means nothing was committed.
func (r *Recorder) recordPredicted(ctx context.Context, group []*groupMember, preds []prediction,
	lockHeld func()) ([]groupReply, error) {
	replies := make([]groupReply, len(group))
	plans := make([]*entityPlan, len(group))
	err := r.inTxWith(ctx, groupSettingsStep, func(tx *pipelinedTx) error {
		for _, i := range keyOrder(group) {
			ev := &group[i].ev
			plans[i] = &entityPlan{primary: &candidate{ev: *ev, live: group[i].live}}
			if !r.needsLock(ev) {
				preds[i].answer = predictionHeld
				tx.queue(r.writeStep(plans[i].primary, r.unlockedDecision(ev), false))
				continue
			}
			plans[i].primary.predicted = true
			tx.queue(r.expectSteps(ev, &preds[i])...)
			steps, err := r.planEntity(ctx, plans[i], &preds[i].view, true)
			if err != nil {
				return err
			}
			tx.queue(steps...)
		}
		// The next group may form while this one's locks are taken: it locks in key
		// order too, and whichever locks an entity second decides on what the first
		// committed.
		lockHeld()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("record %d events: %w", len(group), err)
	}
	var again []*groupMember
	var at []int
	observe := func(string) {}
	if r.group != nil && r.group.cfg.ObservePrediction != nil {
		observe = r.group.cfg.ObservePrediction
	}
	for i := range group {
		if !r.needsLock(&group[i].ev) {
			continue
		}
		switch {
		case preds[i].held():
			observe(PredictionHeld)
		case preds[i].missed():
			observe(PredictionMissed)
			replies[i].err = errMissed // answered below
			again, at = append(again, group[i]), append(at, i)
		default:
			observe(PredictionDuplicate)
			// A copy of a recorded event: a duplicate, as planEntity answers it; the
			// entity the lock may have created for it is deleted again (undo_create).
			// What the entity is was not checked: not settled.
			*plans[i] = entityPlan{primary: plans[i].primary}
			plans[i].primary.res = Result{Duplicate: true}
		}
	}
	r.learn(plans, preds)
	replies = r.committed(group, replies, plans)
	if len(again) == 0 {
		return replies, nil
	}
	rest, err := r.recordLocked(ctx, again, lockHeld)
	if err != nil {
		// As grouper.run does for a group that cannot commit: each alone.
		for k, m := range again {
			replies[at[k]] = r.recordAlone(m)
		}
		return replies, nil
	}
	for k, i := range at {
		replies[i] = rest[k]
	}
	return replies, nil
}

// errMissed marks, until it runs again, a member whose prediction missed.
var errMissed = errors.New("the entity was not as predicted")

// learn records what a committed group left its entities as, and, when the group was
// predicted (preds), how many predictions held and missed.
func (r *Recorder) learn(plans []*entityPlan, preds []prediction) {
	p := r.predictions
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.settled)+len(plans) > p.max {
		clear(p.settled)
	}
	for i, plan := range plans {
		if plan == nil || !r.needsLock(&plan.primary.ev) {
			continue
		}
		key := plan.primary.ev.EntityKey
		held := preds == nil || !preds[i].missed()
		if preds != nil {
			if held {
				p.credit = min(p.credit+1, maxCredit)
			} else {
				p.credit = max(p.credit-missCost, 0)
			}
		}
		if held && plan.settled {
			p.settled[key] = plan.after
		} else {
			delete(p.settled, key)
		}
	}
}
