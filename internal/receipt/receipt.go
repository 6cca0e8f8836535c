// Package receipt records authentic webhook events exactly once and applies their state
// transitions atomically: the "atomic event receipt" of docs/architecture.md.
//
// One transaction per request (READ COMMITTED); concurrent single-event requests share
// one (group commit, group.go), each member still decided against its own entity:
//
//	[BEGIN + lock the entity row (FOR UPDATE) + read its context]       round trip 1
//	decide in Go (decide.go): the state machine for the delivered event, then the
//	    parked events it releases, in provider order
//	[INSERT the receipt with its final outcome ON CONFLICT (endpoint, event_id) DO
//	    NOTHING, moving the entity (guarded by the state it was locked in) and writing
//	    the outbox row in the same statement; one statement per released parked event;
//	    COMMIT]                                                          round trip 2
//
// The entity's context is read by its own statement after the lock is granted, so it
// sees every transaction that held the lock before: whether the event is recorded
// already (a duplicate then writes nothing and is answered at once) and the entity's
// parked events. The unique index stays the arbiter of duplicates: a copy that the
// context could not see (there is no entity to lock) conflicts on it and changes
// nothing (Result.Duplicate). The receipt is written once, with its outcome.
//
// # Parking
//
// Providers do not deliver in order. An event whose type has a transition, none of
// which starts from the entity's current state, but one of which starts from a state
// the entity can still reach, is recorded as `parked`. Every transaction that locks the
// entity re-evaluates its parked events after deciding the delivered one, so the
// transaction that moves the entity to the state a parked event needs applies it, with
// its own outbox row and dedupe key, exactly as if it had arrived in order. A parked
// event that has become stale, or can no longer apply, is closed as ignored_state. A
// parked event older than spec.stateMachine.parkFor is closed as `expired` (park.go).
//
// # Round trips
//
// Statements are pipelined with pgx batches, so an event costs:
//
//   - 2 round trips when the state machine handles its type: [BEGIN + lock + context],
//     then [receipt-and-effects + COMMIT]; 1 when the Recorder predicted the entity
//     (predict.go) and the database found it so;
//   - 1 round trip when no transition handles its type (unhandled) or it has no entity
//     key: [BEGIN + insert with the final outcome + COMMIT].
//
// A group of n concurrent deliveries costs the same in all: [BEGIN + per member: lock
// and check the prediction, the receipt-and-effects statement gated on it + COMMIT]
// when predicted, its members that missed then running again. An Adyen batch of n
// items costs at most n+1 round trips in one transaction: the locks of all its entities,
// in key order, ride with the first item's, and each item's receipt statement rides in
// the same batch as the next item's lock. (The first execution of each
// statement on a connection adds one round trip to prepare it; pgx caches the prepared
// statements per connection.) BEGIN carries store.PlanOnIndexes in the same round trip,
// so those cached plans use the indexes even when they were made on nearly empty tables
// (tx.go, indexesStep).
//
// # Entities
//
// Managed mode (no spec.entity.table) keeps entities in hookkeeper's `entities` table,
// including amount and last_event_at. App-table mode locks the app's row
// (`SELECT ... FOR UPDATE`, identifiers quoted, tenant bound) and updates it with
// the pattern's guarded update (`SET state = @to WHERE key = @key AND tenant = @tenant AND
// state = @from`); its last_event_at (for stale detection) lives in hookkeeper's
// `entity_clocks` table, written under the app row's lock. The state column is read as
// text and compared with the parameter typed as the column, so text and enum columns
// work; the amount column is read as bigint (minor units).
//
// onUnmatched: Record stores the receipt as `unmatched` (Reprocess can apply it later);
// Retry rolls back and returns ErrRetryLater (the receiver answers 503); Create (managed
// only) inserts the entity in stateMachine.initial, with the event's amount as its
// amount, when the lock finds none, and then evaluates the event; should the receipt
// turn out to be a duplicate, the entity is deleted again. An event without an entity
// key is always recorded as unmatched: there is nothing to retry for or to create.
//
// # Outbox
//
// An applied transition with `emit` inserts one outbox row whose dedupe_key is
// DedupeKey(endpoint, event id, emit): stable across retries, replays and replicas.
// The row's columns carry the dedupe key, the emitted type, the entity key, the source
// event id and occurredAt (the dispatcher's envelope); its payload (the envelope's data)
// adds what only the transaction knows:
//
//	{"transition", "from", "to", "source": {"id", "type", "receivedAt"},
//	 "event": <the provider event's raw JSON>}
//
// built in SQL from the receipt row, so the raw body crosses the network once.
// The transaction sends no NOTIFY (a commit-time NOTIFY serialises all commits on
// PostgreSQL's notify-queue lock): WithOutboxWritten runs after the commit, and the
// receiver uses it to wake its dispatcher and send the cross-replica NOTIFY.
package receipt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/event"
	"github.com/hookkeeper/hookkeeper/internal/statemachine"
)

