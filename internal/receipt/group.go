package receipt

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Group commit
//
// Concurrent single-event deliveries share one transaction: the receiver's cost per
// event is dominated by per-transaction work (BEGIN, COMMIT and its WAL flush, two
// network round trips, their syscalls on both sides), not by the rows. A group of n
// events costs two round trips in all:
//
//	[BEGIN + lock every member's entity, in entity-key order]
//	decide each member with the state machine (Go)
//	[each member's receipt-and-effects statement + COMMIT]
//
// or, when the Recorder predicts what the first round trip would read (predict.go), one:
//
//	decide each member on its predicted entity (Go)
//	[BEGIN + lock and check each member's entity, its statement gated on the check + COMMIT]
//
// Members of a group have distinct event ids and distinct entity keys, so each member's
// decision depends only on its own locked row, exactly as if it ran alone; a delivery
// that conflicts with a queued one waits for the next group. Locks are taken in key order
// so groups (and replicas) never wait on each other in a cycle.
//
// Nothing is acknowledged before its group commits. A group that fails for any reason
// is rolled back and each member then runs alone, so one member's failure (its own
// deadlock, a constraint of the app's table, a timeout) never fails another. A group,
// a group of one included, waits at most groupLockTimeout for a lock; a member that
// contends for one then runs alone, in a transaction of its own that waits as long as
// it must, and the leader goes on with the queue. A member that onUnmatched Retry turns
// away is answered ErrRetryLater and left out of the second round trip: it wrote nothing.
//
// No delivery waits for a group to fill: a group is whatever is queued when a
// transaction slot frees up, so a lone request starts at once and costs what it would
// alone (two round trips, one when predicted). A delivery that finds nobody queued, no transaction running and
// no group forming runs on its own goroutine, without being handed to a leader and back.
// Deliveries that arrive while a transaction runs queue for the next group; a second
// transaction opens only for deliveries that have queued OverflowAfter (behind a slow
// commit, say), so at low concurrency groups grow instead of every delivery paying a
// transaction of its own. Groups grow only under concurrency, where they pay.

// GroupCommit configures group commit (WithGroupCommit).
type GroupCommit struct {
	// MaxEvents is the largest group; 1 turns group commit off.
	MaxEvents int
	// Transactions is how many group transactions run at once. Requests beyond them
	// queue and form the next groups.
	Transactions int
	// OverflowAfter, when positive, opens the transactions beyond the first only for
	// deliveries that have queued that long behind the running one: until then they form
	// the next group, a larger one. Zero opens them as soon as deliveries queue.
	OverflowAfter time.Duration
	// NoPrediction makes every group lock and read its entities before deciding (two
	// round trips) instead of deciding on what the Recorder predicts and having the
	// database check it (one round trip while predictions hold; predict.go).
	NoPrediction bool
	// Observe, when set, is told the size of every group run (a metric).
	Observe func(size int)
	// ObservePrediction, when set, is told what became of each member's prediction:
	// PredictionHeld, PredictionDuplicate or PredictionMissed (a metric).
	ObservePrediction func(result string)
}

// DefaultGroupCommit runs one group transaction at a time while they keep up, so the
// deliveries that arrive meanwhile share the next (larger groups: less CPU per event);
// deliveries that have waited OverflowAfter open a second, so a slow commit holds the
// queue no longer than that (a lock wait, no longer than groupLockTimeout). Groups grow
// with load.
var DefaultGroupCommit = GroupCommit{MaxEvents: 32, Transactions: 2, OverflowAfter: 2 * time.Millisecond}

// WithGroupCommit sets how concurrent single-event RecordBatch calls share
// transactions; NewRecorder uses DefaultGroupCommit. A GroupCommit that sets neither
// MaxEvents nor Transactions is DefaultGroupCommit (with its Observe). MaxEvents 1
// gives every call a transaction of its own, on the caller's goroutine.
func WithGroupCommit(g GroupCommit) Option {
	return func(r *Recorder) { r.group = newGrouper(r, g) }
}

