// Package receipt records authentic webhook events exactly once and applies their state
// transitions atomically: the seed's "atomic event receipt" pattern (DESIGN.md sections
// 4 and 5).
//
// One transaction per request (READ COMMITTED); concurrent single-event requests share
// one (group commit, group.go), each member still decided against its own entity:
//
//	lock the entity row (SELECT ... FOR UPDATE)        (pipelined with BEGIN)
//	decide with the state machine (Go: state, stale check, CEL guard)
//	INSERT the receipt with its final outcome ON CONFLICT (endpoint, event_id) DO
//	    NOTHING; only if a row was inserted: UPDATE the entity, guarded by the state it
//	    was locked in, and INSERT the outbox row    (one statement)
//	COMMIT                                            (pipelined with it)
//
// The unique index arbitrates duplicates, never a prior SELECT: a concurrent copy of an
// event blocks on the entity lock, decides against the state the first copy left, and
// its receipt INSERT conflicts, so the statement changes nothing (Result.Duplicate).
// When there is no entity to lock, the copy's INSERT waits for the first transaction on
// the unique index instead. The receipt is written once, with its outcome: no UPDATE of
// a fresh receipt, so each index of webhook_events is written once per event.
//
// # Round trips
//
// Statements are pipelined with pgx batches, so an event costs:
//
//   - 2 round trips when the state machine handles its type (applied, ignored_state,
//     guard_failed, unmatched, and duplicates of these): [BEGIN + lock], then
//     [receipt-and-effects + COMMIT];
//   - 1 round trip when no transition handles its type (unhandled) or it has no entity
//     key: [BEGIN + insert with the final outcome + COMMIT].
//
// A group of n concurrent deliveries costs 2 round trips in all: every lock rides with
// BEGIN, every receipt statement with COMMIT.
// An Adyen batch of n items costs at most n+1 round trips in one transaction: each
// item's receipt statement rides in the same batch as the next item's lock.
// (The first execution of each statement on a connection adds one round trip to prepare
// it; pgx caches the prepared statements per connection.)
//
// # Entities
//
// Managed mode (no spec.entity.table) keeps entities in hookkeeper's `entities` table,
// including amount and last_event_at. App-table mode locks the app's row
// (`SELECT ... FOR UPDATE OF t`, identifiers quoted, tenant bound) and updates it with
// the seed's guarded update (`SET state = $to WHERE key = $k AND tenant = $t AND
// state = $current`); its last_event_at (for stale detection) lives in hookkeeper's
// `entity_clocks` table, written under the app row's lock. The state column is read as
// text and compared with the parameter typed as the column, so text and enum columns
// work; the amount column is read as bigint (minor units).
//
// onUnmatched: Record stores the receipt as `unmatched` (Reprocess can apply it later);
// Retry rolls back and returns ErrRetryLater (the receiver answers 503); Create (managed
// only) inserts the entity in stateMachine.initial, with the event's amount as its
// amount, when the lock finds none, and then evaluates the event; should the receipt
// turn out to be a duplicate, the same statement deletes that entity again. Retry
// answers before any receipt is written, so a copy of an already recorded event whose
// entity has since been deleted is also told to retry. An event without an entity key is always
// recorded as unmatched: there is nothing to retry for or to create.
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
// built in SQL from the inserted receipt, so the raw body crosses the network once.
// The transaction sends no NOTIFY (a commit-time NOTIFY serialises all commits on
// PostgreSQL's notify-queue lock): WithOutboxWritten runs after the commit, and the
// receiver uses it to wake its dispatcher and send the cross-replica NOTIFY.
package receipt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/event"
	"github.com/hookkeeper/hookkeeper/internal/statemachine"
)

// Event is the event package's Event; it lives there so config can produce events
// without importing this package.
type Event = event.Event

// Outcome is the stored outcome of a receipt.
type Outcome string

// The outcomes, the values of webhook_events.outcome.
const (
	OutcomeApplied      Outcome = "applied"
	OutcomeIgnoredState Outcome = "ignored_state"
	OutcomeGuardFailed  Outcome = "guard_failed"
	OutcomeUnmatched    Outcome = "unmatched"
	OutcomeUnhandled    Outcome = "unhandled"
)

