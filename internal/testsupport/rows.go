package testsupport

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookkeeper/hookkeeper/internal/statemachine"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// Querier is what Rows counts through: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Rows counts the rows of hookkeeper's tables in one schema, so tests name what they
// count (receipts with an outcome, outbox rows, entities in a state) instead of writing
// SQL. A query that fails fails the test with the table and the condition it counted.
type Rows struct {
	q      Querier
	Tables store.Tables
}

// NewRows counts through q in the tables of tables (store.TablesIn(schema)).
func NewRows(q Querier, tables store.Tables) *Rows {
	return &Rows{q: q, Tables: tables}
}

// Receipts counts all receipts (webhook_events).
func (r *Rows) Receipts(tb testing.TB) int {
	tb.Helper()
	return r.Count(tb, r.Tables.Events, "")
}

// ReceiptsWithOutcome counts the receipts recorded with outcome.
func (r *Rows) ReceiptsWithOutcome(tb testing.TB, outcome statemachine.Outcome) int {
	tb.Helper()
	return r.Count(tb, r.Tables.Events, "outcome = $1", string(outcome))
}

// ReceiptsOf counts the receipts of one provider event id (0 or 1).
func (r *Rows) ReceiptsOf(tb testing.TB, eventID string) int {
	tb.Helper()
	return r.Count(tb, r.Tables.Events, "event_id = $1", eventID)
}

// Outbox counts all outbox rows.
func (r *Rows) Outbox(tb testing.TB) int {
	tb.Helper()
	return r.Count(tb, r.Tables.Outbox, "")
}

// OutboxFor counts the outbox rows of one entity key.
func (r *Rows) OutboxFor(tb testing.TB, entityKey string) int {
	tb.Helper()
	return r.Count(tb, r.Tables.Outbox, "entity_key = $1", entityKey)
}

// Entities counts the managed entities (the entities table).
func (r *Rows) Entities(tb testing.TB) int {
	tb.Helper()
	return r.Count(tb, r.Tables.Entities, "")
}

// EntitiesInState counts the managed entities in state.
func (r *Rows) EntitiesInState(tb testing.TB, state string) int {
	tb.Helper()
	return r.Count(tb, r.Tables.Entities, "state = $1", state)
}

// Clocks counts the entity_clocks rows (entities kept in an app's own table).
func (r *Rows) Clocks(tb testing.TB) int {
	tb.Helper()
	return r.Count(tb, r.Tables.EntityClocks, "")
}

// Count is the escape hatch for the rare specific count: the rows of table (one of
// r.Tables) matching where ("" for all), with args as its $1, $2...
func (r *Rows) Count(tb testing.TB, table, where string, args ...any) int {
	tb.Helper()
	sql := "SELECT count(*) FROM " + table
	if where != "" {
		sql += " WHERE " + where
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return Value[int](tb, ctx, r.q, sql, args...)
}

// Value is the one value of the one row sql returns through q, with args as its $1,
// $2...: a count, a state, a timestamp. A query that fails, or returns no row, fails
// the test with the query.
func Value[T any](tb testing.TB, ctx context.Context, q Querier, sql string, args ...any) T {
	tb.Helper()
	var v T
	if err := q.QueryRow(ctx, sql, args...).Scan(&v); err != nil {
		tb.Fatalf("query %q %v: %v", sql, args, err)
	}
	return v
}