func newGrouper(r *Recorder, g GroupCommit) *grouper {
	if g.MaxEvents == 0 && g.Transactions == 0 {
		observe := g.Observe
		g = DefaultGroupCommit
		g.Observe = observe
	}
	if g.MaxEvents <= 1 || g.Transactions < 1 {
		return nil
	}
	return &grouper{r: r, cfg: g}
}

// isLockTimeout tells the error of a group that waited groupLockTimeout for a lock.
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// groupMember is one queued delivery and where its answer goes.
type groupMember struct {
	ctx   context.Context
	ev    Event
	live  any
	reply chan groupReply // buffered: the leader never blocks on a caller that left
}

type groupReply struct {
	res Result
	err error
}

// grouper queues single-event deliveries and runs them in shared transactions, at most
// cfg.Transactions at once. Each running transaction has a leader goroutine that keeps
// taking groups until the queue is empty.
type grouper struct {
	r   *Recorder
	cfg GroupCommit

	mu      sync.Mutex
	queue   []*groupMember
	leaders int
	// overflow is armed while deliveries queue behind a running transaction and
	// another may yet open (cfg.OverflowAfter).
	overflow *time.Timer
	// forming is held by the leader whose group is being taken and locked.
	forming sync.Mutex
}

// record queues ev and waits for its group's answer or for ctx.
func (g *grouper) record(ctx context.Context, ev Event, live any) (Result, error) {
	m := &groupMember{ctx: ctx, ev: ev, live: live, reply: make(chan groupReply, 1)}
	g.mu.Lock()
	if len(g.queue) == 0 && g.leaders < g.open() && g.forming.TryLock() {
		// Nobody waits and no transaction runs (or, with no OverflowAfter, a slot is
		// free): the delivery is a group of one, run on its own goroutine, with no
		// hand-over to a leader and back.
		g.leaders++
		g.mu.Unlock()
		g.runAlone(m)
	} else {
		g.queue = append(g.queue, m)
		switch {
		case g.leaders < g.open():
			g.leaders++
			go g.lead()
		case g.leaders < g.cfg.Transactions && g.overflow == nil:
			g.overflow = time.AfterFunc(g.cfg.OverflowAfter, g.overflowed)
		}
		g.mu.Unlock()
	}
	select {
	case rep := <-m.reply:
		return rep.res, rep.err
	case <-ctx.Done():
		// Either still queued (take skips it) or inside a transaction that may yet
		// commit: unacknowledged either way, and a redelivery is a duplicate.
		return Result{}, fmt.Errorf("record event %s: %w", ev.ID, ctx.Err())
	}
}

// open is how many transactions may run before deliveries have queued OverflowAfter.
// Called with g.mu held.
func (g *grouper) open() int {
	if g.cfg.OverflowAfter > 0 {
		return 1
	}
	return g.cfg.Transactions
}

// overflowed opens another transaction for the deliveries that have waited
// cfg.OverflowAfter behind the running ones.
func (g *grouper) overflowed() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.overflow = nil
	if len(g.queue) > 0 && g.leaders < g.cfg.Transactions {
		g.leaders++
		go g.lead()
	}
}

// runAlone runs m as a group of one on the caller's goroutine, holding g.forming (which
// the caller took) until its lock is held, like any leader: deliveries that arrive
// meanwhile queue for the next group. Afterwards the slot passes to a leader when
// deliveries have queued, else it is given back.
func (g *grouper) runAlone(m *groupMember) {
	if g.cfg.Observe != nil {
		g.cfg.Observe(1)
	}
	g.run([]*groupMember{m}, sync.OnceFunc(g.forming.Unlock))
	g.mu.Lock()
	if len(g.queue) > 0 {
		go g.lead()
	} else {
		g.leaders--
	}
	g.mu.Unlock()
}

