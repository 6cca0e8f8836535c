package receipt

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// statements are the SQL texts of one endpoint, built once by NewRecorder. Identifiers
// from the spec are quoted with pgx.Identifier; every value is a named bind parameter
// (pgx.NamedArgs), built by entityArgs, receiptArgs and moveArgs in decide.go. CTE names say what they hold:
// `receipt` (the receipt row written), `moved` (the entity row the transition moved),
// `clock` (the app-table entity's last applied event time), `effect` (the outbox row).
type statements struct {
	// lock locks the entity row (FOR UPDATE; managedCreate inserts it in
	// stateMachine.initial first) and returns (found, state, amount, last_event_at,
	// created), or no row when there is no entity. App tables return a NULL
	// last_event_at: their clock is read by entityContext.
	lock string
	// lockExisting is lock without managedCreate's insert (expiry locks only entities
	// that exist).
	lockExisting string
	// entityContext runs after lock, in its own snapshot, so it sees everything
	// committed before the lock was granted: whether @event_id is recorded already
	// (seen), the app-table clock, and the entity's parked events in provider order.
	entityContext string
	// insertApplied inserts a receipt as applied (ON CONFLICT (endpoint, event_id) DO
	// NOTHING) and, only when the row was inserted, moves the entity (guarded by the
	// state it was locked in), writes the clock and the outbox row. No row for a
	// duplicate, else (receipt id, outbox row written).
	insertApplied string
	// insertOutcome inserts a receipt with an outcome that has no effects (parked,
	// unhandled, unmatched, ignored_state, guard_failed, guard_error). Returns the id, or
	// no row for a duplicate; for managedCreate a duplicate also deletes the entity its
	// lock created (@created).
	insertOutcome string
	// undoCreate deletes the entity managedCreate's lock created for a duplicate.
	undoCreate string
	// applyStored applies a transition to a stored receipt (a parked event released, or
	// a replay): sets its outcome to applied, guarded by the outcome it was read with
	// (@was), moves the entity, writes the clock and the outbox row. Fails the
	// transaction when the guarded update matches nothing, never commits half of it.
	applyStored string
	// setOutcome sets a stored receipt's outcome and detail.
	setOutcome string
	// load reads a stored receipt (Reprocess); loadLocked also locks it.
	load, loadLocked string
	// expirable lists entities with events parked for longer than @park_for_seconds;
	// expire closes them as expired (under the entity's lock).
	expirable, expire string
	// parkedStats counts the endpoint's parked events and the oldest one's age.
	parkedStats string
	// expectLock and expectContext replace lock and entityContext in a predicted group
	// (predict.go), whose decisions are sent before anything is read: expectLock takes
	// the lock and holds only if the locked row is the predicted one (@expect_state,
	// @expect_amount, @expect_last_at, @expect_created); expectContext holds only if
	// expectLock did, @event_id is unrecorded, nothing of the entity is parked and (app
	// tables) the clock reads @expect_last_at. Each answers whether it holds.
	expectLock, expectContext string
	// predictedOutcome and predictedApplied are insertOutcome and insertApplied gated on
	// the member's prediction: they write nothing when it missed.
	predictedOutcome, predictedApplied string
}

// mode is how the entity is found; it decides the lock statement and its parameters.
type mode int

const (
	managed mode = iota
	managedCreate
	appTable
)

// failUnlessMoved is the last column of the statements that move an entity: it fails
// the statement, and so the transaction, when the receipt was written but the guarded
// update matched no row. Impossible while the entity lock is held, and never committed
// as applied if it happened.
const failUnlessMoved = `(SELECT 'hookkeeper: the entity''s state changed during the transaction'
   WHERE NOT EXISTS (SELECT 1 FROM moved))::int`

