package receipt

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
)

// statements are the SQL texts of one endpoint, built once by NewRecorder. Identifiers
// from the spec are quoted with pgx.Identifier; every value is a bind parameter.
type statements struct {
	// lock locks the entity row (FOR UPDATE; managedCreate inserts it in
	// stateMachine.initial first) and returns (found, state, amount, last_event_at,
	// created), or no row when there is no entity. Params $1 endpoint, $2 entity key,
	// then the mode's params from $3.
	lock string
	// insertApply inserts the receipt as applied (ON CONFLICT (endpoint, event_id) DO
	// NOTHING) and, only when the row was inserted, moves the entity (guarded by the
	// state it was locked in), writes the stale clock and inserts the outbox row, in one
	// statement. No row for a duplicate, else (receipt id, outbox row written).
	// Params: $1 endpoint, $2 event id, $3 type, $4 entity key, $5 payload, $6 headers,
	// $7 occurred_at, $8 amount, $9 detail, $10 transition name, $11 from state, $12 to
	// state, $13 dedupe key, $14 emit type; then app-table params from $15 (key, from,
	// to, tenant) or, for managedCreate, $15 whether the lock created the entity.
	insertApply string
	// insertFinal inserts a receipt with an outcome that has no effects (unhandled,
	// unmatched, ignored_state, guard_failed). Params $1..$8 as insertApply, $9 outcome,
	// $10 detail. Returns the id, or no row for a duplicate.
	insertFinal string
	// insertFinalCreated is insertFinal for managedCreate when the lock created the
	// entity ($11 true): a duplicate deletes that entity again.
	insertFinalCreated string
	// apply (Reprocess) moves the entity (guarded by its current state), writes the
	// stale clock, inserts the outbox row and sets the existing receipt's outcome, in one
	// statement. Params: $1 endpoint, $2 entity key, $3 from state, $4 to state,
	// $5 occurred_at, $6 receipt id, $7 dedupe key, $8 emit type, $9 detail,
	// $10 transition name, then app-table params from $11 (key, from, to, tenant).
	apply string
	// outcome (Reprocess) sets a receipt's outcome without effects. Params $1 id,
	// $2 outcome, $3 detail.
	outcome string
	// load reads a stored receipt for Reprocess, locking it.
	load string
}

// mode is how the entity is found; it decides the extra lock parameters.
type mode int

const (
	managed mode = iota
	managedCreate
	appTable
)