// Event is the event package's Event; it lives there so config can produce events
// without importing this package.
type Event = event.Event

// Outcome is the stored outcome of a receipt: the state machine's vocabulary.
type Outcome = statemachine.Outcome

// The outcomes, the values of webhook_events.outcome: the state machine's, under the
// names they are recorded by, and the two decided without it.
const (
	OutcomeApplied      = statemachine.Apply
	OutcomeIgnoredState = statemachine.IgnoredState
	OutcomeGuardFailed  = statemachine.GuardFailed
	OutcomeGuardError   = statemachine.GuardError
	OutcomeParked       = statemachine.Park
	OutcomeUnhandled    = statemachine.Unhandled
	// OutcomeExpired: a parked event that waited longer than parkFor (park.go).
	OutcomeExpired Outcome = "expired"
	// OutcomeUnmatched: no entity with the event's key, or no key (onUnmatched Record).
	OutcomeUnmatched Outcome = "unmatched"
)

// Outcomes lists every outcome, in the order reports print them.
var Outcomes = []Outcome{OutcomeApplied, OutcomeParked, OutcomeIgnoredState, OutcomeGuardFailed,
	OutcomeGuardError, OutcomeExpired, OutcomeUnmatched, OutcomeUnhandled}

// Details stored for outcomes decided outside the state machine.
const (
	DetailNoEntity   = "no entity with this key"
	DetailNoKey      = "the event has no entity key"
	DetailCreated    = "entity created in the initial state"
	detailNotHandled = "no transition handles this event type"
	detailParkingOff = "parking is off (stateMachine.parkFor is 0s)"
)

// Result is what happened to one event.
type Result struct {
	// Duplicate: the receipt already existed; nothing was changed.
	Duplicate bool
	// Outcome of this delivery (empty for a duplicate of Record; the stored outcome for
	// Reprocess of a receipt that is no longer replayable).
	Outcome Outcome
	Detail  string
	// Transition, FromState and ToState are set when Outcome is applied.
	Transition, FromState, ToState string
	// OutboxKey is the dedupe key of the outbox row written (applied with emit only).
	OutboxKey string
	// ReceiptID is the webhook_events id (0 for a duplicate).
	ReceiptID int64
	// EventID is the provider's event id (set for Released results).
	EventID string
	// Released are the parked events this transaction applied or closed, in the order
	// it decided them. Transition is also set for guard_error: the transition whose
	// guard failed to evaluate.
	Released []Result
}

// ErrRetryLater is returned when onUnmatched is Retry and the entity does not exist yet:
// the transaction was rolled back and the receiver answers 503 so the provider retries.
var ErrRetryLater = errors.New("entity does not exist yet; retry later")

// LiveFunc fetches the provider's current object for an event whose transition
// re-fetches (spec.provider.refetch). It runs before the transaction, outside any lock;
// its result is the guard's `live` variable (or a LiveValue). An error fails the request
// (503), except a LiveRejected, which records the event as guard_failed.
type LiveFunc func(ctx context.Context, ev Event) (any, error)

