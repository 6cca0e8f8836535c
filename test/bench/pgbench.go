package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// seedTransaction is the reference transaction (docs/architecture.md, "The pattern"):
// the atomic event receipt written by hand, as a pgbench custom script: the receipt
// insert arbitrated by the unique index, the guarded order update and the outbox insert,
// in one transaction. Event ids are random; orders are picked at random among :orders
// pending rows named pg-<n>.
const seedTransaction = `\set n random(1, :orders)
\set e random(1, 2000000000)
BEGIN;
INSERT INTO webhook_receipts (tenant_id, event_id, received_at)
  VALUES ('acme', 'evt_pg_' || :e, now())
  ON CONFLICT (tenant_id, event_id) DO NOTHING;
UPDATE orders SET status = 'paid', paid_at = now()
  WHERE tenant_id = 'acme' AND client_txn_id = 'pg-' || :n
    AND status = 'payment_pending' AND expected_amount_paise = 4999;
INSERT INTO fulfilment_outbox (dedupe_key, order_id, event_type)
  VALUES ('evt_pg_' || :e, 'pg-' || :n, 'order.paid')
  ON CONFLICT (dedupe_key) DO NOTHING;
COMMIT;
`

// connectSeeded connects to dbURL and creates seedTables there, the tables the
// reference transaction and the table-bound endpoint share. The caller closes the
// connection.
func connectSeeded(ctx context.Context, dbURL string) (*pgx.Conn, error) {
	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("connect to bench database: %w", err)
	}
	if _, err := db.Exec(ctx, seedTables); err != nil {
		_ = db.Close(context.Background())
		return nil, fmt.Errorf("create seed tables: %w", err)
	}
	return db, nil
}

// seedTables are the reference transaction's tables: the gateway's receipts, the app's orders
// (shared with the receiver's table-bound endpoint) and its fulfilment outbox.
const seedTables = `
CREATE TABLE orders (
    id                    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id             text   NOT NULL,
    client_txn_id         text   NOT NULL,
    status                text   NOT NULL,
    expected_amount_paise bigint NOT NULL,
    paid_at               timestamptz,
    UNIQUE (tenant_id, client_txn_id)
);
CREATE TABLE webhook_receipts (
    tenant_id   text        NOT NULL,
    event_id    text        NOT NULL,
    received_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, event_id)
);
CREATE TABLE fulfilment_outbox (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dedupe_key text NOT NULL UNIQUE,
    order_id   text NOT NULL,
    event_type text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
`

type pgbenchResult struct {
	TPS      float64
	P50, P99 time.Duration
	Count    int
	// ClientCPU is pgbench's own CPU time.
	ClientCPU time.Duration
	Duration  time.Duration
	Lat       []time.Duration
}

// merge adds another run's transactions; call finish for the quantiles and tps.
func (r pgbenchResult) merge(o pgbenchResult) pgbenchResult {
	r.Count += o.Count
	r.ClientCPU += o.ClientCPU
	r.Duration += o.Duration
	r.Lat = append(r.Lat, o.Lat...)
	return r
}

// finish computes tps over all merged runs (their transactions over their durations)
// and the latency quantiles.
func (r *pgbenchResult) finish() {
	if r.Duration > 0 {
		r.TPS = float64(r.Count) / r.Duration.Seconds()
	}
	r.P50, r.P99 = quantile(r.Lat, 0.50), quantile(r.Lat, 0.99)
}

var tpsLine = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)

// runPgbench runs seedTransaction with clients connections for d and reads the
// per-transaction log for latency quantiles.
func runPgbench(ctx context.Context, env *Env, dbURL string, clients, orders int, d time.Duration) (pgbenchResult, error) {
	dir, err := os.MkdirTemp(env.WorkDir, "pgbench-")
	if err != nil {
		return pgbenchResult{}, fmt.Errorf("create pgbench directory: %w", err)
	}
	script := filepath.Join(dir, "seed.sql")
	if err := os.WriteFile(script, []byte(seedTransaction), 0o600); err != nil {
		return pgbenchResult{}, fmt.Errorf("write pgbench script: %w", err)
	}
	threads := min(clients, 2)
	seconds := max(int(d.Seconds()), 1)
	cmd := exec.CommandContext(ctx, "pgbench", "--no-vacuum", "--protocol=prepared",
		"--client="+strconv.Itoa(clients), "--jobs="+strconv.Itoa(threads),
		"--time="+strconv.Itoa(seconds), "--file="+script,
		"--define=orders="+strconv.Itoa(orders), "--log", "--log-prefix="+filepath.Join(dir, "txn"),
		dbURL)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return pgbenchResult{}, fmt.Errorf("pgbench: %w\n%s", err, out)
	}
	m := tpsLine.FindSubmatch(out)
	if m == nil {
		return pgbenchResult{}, fmt.Errorf("no tps in pgbench output:\n%s", out)
	}
	tps, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		return pgbenchResult{}, fmt.Errorf("parse pgbench tps: %w", err)
	}
	lat, err := readPgbenchLogs(dir)
	if err != nil {
		return pgbenchResult{}, err
	}
	res := pgbenchResult{TPS: tps, Count: len(lat), Duration: time.Duration(seconds) * time.Second, Lat: lat,
		ClientCPU: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}
	res.P50, res.P99 = quantile(lat, 0.50), quantile(lat, 0.99)
	return res, nil
}

// readPgbenchLogs collects the latency column (microseconds, third field) of every
// per-transaction log line pgbench wrote.
func readPgbenchLogs(dir string) ([]time.Duration, error) {
	files, err := filepath.Glob(filepath.Join(dir, "txn.*"))
	if err != nil {
		return nil, fmt.Errorf("find pgbench logs in %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("pgbench wrote no transaction log in %s", dir)
	}
	var lat []time.Duration
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("open pgbench log: %w", err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 3 {
				continue
			}
			us, err := strconv.ParseInt(fields[2], 10, 64)
			if err != nil {
				continue
			}
			lat = append(lat, time.Duration(us)*time.Microsecond)
		}
		_ = f.Close()
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("read pgbench log: %w", err)
		}
	}
	return lat, nil
}