// Details stored for outcomes decided outside the state machine.
const (
	DetailNoEntity   = "no entity with this key"
	DetailNoKey      = "the event has no entity key"
	DetailCreated    = "entity created in the initial state"
	detailRaced      = "the entity's state changed during the transaction"
	detailNotHandled = "no transition handles this event type"
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

// Recorder runs the receipt transaction for one endpoint. It is safe for concurrent use.
type Recorder struct {
	pool            *pgxpool.Pool
	ep              *config.Endpoint
	key             string
	sql             statements
	mode            mode
	live            LiveFunc
	deadlockRetries int
	outboxWritten   func()
	group           *grouper
}

// NewRecorder prepares the SQL of ep. The pool must reach ep's database with the schema
// migrated (store.Migrate).
func NewRecorder(pool *pgxpool.Pool, ep *config.Endpoint, opts ...Option) *Recorder {
	s, m := buildStatements(ep)
	r := &Recorder{pool: pool, ep: ep, key: ep.Key(), sql: s, mode: m, deadlockRetries: 3}
	r.group = newGrouper(r, DefaultGroupCommit)
	for _, o := range opts {
		o(r)
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

// RecordBatch records several events (an Adyen batch) in ONE transaction, in order:
// either every item is stored and applied, or nothing is.
func (r *Recorder) RecordBatch(ctx context.Context, evs []Event) ([]Result, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	lives := make([]any, len(evs))
	if r.live != nil {
		for i, ev := range evs {
			if !r.ep.Machine.NeedsLive(ev.Type) {
				continue
			}
			v, err := r.live(ctx, ev)
			if rejected := (*LiveRejected)(nil); errors.As(err, &rejected) {
				v, err = rejected, nil
			}
			if err != nil {
				return nil, fmt.Errorf("re-fetch the provider's object for event %s: %w", ev.ID, err)
			}
			lives[i] = v
		}
	}
	if r.group != nil && len(evs) == 1 {
		res, err := r.group.record(ctx, evs[0], lives[0])
		if err != nil {
			return nil, err
		}
		return []Result{res}, nil
	}
	return r.recordWithRetries(ctx, evs, lives)
}

// recordWithRetries runs evs in one transaction, again when PostgreSQL chose it as a
// deadlock victim.
func (r *Recorder) recordWithRetries(ctx context.Context, evs []Event, lives []any) ([]Result, error) {
	for attempt := 0; ; attempt++ {
		res, err := r.recordOnce(ctx, evs, lives)
		if err != nil && isDeadlock(err) && attempt < r.deadlockRetries && ctx.Err() == nil {
			continue
		}
		return res, err
	}
}

func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// step is one queued statement and how to read its result.
type step struct {
	sql  string
	args []any
	read func(pgx.BatchResults) error
}

// pipeline sends the queued steps in one round trip and reads their results in order.
func pipeline(ctx context.Context, conn *pgxpool.Conn, steps []step) error {
	b := &pgx.Batch{}
	for _, s := range steps {
		b.Queue(s.sql, s.args...)
	}
	br := conn.SendBatch(ctx, b)
	var err error
	for _, s := range steps {
		if err = s.read(br); err != nil {
			break
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

func execStep(sql string, args ...any) step {
	return step{sql: sql, args: args, read: func(br pgx.BatchResults) error {
		_, err := br.Exec()
		return err
	}}
}

var (
	beginStep  = execStep("BEGIN ISOLATION LEVEL READ COMMITTED")
	commitStep = step{sql: "COMMIT", read: func(br pgx.BatchResults) error {
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		// COMMIT of an aborted transaction answers ROLLBACK without an error.
		if tag.String() != "COMMIT" {
			return fmt.Errorf("commit answered %q", tag.String())
		}
		return nil
	}}
)

// locked is the entity as the lock statement returned it.
type locked struct {
	found   bool
	state   *string
	amount  *int64
	lastAt  *time.Time
	created bool
}

func (r *Recorder) recordOnce(ctx context.Context, evs []Event, lives []any) (results []Result, err error) {
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire database connection: %w", err)
	}
	defer func() {
		if err != nil {
			rollback(conn)
		}
		conn.Release()
	}()

	results = make([]Result, len(evs))
	pending := []step{beginStep}
	for i := range evs {
		ev := &evs[i]
		res := &results[i]
		if !r.needsLock(ev) {
			pending = append(pending, r.recordStep(ev, r.unlockedVerdict(ev), locked{}, res))
			continue
		}

		var ent locked
		if err := pipeline(ctx, conn, append(pending, r.lockStep(ev, &ent))); err != nil {
			return nil, err
		}
		pending = nil
		v, retry := r.judge(ev, lives[i], ent, true)
		if retry {
			return nil, ErrRetryLater
		}
		pending = append(pending, r.recordStep(ev, v, ent, res))
	}
	if err := pipeline(ctx, conn, append(pending, commitStep)); err != nil {
		return nil, fmt.Errorf("record events: %w", err)
	}
	r.afterCommit(results)
	return results, nil
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
	}
}

// lockStep locks ev's entity and reads it into dst when it runs.
func (r *Recorder) lockStep(ev *Event, dst *locked) step {
	return step{sql: r.sql.lock, args: append([]any{r.key, ev.EntityKey}, r.lockArgs(ev)...), read: func(br pgx.BatchResults) error {
		var err error
		if *dst, err = scanLock(br); err != nil {
			return fmt.Errorf("lock entity of event %s: %w", ev.ID, err)
		}
		return nil
	}}
}

// needsLock says whether ev's outcome depends on an entity: a transition handles its
// type and it names an entity.
func (r *Recorder) needsLock(ev *Event) bool {
	return ev.EntityKey != "" && r.ep.Machine.Handles(ev.Type)
}

// unlockedVerdict is the outcome of an event that needs no lock (see needsLock).
func (r *Recorder) unlockedVerdict(ev *Event) verdict {
	if r.ep.Machine.Handles(ev.Type) {
		return verdict{outcome: OutcomeUnmatched, detail: DetailNoKey}
	}
	return verdict{outcome: OutcomeUnhandled, detail: detailNotHandled}
}

// verdict is what the state machine decided for one locked event.
type verdict struct {
	outcome Outcome
	detail  string
	// t, from and outboxKey are set when outcome is applied.
	t         *statemachine.Transition
	from      string
	outboxKey string
}

// judge evaluates one event against its locked entity. retry is set when there is no
// entity, onUnmatched is Retry and the caller can retry (a delivery, not a replay).
func (r *Recorder) judge(ev *Event, live any, ent locked, canRetry bool) (verdict, bool) {
	if !ent.found {
		if canRetry && r.ep.Spec.Entity.OnUnmatched == v1alpha1.UnmatchedRetry {
			return verdict{}, true
		}
		return verdict{outcome: OutcomeUnmatched, detail: DetailNoEntity}, false
	}
	state := ""
	if ent.state != nil {
		state = *ent.state
	}
	live, liveDetail, rejected := unwrapLive(live)
	d := r.ep.Machine.Decide(statemachine.Input{
		Event:  *ev,
		Entity: statemachine.Entity{Key: ev.EntityKey, State: state, Amount: ent.amount, LastEventAt: ent.lastAt},
		Live:   live,
	})
	// The fetch speaks for the transitions that re-fetch: their guard failing or holding.
	if d.Verdict == statemachine.GuardFailed || (d.Verdict == statemachine.Apply && d.Transition.Refetch) {
		if rejected != nil {
			d = statemachine.Decision{Verdict: statemachine.GuardFailed, Detail: rejected.Detail}
		} else {
			d.Detail = joinDetail(d.Detail, liveDetail)
		}
	}
	detail := d.Detail
	if ent.created {
		detail = joinDetail(DetailCreated, detail)
	}
	if d.Verdict != statemachine.Apply {
		return verdict{outcome: Outcome(d.Verdict), detail: detail}, false
	}
	v := verdict{outcome: OutcomeApplied, detail: detail, t: d.Transition, from: state}
	if d.Transition.Emit != "" {
		v.outboxKey = DedupeKey(r.key, ev.ID, d.Transition.Emit)
	}
	return v, false
}

// recordStep is the one statement that inserts the receipt with its final outcome and,
// only when the receipt row was inserted (not a duplicate), applies the transition and
// writes the outbox row. It fills res when it runs.
func (r *Recorder) recordStep(ev *Event, v verdict, ent locked, res *Result) step {
	args := r.receiptArgs(ev)
	if v.outcome != OutcomeApplied {
		args = append(args, string(v.outcome), v.detail)
		sql := r.sql.insertFinal
		if ent.created {
			// A duplicate must leave no trace, not even the entity its lock created.
			sql = r.sql.insertFinalCreated
			args = append(args, true)
		}
		return step{sql: sql, args: args, read: func(br pgx.BatchResults) error {
			id, dup, err := scanID(br.QueryRow())
			if err != nil {
				return fmt.Errorf("insert receipt of event %s: %w", ev.ID, err)
			}
			*res = Result{Duplicate: dup, ReceiptID: id}
			if !dup {
				res.Outcome, res.Detail = v.outcome, v.detail
			}
			return nil
		}}
	}
	t := v.t
	args = append(args, v.detail, t.Name, v.from, t.To, v.outboxKey, t.Emit)
	switch r.mode {
	case appTable:
		args = append(args, ev.EntityKey, v.from, t.To)
		if tn := r.ep.Spec.Entity.Table.Tenant; tn != nil {
			args = append(args, tn.Value)
		}
	case managedCreate:
		args = append(args, ent.created)
	}
	return step{sql: r.sql.insertApply, args: args, read: func(br pgx.BatchResults) error {
		var id int64
		var wroteOutbox bool
		if err := br.QueryRow().Scan(&id, &wroteOutbox, nil); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				*res = Result{Duplicate: true}
				return nil
			}
			return fmt.Errorf("apply transition %s to event %s: %w", t.Name, ev.ID, err)
		}
		*res = Result{ReceiptID: id, Outcome: OutcomeApplied, Detail: v.detail,
			Transition: t.Name, FromState: v.from, ToState: t.To}
		if wroteOutbox {
			res.OutboxKey = v.outboxKey
		}
		return nil
	}}
}

// reprocessStep records the verdict on an existing receipt (Reprocess): it updates the
// receipt's outcome and, for an applied verdict, moves the entity and writes the outbox
// row, in one statement. It fills res when it runs.
func (r *Recorder) reprocessStep(ev *Event, v verdict, receiptID int64, res *Result) step {
	*res = Result{ReceiptID: receiptID}
	if v.outcome != OutcomeApplied {
		res.Outcome, res.Detail = v.outcome, v.detail
		return execStep(r.sql.outcome, receiptID, string(v.outcome), v.detail)
	}
	t := v.t
	args := []any{r.key, ev.EntityKey, v.from, t.To, ev.OccurredAt, receiptID, v.outboxKey, t.Emit, v.detail, t.Name}
	if r.mode == appTable {
		args = append(args, ev.EntityKey, v.from, t.To)
		if tn := r.ep.Spec.Entity.Table.Tenant; tn != nil {
			args = append(args, tn.Value)
		}
	}
	return step{sql: r.sql.apply, args: args, read: func(br pgx.BatchResults) error {
		var outcome string
		var wroteOutbox bool
		if err := br.QueryRow().Scan(&outcome, &wroteOutbox); err != nil {
			return fmt.Errorf("apply transition %s to event %s: %w", t.Name, ev.ID, err)
		}
		if outcome != string(OutcomeApplied) {
			// The guarded update matched no row: impossible while the lock is held, but
			// recorded rather than assumed.
			res.Outcome, res.Detail = Outcome(outcome), detailRaced
			return nil
		}
		res.Outcome, res.Detail = OutcomeApplied, v.detail
		res.Transition, res.FromState, res.ToState = t.Name, v.from, t.To
		if wroteOutbox {
			res.OutboxKey = v.outboxKey
		}
		return nil
	}}
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

// receiptArgs are $1..$8 of insertApply and insertFinal.
func (r *Recorder) receiptArgs(ev *Event) []any {
	headers := ev.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	return []any{r.key, ev.ID, ev.Type, ev.EntityKey, rawJSON(ev.Payload), headers, ev.OccurredAt, ev.Amount}
}

// lockArgs are the mode's parameters of the lock statement, from $3.
func (r *Recorder) lockArgs(ev *Event) []any {
	switch r.mode {
	case managedCreate:
		return []any{r.ep.Machine.Initial(), ev.Amount}
	case appTable:
		args := []any{ev.EntityKey}
		if tn := r.ep.Spec.Entity.Table.Tenant; tn != nil {
			args = append(args, tn.Value)
		}
		return args
	}
	return nil
}

// rawJSON passes the payload to a jsonb parameter unchanged; an empty payload is
// stored as JSON null rather than failing the insert.
func rawJSON(p json.RawMessage) any {
	if len(p) == 0 {
		return "null"
	}
	return string(p)
}

func scanID(row pgx.Row) (id int64, dup bool, err error) {
	if err := row.Scan(&id); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, true, nil
		}
		return 0, false, err
	}
	return id, false, nil
}

// scanLock reads the lock statement's result: no row when the entity does not exist.
func scanLock(br pgx.BatchResults) (ent locked, err error) {
	rows, err := br.Query()
	if err != nil {
		return ent, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
		var found *bool
		if err := rows.Scan(&found, &ent.state, &ent.amount, &ent.lastAt, &ent.created); err != nil {
			return ent, err
		}
		ent.found = found != nil && *found
	}
	if err := rows.Err(); err != nil {
		return ent, err
	}
	if n > 1 {
		return ent, fmt.Errorf("the entity key matches %d rows; the key column (with the tenant) must identify one row", n)
	}
	return ent, nil
}

// rollback ends a failed transaction. When the connection cannot answer, the pool
// destroys it on release (it is not idle), and PostgreSQL rolls back on disconnect.
func rollback(conn *pgxpool.Conn) {
	if conn.Conn().PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = conn.Exec(ctx, "ROLLBACK")
}