// LiveValue is what a LiveFunc may return instead of the bare value: Value is the
// guard's `live`; Detail (which object was fetched, in which state) is added to the
// receipt's detail when a transition that re-fetches applies or its guard fails.
type LiveValue struct {
	Value  any
	Detail string
}

// LiveRejected is a LiveFunc error that is the provider's answer, not a failure: the
// object the event names does not exist, or there is none to fetch. A retry would get
// the same answer, so the event is recorded as guard_failed with Detail (Reprocess can
// apply it later) and the request succeeds.
type LiveRejected struct{ Detail string }

func (e *LiveRejected) Error() string { return e.Detail }

// Option configures a Recorder.
type Option func(*Recorder)

// WithLive supplies `live` for events whose transitions re-fetch. Without it, `live` is
// null, so a guard that needs it fails closed (guard_failed).
func WithLive(f LiveFunc) Option { return func(r *Recorder) { r.live = f } }

// WithDeadlockRetries sets how often a transaction that PostgreSQL aborted as a deadlock
// victim (possible for Adyen batches touching several entities) is retried; default 3.
func WithDeadlockRetries(n int) Option { return func(r *Recorder) { r.deadlockRetries = n } }

// WithOutboxWritten sets a hook called after a transaction that wrote at least one
// outbox row has committed (Record, RecordBatch and Reprocess), to wake dispatchers. It
// runs on the request's goroutine, so it must not block.
func WithOutboxWritten(f func()) Option { return func(r *Recorder) { r.outboxWritten = f } }

// WithParkFor sets how long an event may stay parked (spec.stateMachine.parkFor, which
// NewRecorder reads); 0 turns parking off: events that cannot apply yet are recorded as
// ignored_state, and ExpireParked expires every parked event.
func WithParkFor(d time.Duration) Option { return func(r *Recorder) { r.parkFor = d } }

// WithHousekeeping runs the parking sweep's reads (which entities to expire, the
// parked backlog) on db instead of the recorder's pool; expiring still runs on the
// recorder's pool. A receiver pool shares one small housekeeping pool per database
// among its endpoints (see outbox.Options.Housekeeping).
func WithHousekeeping(db *pgxpool.Pool) Option { return func(r *Recorder) { r.housekeeping = db } }

// Recorder runs the receipt transaction for one endpoint. It is safe for concurrent use.
type Recorder struct {
	pool *pgxpool.Pool
	// housekeeping is WithHousekeeping's pool, else pool.
	housekeeping    *pgxpool.Pool
	ep              *config.Endpoint
	key             string
	sql             statements
	mode            mode
	live            LiveFunc
	deadlockRetries int
	outboxWritten   func()
	group           *grouper
	recent          *recentEvents
	parkFor         time.Duration
	// predictions, when set, lets groups run in one round trip (predict.go), remembering
	// up to predictedEntities entities.
	predictions       *predictions
	predictedEntities int
}

// NewRecorder prepares the SQL of ep. The pool must reach ep's database with the schema
// migrated (store.Migrate).
func NewRecorder(pool *pgxpool.Pool, ep *config.Endpoint, opts ...Option) *Recorder {
	s, m := buildStatements(ep)
	r := &Recorder{pool: pool, housekeeping: pool, ep: ep, key: ep.Key(), sql: s, mode: m,
		deadlockRetries: 3, parkFor: ep.ParkFor(), predictedEntities: DefaultPredictedEntities}
	r.group = newGrouper(r, DefaultGroupCommit)
	r.recent = newRecentEvents(DefaultRecentEvents)
	for _, o := range opts {
		o(r)
	}
	if d := ep.Spec.Retention.DedupeFor; d != nil {
		r.recent = r.recent.forgetAfter(d.Duration)
	}
	if r.group != nil && !r.group.cfg.NoPrediction {
		r.predictions = newPredictions(r.predictedEntities)
	}
	return r
}

