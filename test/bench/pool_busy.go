package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// busyQuietEndpoints is how many quiet endpoints share the pool with the busy one.
const busyQuietEndpoints = 49

// busyInFlight is the concurrency at which the busy endpoint is compared with pgbench:
// issue 16's bar for a dedicated receiver is at this level.
const busyInFlight = 8

// measureBusyInPool compares one busy endpoint sharing a pool with quiet ones against
// pgbench, as the receiver suite compares a dedicated receiver: one pool process
// serving the busy endpoint and busyQuietEndpoints quiet ones (each took one webhook),
// busyInFlight requests in flight, alternating slices with pgbench at as many clients.
func measureBusyInPool(ctx context.Context, env *Env, db *pgx.Conn, dbURL string, vars map[string]string) ([]Row, error) {
	names := make([]string, busyQuietEndpoints)
	for i := range names {
		names[i] = poolEndpointName(i)
	}
	dir := filepath.Join(env.WorkDir, "pool-busy")
	if err := writeEndpointFiles(dir, names, vars); err != nil {
		return nil, fmt.Errorf("write pool endpoints: %w", err)
	}
	// The busy endpoint: the receiver suite's, with as many connections as requests in
	// flight, beside the quiet ones in the same directory.
	data, err := json.Marshal(benchEndpointObject("bench", "busy", busyInFlight))
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "busy.json"), data, 0o600); err != nil {
		return nil, err
	}
	var envFile strings.Builder
	for k, v := range vars {
		envFile.WriteString(k + "=" + v + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "busy.env"), []byte(envFile.String()), 0o600); err != nil {
		return nil, err
	}
	proc, webhookAddr, err := startQuietReceiver(ctx, env, nil, append([]string{"--endpoints-dir", dir, "--dispatcher=false"}, env.ReceiverArgs...)...)
	if err != nil {
		return nil, err
	}
	defer proc.Stop()
	for i, name := range names {
		if err := postQuiet(ctx, "http://"+webhookAddr+"/"+name+"/", fmt.Sprintf("evt_busy_quiet_%d_%d", i, time.Now().UnixNano())); err != nil {
			return nil, fmt.Errorf("quiet endpoint %s: %w", name, err)
		}
	}
	if err := addOrders(ctx, db, "pg-", 1, pgbenchOrders+1); err != nil {
		return nil, err
	}
	load := newStripeLoad("http://"+webhookAddr+"/busy/", []byte(benchSecret), "evt_poolbusy_", "pb-")
	rate := 1000.0
	attacker := func() *vegeta.Attacker {
		return vegeta.NewAttacker(vegeta.Workers(busyInFlight), vegeta.MaxWorkers(busyInFlight),
			vegeta.Connections(busyInFlight), vegeta.KeepAlive(true), vegeta.Timeout(10*time.Second),
			vegeta.Redirects(vegeta.NoFollow))
	}
	slice := max(env.Phase/abRounds, 2*time.Second)
	phase := func(name string, d time.Duration) (phaseResult, error) {
		b := load.make(int(rate*d.Seconds()*3) + 2_000)
		if err := addOrders(ctx, db, "pb-", b.idFrom, b.idTo); err != nil {
			return phaseResult{}, err
		}
		if err := settle(ctx, db); err != nil {
			return phaseResult{}, err
		}
		var res phaseResult
		use, err := measureCPU(ctx, db, proc, func() { res = attack(attacker(), b, vegeta.Rate{}, d, name) })
		if err != nil {
			return phaseResult{}, err
		}
		res.cpu = use
		load.settle(b)
		if res.exhausted {
			return phaseResult{}, fmt.Errorf("busy pooled endpoint: %s ran out of pre-signed requests after %d", name, res.requests)
		}
		rate = max(rate, res.rate())
		env.Log.Printf("busy pooled endpoint: %s: %s", name, res)
		return res, nil
	}
	if _, err := phase("warm-up", warmup); err != nil {
		return nil, err
	}
	var (
		rx       phaseResult
		pg       pgbenchResult
		perRound []string
	)
	for round := 1; round <= abRounds; round++ {
		if err := settle(ctx, db); err != nil {
			return nil, err
		}
		pgRound, err := runPgbench(ctx, env, dbURL, busyInFlight, pgbenchOrders, slice)
		if err != nil {
			return nil, err
		}
		rxRound, err := phase(fmt.Sprintf("%d in flight, round %d", busyInFlight, round), slice)
		if err != nil {
			return nil, err
		}
		perRound = append(perRound, fmt.Sprintf("%.2f", rxRound.acceptedPerSec()/pgRound.TPS))
		rx, pg = rx.merge(rxRound), pg.merge(pgRound)
	}
	rx.finish()
	pg.finish()
	per := rx.cpu.per(rx.requests)
	rows := []Row{
		{
			Measure: fmt.Sprintf("busy endpoint in a pool of %d / pgbench, %d in flight", busyQuietEndpoints+1, busyInFlight),
			Value:   fmt.Sprintf("%.2f", rx.acceptedPerSec()/pg.TPS),
			Note: fmt.Sprintf("%.0f accepted/s against %.0f tps, per slice %s; compare the receiver suite's dedicated ratio at %d in flight",
				rx.acceptedPerSec(), pg.TPS, strings.Join(perRound, ", "), busyInFlight),
		},
		{
			Measure: fmt.Sprintf("  busy pooled endpoint: latency p50 / p99, CPU per event, %d in flight", busyInFlight),
			Value: fmt.Sprintf("%s / %s; load %s + pool receiver %s + PostgreSQL %s", ms(rx.p50), ms(rx.p99),
				us(per.client), us(per.receiver), us(per.database)),
		},
	}
	if rx.unexpected != "" {
		rows = append(rows, Row{Measure: "busy pooled endpoint: unexpected responses", Value: strings.TrimSpace(rx.unexpected), Goal: "none"})
	}
	return rows, nil
}