func buildStatements(ep *config.Endpoint) (statements, mode) {
	t := ep.Tables
	m := managed
	switch {
	case ep.Spec.Entity.Table != nil:
		m = appTable
	case ep.Spec.Entity.OnUnmatched == v1alpha1.UnmatchedCreate:
		m = managedCreate
	}
	var s statements

	// Locking.
	managedLock := fmt.Sprintf(`SELECT true, state, amount, last_event_at, false FROM %s
WHERE endpoint = @endpoint AND entity_key = @entity_key FOR UPDATE`, t.Entities)
	switch m {
	case managed:
		s.lock = managedLock
	case managedCreate:
		// The DO UPDATE locks an existing row and returns it; xmax = 0 tells a row this
		// statement created. Concurrent creators of one entity serialise on the primary
		// key, never on a prior SELECT. @amount is set only by an event that can start
		// the entity's history (lockSteps); an entity created without one (a refund
		// parked before its capture) takes the first such event's amount while it is
		// still in the initial state.
		s.lock = fmt.Sprintf(`INSERT INTO %s AS e (endpoint, entity_key, state, amount)
VALUES (@endpoint, @entity_key, @initial, @amount)
ON CONFLICT (endpoint, entity_key) DO UPDATE
  SET amount = CASE WHEN e.amount IS NULL AND e.state = @initial THEN EXCLUDED.amount ELSE e.amount END
RETURNING true, e.state, e.amount, e.last_event_at, (e.xmax = 0)`, t.Entities)
	case appTable:
		q := appQuoted(ep)
		amount := "NULL::bigint"
		if q.amount != "" {
			amount = fmt.Sprintf("a.%s::bigint", q.amount)
		}
		s.lock = fmt.Sprintf(`SELECT true, a.%s::text, %s, NULL::timestamptz, false
FROM %s a WHERE %s FOR UPDATE OF a`, q.state, amount, q.table, q.where("a"))
	}
	s.lockExisting = s.lock
	if m == managedCreate {
		s.lockExisting = managedLock
	}

	clock := "NULL::timestamptz"
	if m == appTable {
		clock = fmt.Sprintf(`(SELECT last_event_at FROM %s WHERE endpoint = @endpoint AND entity_key = @entity_key)`, t.EntityClocks)
	}
	s.entityContext = fmt.Sprintf(`SELECT
  EXISTS (SELECT 1 FROM %[1]s WHERE endpoint = @endpoint AND event_id = @event_id) AS seen,
  %[2]s AS last_event_at,
  (SELECT jsonb_agg(jsonb_build_object(
      'id', p.id, 'eventId', p.event_id, 'type', p.event_type, 'payload', p.payload,
      'headers', p.headers, 'occurredAt', p.occurred_at, 'amount', p.amount)
    ORDER BY p.occurred_at, p.received_at, p.id)
   FROM %[1]s p
   WHERE p.endpoint = @endpoint AND p.entity_key = @entity_key AND p.outcome = 'parked') AS parked`, t.Events, clock)

	// Writing a new receipt.
	s.undoCreate = fmt.Sprintf(`DELETE FROM %s WHERE endpoint = @endpoint AND entity_key = @entity_key`, t.Entities)
	moved := moveEntity(ep, m, t)
	s.insertOutcome, s.insertApplied = insertStatements(m, t, moved, false)
	s.predictedOutcome, s.predictedApplied = insertStatements(m, t, moved, true)

	// Writing a stored receipt.
	s.applyStored = fmt.Sprintf(`WITH receipt AS (
  UPDATE %s SET outcome = 'applied', detail = @detail, processed_at = now()
  WHERE id = @receipt_id AND outcome = @was
  RETURNING id, event_id, event_type, received_at, payload),
%s,
%s
SELECT EXISTS (SELECT 1 FROM effect), %s`, t.Events, moved, effect(t), failUnlessMoved)
	s.setOutcome = fmt.Sprintf(`UPDATE %s SET outcome = @outcome, detail = @detail, processed_at = now()
WHERE id = @receipt_id`, t.Events)
	s.load = fmt.Sprintf(`SELECT event_id, event_type, entity_key, payload, headers, occurred_at, amount, outcome
FROM %s WHERE id = @receipt_id AND endpoint = @endpoint`, t.Events)
	s.loadLocked = s.load + " FOR UPDATE"

	// Parking's deadline, counted from when the receipt was parked (processed_at, which
	// every outcome change sets and a re-evaluation that leaves it parked does not), not
	// from when it arrived: a receipt a replay parks days after it arrived gets its full
	// parkFor, instead of expiring at the next sweep.
	parkedSince := "COALESCE(processed_at, received_at)"
	olderThan := parkedSince + " < now() - make_interval(secs => @park_for_seconds)"
	s.expirable = fmt.Sprintf(`SELECT DISTINCT entity_key FROM %s
WHERE endpoint = @endpoint AND outcome = 'parked' AND %s LIMIT @limit`, t.Events, olderThan)
	s.expire = fmt.Sprintf(`UPDATE %s SET outcome = 'expired', detail = @detail, processed_at = now()
WHERE endpoint = @endpoint AND entity_key = @entity_key AND outcome = 'parked' AND %s`, t.Events, olderThan)
	s.expectLock, s.expectContext = expectStatements(s.lock, m, t)
	s.parkedStats = fmt.Sprintf(`SELECT count(*), COALESCE(EXTRACT(EPOCH FROM now() - min(%s)), 0)::float8
FROM %s WHERE endpoint = @endpoint AND outcome = 'parked'`, parkedSince, t.Events)
	return s, m
}