// DedupeKey is the outbox dedupe key (the delivery's Idempotency-Key) of the effect
// `emit` of event eventID at endpoint: "hk_" + the first 40 hex digits of SHA-256 over
// the three values, NUL-separated. Deterministic, never random, at most 43 characters.
func DedupeKey(endpoint, eventID, emit string) string {
	h := sha256.New()
	h.Write([]byte(endpoint))
	h.Write([]byte{0})
	h.Write([]byte(eventID))
	h.Write([]byte{0})
	h.Write([]byte(emit))
	return "hk_" + hex.EncodeToString(h.Sum(nil))[:40]
}

// Record stores one event and applies its transition in one transaction. A database
// error is returned wrapped, with nothing committed; ErrRetryLater likewise.
func (r *Recorder) Record(ctx context.Context, ev Event) (Result, error) {
	res, err := r.RecordBatch(ctx, []Event{ev})
	if err != nil {
		return Result{}, err
	}
	return res[0], nil
}

// atStoredPrecision returns evs with every OccurredAt cut to the microseconds PostgreSQL
// keeps (a copy when one changes; the caller's events are left alone). A delivered
// event is decided with its own time and later compared with stored, truncated copies
// (its parked neighbours, the entity's clock); with the nanoseconds some providers send
// (Mailgun's float seconds, Twitch's RFC 3339), two events in one microsecond would be
// ordered one way when delivered in order and the other when one was parked first.
func atStoredPrecision(evs []Event) []Event {
	out, copied := evs, false
	for i, ev := range evs {
		if ev.OccurredAt == nil {
			continue
		}
		t := ev.OccurredAt.Truncate(time.Microsecond)
		if t.Equal(*ev.OccurredAt) {
			continue
		}
		if !copied {
			out, copied = slices.Clone(evs), true
		}
		out[i].OccurredAt = &t
	}
	return out
}

// RecordBatch records several events (an Adyen batch) in ONE transaction, in order:
// either every item is stored and applied, or nothing is.
//
// A delivery whose every event this Recorder wrote the receipt of lately is answered
// as duplicates at once, without the database (recent.go).
func (r *Recorder) RecordBatch(ctx context.Context, evs []Event) ([]Result, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	evs = atStoredPrecision(evs)
	if r.recent.hasAll(evs) {
		results := make([]Result, len(evs))
		for i := range results {
			results[i].Duplicate = true
		}
		return results, nil
	}
	lives := make([]any, len(evs))
	for i, ev := range evs {
		var err error
		if lives[i], err = r.fetchLive(ctx, ev); err != nil {
			return nil, err
		}
	}
	if r.group != nil && len(evs) == 1 {
		res, err := r.group.record(ctx, evs[0], lives[0])
		if err != nil {
			return nil, err
		}
		return []Result{res}, nil
	}
	return r.recordInOneTx(ctx, evs, lives)
}

// fetchLive fetches `live` for ev when a transition of its type re-fetches: the
// LiveFunc's value, or its LiveRejected (the provider's answer, which the decision
// records); nil when nothing re-fetches. Any other error fails the delivery.
func (r *Recorder) fetchLive(ctx context.Context, ev Event) (any, error) {
	if r.live == nil || !r.ep.Machine.NeedsLive(ev.Type) {
		return nil, nil
	}
	v, err := r.live(ctx, ev)
	if rejected := (*LiveRejected)(nil); errors.As(err, &rejected) {
		return rejected, nil
	}
	if err != nil {
		return nil, fmt.Errorf("re-fetch the provider's object for event %s: %w", ev.ID, err)
	}
	return v, nil
}