// lead runs groups until the queue is empty. One group at a time forms and takes its
// locks (g.forming): the next group is taken when the previous one holds its locks and
// sends its inserts (a predicted group: when it sends its one batch), so the round trips
// of concurrent groups overlap and each group is what arrived during one round trip,
// not two.
func (g *grouper) lead() {
	for {
		g.forming.Lock()
		g.mu.Lock()
		group := g.take()
		if len(group) == 0 {
			g.leaders--
			g.mu.Unlock()
			g.forming.Unlock()
			return
		}
		g.mu.Unlock()
		if g.cfg.Observe != nil {
			g.cfg.Observe(len(group))
		}
		g.run(group, sync.OnceFunc(g.forming.Unlock))
	}
}

// take removes the next group from the queue, oldest first: up to MaxEvents members
// with distinct event ids and entity keys. Members whose caller has gone are dropped.
// Called with g.mu held.
func (g *grouper) take() []*groupMember {
	var group []*groupMember
	ids := map[string]bool{}
	keys := map[string]bool{}
	rest := g.queue[:0]
	for _, m := range g.queue {
		switch {
		case m.ctx.Err() != nil:
			m.reply <- groupReply{err: fmt.Errorf("record event %s: %w", m.ev.ID, m.ctx.Err())}
		case len(group) < g.cfg.MaxEvents && !ids[m.ev.ID] && (m.ev.EntityKey == "" || !keys[m.ev.EntityKey]):
			ids[m.ev.ID] = true
			if m.ev.EntityKey != "" {
				keys[m.ev.EntityKey] = true
			}
			group = append(group, m)
		default:
			rest = append(rest, m)
		}
	}
	clear(g.queue[len(rest):])
	g.queue = rest
	return group
}

// run commits one group. When the group cannot commit, each member whose caller still
// waits gets a transaction of its own, on its own goroutine: the leader moves on to the
// next group instead of waiting behind a member that contends for a lock.
// lockHeld is called once the group holds its locks (or has failed).
func (g *grouper) run(group []*groupMember, lockHeld func()) {
	defer lockHeld()
	ctx, cancel := groupContext(group)
	defer cancel()
	replies, err := g.r.recordGroup(ctx, group, lockHeld)
	if err == nil {
		for i, m := range group {
			m.reply <- replies[i]
		}
		return
	}
	if len(group) == 1 && !isLockTimeout(err) {
		// Alone, the member's error is its own: answered as Record always answered it.
		group[0].reply <- groupReply{err: err}
		return
	}
	for _, m := range group {
		if m.ctx.Err() != nil {
			m.reply <- groupReply{err: fmt.Errorf("record event %s: %w", m.ev.ID, m.ctx.Err())}
			continue
		}
		go func() { m.reply <- g.r.recordAlone(m) }()
	}
}

// recordAlone records m in a transaction of its own, which waits for locks as long as
// it must: a member whose group could not commit it.
func (r *Recorder) recordAlone(m *groupMember) groupReply {
	res, err := r.recordInOneTx(m.ctx, []Event{m.ev}, []any{m.live})
	if err != nil {
		return groupReply{err: err}
	}
	return groupReply{res: res[0]}
}