// insertStatements builds insertOutcome and insertApplied (see statements). predicted
// builds the forms a predicted group sends (predict.go): they write nothing unless the
// member's expectLock and expectContext found the entity as predicted, which they
// record in the transaction's predictionSetting.
func insertStatements(m mode, t store.Tables, moved string, predicted bool) (outcome, applied string) {
	const columns = `(endpoint, event_id, event_type, entity_key, payload, headers, occurred_at, amount, outcome, detail, processed_at)`
	source := `VALUES (@endpoint, @event_id, @event_type, @entity_key, @payload, @headers, @occurred_at, @amount, %s, @detail, now())`
	created := "@created::bool"
	if predicted {
		// A SELECT's parameters take no type from the columns: each is cast.
		source = `SELECT @endpoint::text, @event_id::text, @event_type::text, @entity_key::text, @payload::jsonb,
  @headers::jsonb, @occurred_at::timestamptz, @amount::bigint, %s, @detail::text, now()
WHERE ` + predictionNow + ` = '` + predictionHeld + `'`
		// @created is the predicted one, which expectLock found true when it held. An
		// entity the lock created for a copy is deleted, as undoCreate does; one it
		// created for a member that missed is deleted too, so that the member's second
		// run creates it, as if the first had never been.
		created = fmt.Sprintf(`CASE WHEN %[1]s = '%[2]s' THEN @created::bool ELSE %[1]s IN ('%[3]s', '%[4]s') END`,
			predictionNow, predictionHeld, predictionSeenCreated, predictionMissedCreated)
	}
	insertReceipt := fmt.Sprintf(`INSERT INTO %s
  %s
%s
ON CONFLICT (endpoint, event_id) DO NOTHING
RETURNING id, event_id, event_type, received_at, payload`, t.Events, columns, source)
	undoCreate := ""
	if m == managedCreate {
		undoCreate = fmt.Sprintf(`,
undo_create AS (
  DELETE FROM %s WHERE endpoint = @endpoint AND entity_key = @entity_key
    AND NOT EXISTS (SELECT 1 FROM receipt) AND %s)`, t.Entities, created)
	}
	outcome = fmt.Sprintf("WITH receipt AS (%s)%s\nSELECT id FROM receipt",
		fmt.Sprintf(insertReceipt, "@outcome::text"), undoCreate)
	applied = fmt.Sprintf(`WITH receipt AS (%s),
%s%s,
%s
SELECT receipt.id, EXISTS (SELECT 1 FROM effect), %s
FROM receipt`, fmt.Sprintf(insertReceipt, "'applied'"), moved, undoCreate, effect(t), failUnlessMoved)
	return outcome, applied
}

// predictionSetting is the transaction-local setting in which a predicted group's
// expectLock and expectContext record, member by member, what became of the member's
// prediction; the member's writes that follow read it. Its values:
//
//	locked          expectLock found the row predicted (expectContext decides on)
//	held            and expectContext found the event new and nothing parked: written
//	seen            the event is recorded already: a duplicate, nothing written
//	missed          not as predicted: nothing written, the member runs again
//	seen-created, missed-created   as seen and missed, and the lock created the
//	                entity: the member's statement deletes it again (undo_create)
const (
	predictionSetting       = "hookkeeper.prediction"
	predictionLocked        = "locked"
	predictionHeld          = "held"
	predictionSeen          = "seen"
	predictionSeenCreated   = "seen-created"
	predictionMissed        = "missed"
	predictionMissedCreated = "missed-created"
	predictionNow           = "current_setting('" + predictionSetting + "', true)"
)

// expectStatements builds expectLock and expectContext around lock (see statements).
// Each records its answer in predictionSetting and returns it. The lock's columns are
// named by the CTE; app tables' last_at is always NULL there, their clock is compared
// by expectContext.
func expectStatements(lock string, m mode, t store.Tables) (expectLock, expectContext string) {
	same := `l.state IS NOT DISTINCT FROM @expect_state::text
    AND l.amount IS NOT DISTINCT FROM @expect_amount::bigint AND l.created = @expect_created::bool`
	clock := ""
	if m == appTable {
		clock = fmt.Sprintf(`
    OR (SELECT last_event_at FROM %s WHERE endpoint = @endpoint AND entity_key = @entity_key)
       IS DISTINCT FROM @expect_last_at::timestamptz`, t.EntityClocks)
	} else {
		same += `
    AND l.last_at IS NOT DISTINCT FROM @expect_last_at::timestamptz`
	}
	record := func(answer string) string {
		return fmt.Sprintf(`SELECT set_config('%s', %s, true)`, predictionSetting, answer)
	}
	// count(*) = 1 reads (and so locks) every row the key matches: a key that matches
	// several is a miss here and an error in the unpredicted path (scanLock).
	expectLock = fmt.Sprintf(`WITH l(found, state, amount, last_at, created) AS (
%s)
%s`, lock, record(fmt.Sprintf(`(SELECT CASE
  WHEN count(*) = 1 AND bool_and(%s) THEN '%s'
  WHEN bool_or(l.created) THEN '%s'
  ELSE '%s' END FROM l)`, same, predictionLocked, predictionMissedCreated, predictionMissed)))
	created := fmt.Sprintf(`(%s = '%s' OR (%s = '%s' AND @expect_created::bool))`,
		predictionNow, predictionMissedCreated, predictionNow, predictionLocked)
	expectContext = record(fmt.Sprintf(`CASE
  WHEN EXISTS (SELECT 1 FROM %[1]s WHERE endpoint = @endpoint AND event_id = @event_id)
    THEN CASE WHEN %[2]s THEN '%[3]s' ELSE '%[4]s' END
  WHEN %[5]s IS DISTINCT FROM '%[6]s' THEN %[5]s
  WHEN EXISTS (SELECT 1 FROM %[1]s p WHERE p.endpoint = @endpoint AND p.entity_key = @entity_key AND p.outcome = 'parked')%[7]s
    THEN CASE WHEN %[2]s THEN '%[8]s' ELSE '%[9]s' END
  ELSE '%[10]s' END`, t.Events, created, predictionSeenCreated, predictionSeen, predictionNow, predictionLocked,
		clock, predictionMissedCreated, predictionMissed, predictionHeld))
	return expectLock, expectContext
}

