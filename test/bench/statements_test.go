package main

import (
	"testing"
	"time"
)

// The diagnostic counts only what ran between two reads, per event, and leaves out
// statements rarer than one per ten events (the suite's own reads).
func TestStatementStatsPerEvent(t *testing.T) {
	const (
		receipt = "WITH receipt AS (INSERT INTO \"hookkeeper\".\"webhook_events\"\n  (endpoint) VALUES ($1)"
		lock    = "SELECT true, a.\"status\"::text FROM \"public\".\"orders\" a WHERE a.k = $1 FOR UPDATE OF a"
		rare    = "SELECT pid FROM pg_stat_activity"
	)
	before := statementStats{
		receipt: {calls: 1000, exec: time.Second, walBytes: 1 << 20},
		lock:    {calls: 1000, exec: time.Second},
		rare:    {calls: 5, exec: time.Second},
	}
	after := statementStats{
		receipt: {calls: 1100, exec: time.Second + 30*time.Millisecond, walBytes: 1<<20 + 400_000},
		lock:    {calls: 1100, exec: time.Second + 5*time.Millisecond, walBytes: 100_000},
		rare:    {calls: 6, exec: 2 * time.Second},
	}
	var s statementStats
	s = s.add(before, after)
	s = s.add(before, after) // a second slice, the same again
	got := s.perEvent(200)
	want := "all 350µs, receipt+transition+outbox 300µs (1.0×, 4000 B WAL), entity lock 50µs (1.0×, 1000 B WAL)"
	if got != want {
		t.Errorf("perEvent:\n got %q\nwant %q", got, want)
	}
	if got := (statementStats{}).perEvent(200); got != "" {
		t.Errorf("no statements: %q, want no row", got)
	}
	if got := s.perEvent(0); got != "" {
		t.Errorf("no events: %q, want no row", got)
	}
}

func TestStatementName(t *testing.T) {
	for q, want := range map[string]string{
		"INSERT INTO \"hookkeeper\".\"entities\" AS e (endpoint) VALUES ($1)\nON CONFLICT (endpoint, entity_key) DO UPDATE\n  SET amount = 1": "entity lock",
		"SELECT EXISTS (SELECT 1 FROM \"hookkeeper\".\"webhook_events\")":                                                                     "context read",
		"SELECT set_config($1, $2, $3), set_config($4, $5, $6)":                                                                               "settings",
		"SELECT set_config('hookkeeper.prediction', CASE WHEN EXISTS (SELECT 1) THEN 'seen' END, true)":                                       "context read",
		// As pg_stat_statements keeps it: constants normalised to parameters.
		"SELECT set_config($6, CASE\n  WHEN EXISTS (SELECT $7 FROM \"hookkeeper\".\"webhook_events\" WHERE endpoint = $1)":            "context read",
		"SELECT set_config($1, $2, $3), set_config($4, $5, $6), set_config($7, $8, $9)":                                               "settings",
		"WITH l(found) AS (\nSELECT true FROM t WHERE k = $1 FOR UPDATE)\nSELECT set_config('hookkeeper.prediction', 'locked', true)": "entity lock",
		"SELECT pg_notify($1, $2)": "SELECT pg_notify($1, $2)",
		"COMMIT":                   "COMMIT",
	} {
		if got := statementName(q); got != want {
			t.Errorf("statementName(%q) = %q, want %q", q, got, want)
		}
	}
}