// groupContext lives while any member's caller waits: the group is abandoned only when
// nobody is left to acknowledge. Its deadline is the latest of the members', none if a
// member has none. A group of one runs under its member's own context, which is all of
// that already.
func groupContext(group []*groupMember) (context.Context, context.CancelFunc) {
	if len(group) == 1 {
		return group[0].ctx, func() {}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(group[0].ctx))
	latest, bounded := group[0].ctx.Deadline()
	for _, m := range group[1:] {
		d, ok := m.ctx.Deadline()
		bounded = bounded && ok
		if d.After(latest) {
			latest = d
		}
	}
	if bounded {
		var cancelDeadline context.CancelFunc
		ctx, cancelDeadline = context.WithDeadline(ctx, latest)
		cancelAll := cancel
		cancel = func() { cancelDeadline(); cancelAll() }
	}
	var mu sync.Mutex
	waiting := len(group)
	stops := make([]func() bool, len(group))
	for i, m := range group {
		stops[i] = context.AfterFunc(m.ctx, func() {
			mu.Lock()
			waiting--
			last := waiting == 0
			mu.Unlock()
			if last {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// groupLockTimeout bounds how long a group, a group of one included, waits for a row or
// index lock (an entity another replica's transaction or the app itself holds, a
// concurrent copy of an event). Past it the group fails and its members run alone, in
// transactions of their own with no such bound, where waiting delays only the member
// that contends, not the deliveries queued behind the group: a group holds the turn to
// form (grouper.forming) until it holds its locks.
const groupLockTimeout = "50ms"

// recordGroup runs the group's transaction: one round trip when its entities are
// predicted (predict.go), else two (recordLocked). The replies are in group order; an
// error means nothing was committed.
func (r *Recorder) recordGroup(ctx context.Context, group []*groupMember, lockHeld func()) ([]groupReply, error) {
	if preds, ok := r.predict(group); ok {
		return r.recordPredicted(ctx, group, preds, lockHeld)
	}
	return r.recordLocked(ctx, group, lockHeld)
}

// keyOrder is the order in which group's entities are locked: entity-key order, so
// concurrent groups never wait on each other in a cycle.
func keyOrder(group []*groupMember) []int {
	order := make([]int, len(group))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(group[a].ev.EntityKey, group[b].ev.EntityKey) })
	return order
}

// recordLocked runs the group's transaction in two round trips: lock and read every
// member's entity, then decide and write.
func (r *Recorder) recordLocked(ctx context.Context, group []*groupMember, lockHeld func()) ([]groupReply, error) {
	order := keyOrder(group)
	var replies []groupReply
	var plans []*entityPlan
	err := r.inTxWith(ctx, groupSettingsStep, func(tx *pipelinedTx) error {
		replies = make([]groupReply, len(group))
		plans = make([]*entityPlan, len(group))
		views := make([]entityView, len(group))
		locks := 0
		for _, i := range order {
			plans[i] = &entityPlan{primary: &candidate{ev: group[i].ev, live: group[i].live}}
			if r.needsLock(&group[i].ev) {
				tx.queue(r.lockSteps(&group[i].ev, &views[i])...)
				locks++
			}
		}
		if locks > 0 {
			if err := tx.send(ctx); err != nil {
				return fmt.Errorf("lock entities of %d events: %w", len(group), err)
			}
		} // else nothing to lock: BEGIN rides with the inserts, one round trip in all.
		lockHeld()

		for _, i := range order {
			ev := &group[i].ev
			if !r.needsLock(ev) {
				tx.queue(r.writeStep(plans[i].primary, r.unlockedDecision(ev), false))
				continue
			}
			steps, err := r.planEntity(ctx, plans[i], &views[i], true)
			if errors.Is(err, ErrRetryLater) {
				// Turned away before writing anything: left out of the commit.
				replies[i].err = ErrRetryLater
				continue
			}
			if err != nil {
				return err
			}
			tx.queue(steps...)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("record %d events: %w", len(group), err)
	}
	r.learn(plans, nil)
	return r.committed(group, replies, plans), nil
}

// committed answers a committed group's members from their plans (those left out of it
// keep their error) and tells what the commit wrote.
func (r *Recorder) committed(group []*groupMember, replies []groupReply, plans []*entityPlan) []groupReply {
	results := make([]Result, 0, len(group))
	for i := range replies {
		if replies[i].err == nil {
			replies[i].res = plans[i].result()
			results = append(results, replies[i].res)
			if !replies[i].res.Duplicate {
				r.recent.add(group[i].ev.ID)
			}
		}
	}
	r.afterCommit(results)
	return replies
}