// moveEntity is the `moved` CTE: the guarded update of the atomic event receipt, only
// when the `receipt` CTE wrote a row; for app tables followed by the `clock` CTE.
func moveEntity(ep *config.Endpoint, m mode, t store.Tables) string {
	if m != appTable {
		return fmt.Sprintf(`moved AS (
  UPDATE %s SET state = @to, version = version + 1,
    last_event_at = GREATEST(last_event_at, @occurred_at), updated_at = now()
  WHERE endpoint = @endpoint AND entity_key = @entity_key AND state = @from
    AND EXISTS (SELECT 1 FROM receipt)
  RETURNING 1)`, t.Entities)
	}
	q := appQuoted(ep)
	// @app_from and @app_to take the state column's type (text or an enum), @from and
	// @to stay text for the outbox payload.
	return fmt.Sprintf(`moved AS (
  UPDATE %s a SET %s = @app_to
  WHERE %s AND a.%s = @app_from AND EXISTS (SELECT 1 FROM receipt)
  RETURNING 1),
clock AS (
  INSERT INTO %s (endpoint, entity_key, last_event_at)
  SELECT @endpoint, @entity_key, @occurred_at FROM moved WHERE @occurred_at::timestamptz IS NOT NULL
  ON CONFLICT (endpoint, entity_key) DO UPDATE
    SET last_event_at = GREATEST(%s.last_event_at, EXCLUDED.last_event_at))`,
		q.table, q.state, q.where("a"), q.state, t.EntityClocks, t.EntityClocks)
}

// effect is the `effect` CTE: the outbox row of an applied transition with emit. Its
// payload is built in SQL from the receipt row, so the raw body crosses the network
// once.
func effect(t store.Tables) string {
	return fmt.Sprintf(`effect AS (
  INSERT INTO %s (endpoint, dedupe_key, entity_key, event_type, source_event_id, payload, occurred_at)
  SELECT @endpoint, @outbox_key, @entity_key, @emit, receipt.event_id,
    jsonb_build_object(
      'transition', @transition::text, 'from', @from::text, 'to', @to::text,
      'source', jsonb_build_object('id', receipt.event_id, 'type', receipt.event_type, 'receivedAt', receipt.received_at),
      'event', receipt.payload),
    @occurred_at
  FROM moved, receipt
  WHERE @emit::text <> ''
  ON CONFLICT (endpoint, dedupe_key) DO NOTHING
  RETURNING 1)`, t.Outbox)
}

type quotedTable struct {
	table, key, state, amount, tenant string
}

// where is the app row's key (and tenant) condition on alias.
func (q quotedTable) where(alias string) string {
	w := fmt.Sprintf("%s.%s = @app_key", alias, q.key)
	if q.tenant != "" {
		w += fmt.Sprintf(" AND %s.%s = @tenant", alias, q.tenant)
	}
	return w
}

func appQuoted(ep *config.Endpoint) quotedTable {
	tbl := ep.Spec.Entity.Table
	q := quotedTable{
		table: pgx.Identifier{tbl.Schema, tbl.Name}.Sanitize(),
		key:   pgx.Identifier{tbl.KeyColumn}.Sanitize(),
		state: pgx.Identifier{tbl.StateColumn}.Sanitize(),
	}
	if tbl.AmountColumn != "" {
		q.amount = pgx.Identifier{tbl.AmountColumn}.Sanitize()
	}
	if tbl.Tenant != nil {
		q.tenant = pgx.Identifier{tbl.Tenant.Column}.Sanitize()
	}
	return q
}
