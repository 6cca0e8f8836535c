package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// handwrittenApp is the application_name of the hand-written handler's connections, so
// the suite can see them in pg_stat_activity.
const handwrittenApp = "bench-handwritten"

// handwrittenBinary returns the hand-written handler's binary: -handwritten when given,
// else one built now from ./test/bench/handwritten (the bench runs from the module root,
// as `make bench` and run.sh do).
func (e *Env) handwrittenBinary(ctx context.Context) (string, error) {
	if e.Handwritten != "" {
		return e.Handwritten, nil
	}
	out := filepath.Join(e.WorkDir, "handwritten")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./test/bench/handwritten")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the hand-written handler (run from the module root, or pass -handwritten): %w\n%s", err, msg)
	}
	return out, nil
}

// startHandwritten runs the hand-written handler on listenAddr against dbURL. Its pool
// may open maxConns connections, as many as the receiver's (spec.database.maxConnections)
// and as pgbench's clients at the highest level. Idle connections close after a second:
// PostgreSQL's 100 connections do not hold 64 idle ones of the handler's and pgbench's
// 64 at once; the suite warms the pool up again before each measured slice.
func (e *Env) startHandwritten(ctx context.Context, binary, dbURL, listenAddr string, maxConns int) (*Process, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(maxConns))
	q.Set("pool_max_conn_idle_time", "1s")
	q.Set("pool_health_check_period", "250ms")
	q.Set("application_name", handwrittenApp)
	u.RawQuery = q.Encode()
	return e.StartProcess(ctx, binary, "http://"+listenAddr+"/healthz",
		[]string{"DATABASE_URL=" + u.String(), "STRIPE_WEBHOOK_SECRET=" + benchSecret},
		"-listen", listenAddr, "-tenant", "acme")
}

// waitIdleHandwritten waits until the hand-written handler holds at most max
// connections (its pool closes idle ones), so pgbench's clients find room.
func waitIdleHandwritten(ctx context.Context, db *pgx.Conn, limit int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`,
			handwrittenApp).Scan(&n); err != nil {
			return fmt.Errorf("count the hand-written handler's connections: %w", err)
		}
		if n <= limit || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// handwrittenStored counts what the hand-written handler committed for its new events:
// receipts, outbox rows and paid orders. Each must equal the new events sent.
func handwrittenStored(ctx context.Context, db *pgx.Conn) (receipts, outbox, paid int64, err error) {
	err = db.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM webhook_receipts WHERE event_id LIKE 'evt\_hw\_%' AND event_id NOT LIKE 'evt\_hw\_forged\_%'),
		(SELECT count(*) FROM fulfilment_outbox WHERE dedupe_key LIKE 'evt\_hw\_%'),
		(SELECT count(*) FROM orders WHERE client_txn_id LIKE 'hw-%' AND status = 'paid')`).Scan(&receipts, &outbox, &paid)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("count the hand-written handler's rows: %w", err)
	}
	return receipts, outbox, paid, nil
}
