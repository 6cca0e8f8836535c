package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Where the receiver's PostgreSQL time goes, statement by statement. The CPU rows say how
// much PostgreSQL works per event; this diagnostic says on which statement. It reads
// pg_stat_statements, which only a server that loads it (shared_preload_libraries)
// keeps, so the receiver suite reports it only there; docs/benchmarks.md says how to run
// such a server beside the usual one.

// statementStats are pg_stat_statements' counters, per statement text, for the suite's
// database.
type statementStats map[string]statementCounters

type statementCounters struct {
	calls    int64
	exec     time.Duration
	walBytes int64
}

// enableStatements creates the extension in the suite's database and tells whether the
// server keeps its statistics.
func enableStatements(ctx context.Context, db *pgx.Conn) bool {
	if _, err := db.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return false
	}
	// The view errors when the library is not loaded.
	_, err := db.Exec(ctx, "SELECT 1 FROM pg_stat_statements LIMIT 1")
	return err == nil
}

// readStatements reads the counters of the suite's database's statements.
func readStatements(ctx context.Context, db *pgx.Conn) (statementStats, error) {
	rows, err := db.Query(ctx, `SELECT query, sum(calls)::bigint, sum(total_exec_time)::float8, sum(wal_bytes)::bigint
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
GROUP BY query`)
	if err != nil {
		return nil, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	stats := statementStats{}
	for rows.Next() {
		var q string
		var c statementCounters
		var execMs float64
		if err := rows.Scan(&q, &c.calls, &execMs, &c.walBytes); err != nil {
			return nil, fmt.Errorf("read pg_stat_statements: %w", err)
		}
		c.exec = time.Duration(execMs * float64(time.Millisecond))
		stats[q] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	return stats, nil
}

// add adds what ran between before and after to s.
func (s statementStats) add(before, after statementStats) statementStats {
	if s == nil {
		s = statementStats{}
	}
	for q, a := range after {
		b := before[q]
		c := s[q]
		c.calls += a.calls - b.calls
		c.exec += a.exec - b.exec
		c.walBytes += a.walBytes - b.walBytes
		s[q] = c
	}
	return s
}

// perEvent lists the statements that ran at least once per ten events, most time first,
// after "all <µs per event>", their sum (the suite's own rare reads are left out):
// "<name> <µs per event> (<calls per event>×, <WAL bytes per event> B WAL)".
func (s statementStats) perEvent(events int) string {
	if events == 0 || len(s) == 0 {
		return ""
	}
	type line struct {
		name string
		c    statementCounters
	}
	var lines []line
	var total time.Duration
	for q, c := range s {
		if c.calls*10 < int64(events) {
			continue
		}
		lines = append(lines, line{statementName(q), c})
		total += c.exec
	}
	slices.SortFunc(lines, func(a, b line) int { return cmp.Compare(b.c.exec, a.c.exec) })
	n := time.Duration(events)
	parts := []string{"all " + us(total/n)}
	for _, l := range lines {
		parts = append(parts, fmt.Sprintf("%s %s (%.1f×, %d B WAL)", l.name, us(l.c.exec/n),
			float64(l.c.calls)/float64(events), l.c.walBytes/int64(events)))
	}
	return strings.Join(parts, ", ")
}

// statementName names one of the receiver's statements by what it does (its SQL is in
// internal/receipt/sql.go); another is named by its first words.
func statementName(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	switch {
	case strings.HasPrefix(q, "WITH receipt AS (INSERT"):
		return "receipt+transition+outbox"
	case strings.Contains(q, "FOR UPDATE"), strings.Contains(q, "ON CONFLICT (endpoint, entity_key) DO UPDATE SET amount"):
		return "entity lock"
	case strings.HasPrefix(q, "SELECT EXISTS"),
		// The predicted context read records its answer with set_config; the statement
		// text pg_stat_statements keeps has the setting's name as a parameter ($6).
		strings.HasPrefix(q, "SELECT set_config(") && strings.Contains(q, "EXISTS"):
		return "context read"
	case strings.Contains(q, "set_config("):
		return "settings"
	}
	words := strings.Fields(q)
	return strings.Join(words[:min(len(words), 3)], " ")
}
