package testsupport

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgreSQL counts each backend's table accesses (pg_stat_user_tables) in the backend
// and reports them later: at a transaction's end at most once a second, and as the
// backend exits, after its client has gone. A test that counts what its statements did
// (sequential scans, say) must therefore run them on connections of their own, close
// those and wait for a signal that their figures have arrived before it reads them.

// Exec runs one statement and fails the test when it fails.
type Exec func(sql string, args ...any)

// sentinels names each Settle's sentinel table apart.
var sentinels atomic.Int64

// Settle runs setup on a connection of its own to url and returns once that
// connection's table statistics have arrived, so that counters read afterwards do not
// move with them. The signal is a sentinel table it creates, with one row inserted.
func Settle(tb testing.TB, ctx context.Context, url string, setup func(exec Exec)) {
	tb.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatalf("connect for setup: %v", err)
	}
	exec := func(sql string, args ...any) {
		tb.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			tb.Fatalf("exec %q: %v", sql, err)
		}
	}
	setup(exec)
	sentinel := fmt.Sprintf("public.settled_%d", sentinels.Add(1))
	exec("CREATE TABLE " + sentinel + " (x int)")
	exec("INSERT INTO " + sentinel + " VALUES (1)")
	if err := conn.Close(ctx); err != nil {
		tb.Fatalf("close the setup connection: %v", err)
	}
	waitForTableStat(tb, ctx, url, sentinel, "n_tup_ins", 1)
}

// waitForTableStat waits until column of table's row in pg_stat_user_tables (n_tup_ins,
// n_tup_upd, ...) reaches at least want: the signal that a closed connection's figures
// have arrived. It reads on a connection of its own to url.
func waitForTableStat(tb testing.TB, ctx context.Context, url, table, column string, want int64) {
	tb.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatalf("connect to read table statistics: %v", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	what := fmt.Sprintf("%s.%s to reach %d in pg_stat_user_tables", table, column, want)
	Eventually(tb, 30*time.Second, 50*time.Millisecond, what, func() error {
		if n := tableStats(tb, ctx, conn, column, table)[table]; n < want {
			return fmt.Errorf("%s shows %s = %d", table, column, n)
		}
		return nil
	})
}

// tableStats reads column of pg_stat_user_tables (seq_scan, n_tup_upd, ...) for each
// table, as counted so far.
func tableStats(tb testing.TB, ctx context.Context, q Querier, column string, tables ...string) map[string]int64 {
	tb.Helper()
	out := map[string]int64{}
	for _, table := range tables {
		var n int64
		if err := q.QueryRow(ctx, `SELECT COALESCE(`+pgx.Identifier{column}.Sanitize()+`, 0)
			FROM pg_stat_user_tables WHERE relid = $1::regclass`, table).Scan(&n); err != nil {
			tb.Fatalf("read %s of %s: %v", column, table, err)
		}
		out[table] = n
	}
	return out
}

// GenericPlanPool opens a pool of one connection to url that uses each statement's
// generic plan from its first execution, as PostgreSQL does for a connection's prepared
// statements from their sixth: plans are made once, on the tables as they are then, and
// kept. The pool closes when the test ends; close it earlier to have its statistics
// reported.
func GenericPlanPool(tb testing.TB, ctx context.Context, url string) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = 1
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET plan_cache_mode = force_generic_plan")
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// Signal is a table statistic that grows by a known amount when the connections a test
// measures report their figures: the rows they inserted, updated or deleted.
type Signal struct {
	Table, Column string
	Grows         int64
}

// SeqScansDuring returns the sequential scans run made on each of tables. run must use
// connections of its own and close them before it returns; their figures count once
// signal has grown by its amount.
func SeqScansDuring(tb testing.TB, ctx context.Context, url string, tables []string, signal Signal, run func()) map[string]int64 {
	tb.Helper()
	return StatsDuring(tb, ctx, url, []string{"seq_scan"}, tables, signal, run)["seq_scan"]
}

// StatsDuring returns how much each of columns of pg_stat_user_tables (seq_scan,
// idx_tup_fetch, ...) grew on each of tables while run ran: by column, then by table.
// run must use connections of its own and close them before it returns; their figures
// count once signal has grown by its amount.
func StatsDuring(tb testing.TB, ctx context.Context, url string, columns, tables []string, signal Signal, run func()) map[string]map[string]int64 {
	tb.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatalf("connect to read table statistics: %v", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	before := map[string]map[string]int64{}
	for _, c := range columns {
		before[c] = tableStats(tb, ctx, conn, c, tables...)
	}
	start := tableStats(tb, ctx, conn, signal.Column, signal.Table)[signal.Table]
	run()
	waitForTableStat(tb, ctx, url, signal.Table, signal.Column, start+signal.Grows)
	grew := map[string]map[string]int64{}
	for _, c := range columns {
		grew[c] = tableStats(tb, ctx, conn, c, tables...)
		for table := range grew[c] {
			grew[c][table] -= before[c][table]
		}
	}
	return grew
}