func buildStatements(ep *config.Endpoint) (statements, mode) {
	t := ep.Tables
	m := managed
	tbl := ep.Spec.Entity.Table
	switch {
	case tbl != nil:
		m = appTable
	case ep.Spec.Entity.OnUnmatched == v1alpha1.UnmatchedCreate:
		m = managedCreate
	}

	insertReceipt := fmt.Sprintf(`INSERT INTO %s
  (endpoint, event_id, event_type, entity_key, payload, headers, occurred_at, amount, outcome, detail, processed_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, %%s, %%s, now())
ON CONFLICT (endpoint, event_id) DO NOTHING
RETURNING id, received_at, payload`, t.Events)
	// Only when managedCreate's lock created the entity and the receipt is a duplicate.
	undoCreate := fmt.Sprintf(`d AS (
  DELETE FROM %s WHERE endpoint = $1 AND entity_key = $4 AND %%s::bool
    AND NOT EXISTS (SELECT 1 FROM r))`, t.Entities)

	var s statements
	s.insertFinal = fmt.Sprintf("WITH r AS (%s)\nSELECT id FROM r", fmt.Sprintf(insertReceipt, "$9", "$10"))
	s.insertFinalCreated = fmt.Sprintf("WITH r AS (%s),\n%s\nSELECT id FROM r",
		fmt.Sprintf(insertReceipt, "$9", "$10"), fmt.Sprintf(undoCreate, "$11"))

	switch m {
	case managed:
		s.lock = fmt.Sprintf(`SELECT true, state, amount, last_event_at, false FROM %s
WHERE endpoint = $1 AND entity_key = $2 FOR UPDATE`, t.Entities)
	case managedCreate:
		// The no-op DO UPDATE locks an existing row and returns it; xmax = 0 tells a row
		// this statement created. Concurrent creators of one entity serialise on the
		// primary key, never on a prior SELECT.
		s.lock = fmt.Sprintf(`INSERT INTO %s AS t (endpoint, entity_key, state, amount)
VALUES ($1, $2, $3, $4)
ON CONFLICT (endpoint, entity_key) DO UPDATE SET state = t.state
RETURNING true, t.state, t.amount, t.last_event_at, (t.xmax = 0)`, t.Entities)
	case appTable:
		app := appLock(ep, t.EntityClocks)
		s.lock = fmt.Sprintf(`SELECT found, state, amount, last_event_at, false FROM (%s) e`, app("$1", "$2", "$3", "$4"))
	}

	// The outbox payload is built in SQL from the inserted receipt (RETURNING), so the
	// raw body crosses the network once. The last column fails the statement, and so the
	// transaction, if the receipt was inserted but the guarded update matched nothing:
	// impossible while the entity lock is held, but never committed as applied.
	recordOutbox := fmt.Sprintf(`o AS (
  INSERT INTO %s (endpoint, dedupe_key, entity_key, event_type, source_event_id, payload, occurred_at)
  SELECT $1, $13, $4, $14, $2,
    jsonb_build_object(
      'transition', $10::text, 'from', $11::text, 'to', $12::text,
      'source', jsonb_build_object('id', $2::text, 'type', $3::text, 'receivedAt', r.received_at),
      'event', r.payload),
    $7
  FROM u, r
  WHERE $14::text <> ''
  ON CONFLICT (endpoint, dedupe_key) DO NOTHING
  RETURNING 1)
SELECT r.id, EXISTS (SELECT 1 FROM o),
  (SELECT %s WHERE NOT EXISTS (SELECT 1 FROM u))::int
FROM r`, t.Outbox, quoteLiteral("hookkeeper: "+detailRaced))
	applied := fmt.Sprintf(insertReceipt, "'applied'", "$9")
	switch m {
	case appTable:
		q := appQuoted(ep)
		tenant := ""
		if q.tenant != "" {
			tenant = fmt.Sprintf(" AND t.%s = $18", q.tenant)
		}
		s.insertApply = fmt.Sprintf(`WITH r AS (%s),
u AS (
  UPDATE %s t SET %s = $17
  WHERE t.%s = $15 AND t.%s = $16%s AND EXISTS (SELECT 1 FROM r)
  RETURNING 1),
c AS (
  INSERT INTO %s (endpoint, entity_key, last_event_at)
  SELECT $1, $4, $7 FROM u WHERE $7::timestamptz IS NOT NULL
  ON CONFLICT (endpoint, entity_key) DO UPDATE
    SET last_event_at = GREATEST(%s.last_event_at, EXCLUDED.last_event_at)),
%s`, applied, q.table, q.state, q.key, q.state, tenant, t.EntityClocks, t.EntityClocks, recordOutbox)
	default:
		undo := ""
		if m == managedCreate {
			undo = fmt.Sprintf(undoCreate, "$15") + ",\n"
		}
		s.insertApply = fmt.Sprintf(`WITH r AS (%s),
u AS (
  UPDATE %s SET state = $12, version = version + 1,
    last_event_at = GREATEST(last_event_at, $7), updated_at = now()
  WHERE endpoint = $1 AND entity_key = $4 AND state = $11 AND EXISTS (SELECT 1 FROM r)
  RETURNING 1),
%s%s`, applied, t.Entities, undo, recordOutbox)
	}

	outboxInsert := fmt.Sprintf(`o AS (
  INSERT INTO %s (endpoint, dedupe_key, entity_key, event_type, source_event_id, payload, occurred_at)
  SELECT $1, $7, $2, $8, ev.event_id,
    jsonb_build_object(
      'transition', $10::text, 'from', $3::text, 'to', $4::text,
      'source', jsonb_build_object('id', ev.event_id, 'type', ev.event_type, 'receivedAt', ev.received_at),
      'event', ev.payload),
    $5
  FROM u, %s ev
  WHERE ev.id = $6 AND $8::text <> ''
  ON CONFLICT (endpoint, dedupe_key) DO NOTHING
  RETURNING 1)`, t.Outbox, t.Events)
	setOutcome := fmt.Sprintf(`UPDATE %s SET
  outcome = CASE WHEN EXISTS (SELECT 1 FROM u) THEN 'applied' ELSE 'ignored_state' END,
  detail = CASE WHEN EXISTS (SELECT 1 FROM u) THEN $9::text ELSE %s END,
  processed_at = now()
WHERE id = $6
RETURNING outcome, EXISTS (SELECT 1 FROM o)`, t.Events, quoteLiteral(detailRaced))

	if m == appTable {
		q := appQuoted(ep)
		tenant := ""
		if q.tenant != "" {
			tenant = fmt.Sprintf(" AND t.%s = $14", q.tenant)
		}
		s.apply = fmt.Sprintf(`WITH u AS (
  UPDATE %s t SET %s = $13
  WHERE t.%s = $11 AND t.%s = $12%s
  RETURNING 1),
c AS (
  INSERT INTO %s (endpoint, entity_key, last_event_at)
  SELECT $1, $2, $5 FROM u WHERE $5::timestamptz IS NOT NULL
  ON CONFLICT (endpoint, entity_key) DO UPDATE
    SET last_event_at = GREATEST(%s.last_event_at, EXCLUDED.last_event_at)),
%s
%s`, q.table, q.state, q.key, q.state, tenant, t.EntityClocks, t.EntityClocks, outboxInsert, setOutcome)
	} else {
		s.apply = fmt.Sprintf(`WITH u AS (
  UPDATE %s SET state = $4, version = version + 1,
    last_event_at = GREATEST(last_event_at, $5), updated_at = now()
  WHERE endpoint = $1 AND entity_key = $2 AND state = $3
  RETURNING 1),
%s
%s`, t.Entities, outboxInsert, setOutcome)
	}

	s.outcome = fmt.Sprintf(`UPDATE %s SET outcome = $2, detail = $3, processed_at = now() WHERE id = $1`, t.Events)
	s.load = fmt.Sprintf(`SELECT event_id, event_type, entity_key, payload, headers, occurred_at, amount, outcome
FROM %s WHERE id = $1 AND endpoint = $2 FOR UPDATE`, t.Events)
	return s, m
}

type quotedTable struct {
	table, key, state, amount, tenant string
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

// appLock returns the locking SELECT on the app's table with the given parameter
// placeholders (endpoint, clock key, typed key, tenant). The state is read as text and
// the amount as bigint, so enum and integer columns of any width work.
func appLock(ep *config.Endpoint, clocks string) func(endpoint, clockKey, key, tenant string) string {
	q := appQuoted(ep)
	amount := "NULL::bigint"
	if q.amount != "" {
		amount = fmt.Sprintf("t.%s::bigint", q.amount)
	}
	return func(endpoint, clockKey, key, tenant string) string {
		where := fmt.Sprintf("t.%s = %s", q.key, key)
		if q.tenant != "" {
			where += fmt.Sprintf(" AND t.%s = %s", q.tenant, tenant)
		}
		return fmt.Sprintf(`SELECT true AS found, t.%s::text AS state, %s AS amount, c.last_event_at
  FROM %s t LEFT JOIN %s c ON c.endpoint = %s AND c.entity_key = %s
  WHERE %s
  FOR UPDATE OF t`, q.state, amount, q.table, clocks, endpoint, clockKey, where)
	}
}

func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