// recordInOneTx records evs in one transaction (retried when PostgreSQL chose it as a
// deadlock victim). Each event's lock rides with the previous event's writes; a batch's
// entities are locked (or created) first, in key order (lockInKeyOrder).
func (r *Recorder) recordInOneTx(ctx context.Context, evs []Event, lives []any) ([]Result, error) {
	plans := make([]*entityPlan, len(evs))
	err := r.inTxWithRetries(ctx, func(tx *pipelinedTx) error {
		created := map[string]bool{}
		tx.queue(r.lockInKeyOrder(evs, created)...)
		for i := range evs {
			ev := &evs[i]
			plans[i] = &entityPlan{primary: &candidate{ev: *ev, live: lives[i]}}
			if !r.needsLock(ev) {
				tx.queue(r.writeStep(plans[i].primary, r.unlockedDecision(ev), false))
				continue
			}
			var view entityView
			tx.queue(r.lockSteps(ev, &view)...)
			if err := tx.send(ctx); err != nil {
				return err
			}
			if created[ev.EntityKey] {
				// lockInKeyOrder created it: this is its first event.
				view.created = true
				delete(created, ev.EntityKey)
			}
			steps, err := r.planEntity(ctx, plans[i], &view, true)
			if err != nil {
				return err
			}
			tx.queue(steps...)
		}
		return nil
	})
	if errors.Is(err, ErrRetryLater) {
		return nil, ErrRetryLater
	}
	if err != nil {
		return nil, fmt.Errorf("record %d events: %w", len(evs), err)
	}
	results := make([]Result, len(evs))
	for i, p := range plans {
		results[i] = p.result()
		if !results[i].Duplicate {
			r.recent.add(evs[i].ID)
		}
	}
	r.learn(plans, nil)
	r.afterCommit(results)
	return results, nil
}

// lockInKeyOrder locks the entities of a batch of several entities in entity-key order,
// in the batch's first round trip, before any item is decided; with onUnmatched Create
// it creates the missing ones (in the initial state, with no amount: the item that
// starts an entity's history sets it, as its own lock would have) and reports them in
// created, for the first item of each to be decided as the one that created it. Items
// are then decided in batch order, each taking its entity's lock again (held already).
// Without this a batch took its locks in the order of its items: two batches, or a
// batch and a group (which locks in key order), could each hold or create an entity the
// other waits for, and PostgreSQL breaks such a cycle only after deadlock_timeout, a
// second or more per cycle while the provider waits.
func (r *Recorder) lockInKeyOrder(evs []Event, created map[string]bool) []step {
	var keys []string
	for i := range evs {
		if r.needsLock(&evs[i]) {
			keys = append(keys, evs[i].EntityKey)
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	if len(keys) < 2 {
		return nil
	}
	steps := make([]step, len(keys))
	for i, k := range keys {
		args := r.entityArgs(k)
		if r.mode == managedCreate {
			args["initial"], args["amount"] = r.ep.Machine.Initial(), nil
		}
		steps[i] = step{sql: r.sql.lock, args: args, read: func(br pgx.BatchResults) error {
			var view entityView
			if err := scanLock(br, &view); err != nil {
				return fmt.Errorf("lock entity %s: %w", k, err)
			}
			if view.created {
				created[k] = true
			}
			return nil
		}}
	}
	return steps
}

// afterCommit tells the WithOutboxWritten hook that committed results wrote outbox rows.
func (r *Recorder) afterCommit(results []Result) {
	if r.outboxWritten == nil {
		return
	}
	for _, res := range results {
		if res.OutboxKey != "" {
			r.outboxWritten()
			return
		}
		for _, rel := range res.Released {
			if rel.OutboxKey != "" {
				r.outboxWritten()
				return
			}
		}
	}
}

// needsLock says whether ev's outcome depends on an entity: a transition handles its
// type and it names an entity.
func (r *Recorder) needsLock(ev *Event) bool {
	return ev.EntityKey != "" && r.ep.Machine.Handles(ev.Type)
}

// unlockedDecision is the outcome of an event that needs no lock (see needsLock).
func (r *Recorder) unlockedDecision(ev *Event) decision {
	if r.ep.Machine.Handles(ev.Type) {
		return decision{outcome: OutcomeUnmatched, detail: DetailNoKey}
	}
	return decision{outcome: OutcomeUnhandled, detail: detailNotHandled}
}
