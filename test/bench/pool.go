package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/pgtemp"
	"github.com/hookkeeper/hookkeeper/internal/resources"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// poolSizes are the endpoint counts the pool suite measures.
var poolSizes = []int{1, 10, 50, 200}

// dedicatedSample is how many one-endpoint receivers the suite starts to measure the
// RSS of one; a dedicated endpoint's figures are that times its replicas.
const dedicatedSample = 3

// poolIdleSettle is how long the pool suite lets the endpoints be quiet before it
// counts their sessions.
const poolIdleSettle = 5 * time.Second

// poolMaxConnections is max_connections of the pool suite's own server.
const poolMaxConnections = 1000

// receiverCPURequest is the default CPU request of a receiver pod, in millicores.
var receiverCPURequest = func() int {
	q := resource.MustParse(resources.DefaultReceiverCPURequest)
	return int(q.MilliValue())
}()

// runPoolSuite measures what serving N quiet endpoints costs, pooled against
// dedicated: one `hookkeeper-receiver receiver --endpoints-dir` process serving all N
// (a pool replica) after each endpoint took one webhook, against the RSS of a receiver
// serving one endpoint, times the two replicas of every endpoint. Requested CPU is the
// default request of the pods either way (100m each); database connections are those
// PostgreSQL reports for the receivers. Then one busy endpoint sharing a pool with
// quiet ones against pgbench (measureBusyInPool).
func runPoolSuite(ctx context.Context, env *Env) ([]Row, error) {
	// A server of its own: idle pooled endpoints hold about two sessions each, more at
	// 200 endpoints than a default max_connections (100) allows.
	pg, err := pgtemp.StartWith(ctx, pgtemp.Settings{Durable: true, MaxConnections: poolMaxConnections})
	if err != nil {
		return nil, fmt.Errorf("start a PostgreSQL for the pool suite: %w", err)
	}
	defer pg.Stop()
	dbURL := pg.URL
	if _, err := store.Migrate(ctx, dbURL, benchSchema); err != nil {
		return nil, fmt.Errorf("migrate pool bench database: %w", err)
	}
	db, err := connectSeeded(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Close(context.Background()) }()
	vars := map[string]string{config.EnvDatabaseURL: dbURL, config.EnvSigningSecretPrefix + "0": benchSecret}

	one, err := measureDedicated(ctx, env, db, vars)
	if err != nil {
		return nil, err
	}
	rows := []Row{{
		Measure: "dedicated: RSS of one receiver", Value: mib(one.rss),
		Note: fmt.Sprintf("mean of %d one-endpoint receivers, each after one webhook; %d database connections each 5 s later", dedicatedSample, one.conns),
	}}
	for _, n := range poolSizes {
		m, err := measurePool(ctx, env, db, vars, n)
		if err != nil {
			return rows, err
		}
		const replicas = 2
		rows = append(rows,
			Row{
				Measure: fmt.Sprintf("%d endpoints: receiver processes, pooled / dedicated", n),
				Value:   fmt.Sprintf("%d / %d", replicas, replicas*n),
				Note:    "two replicas each way",
			},
			Row{
				Measure: fmt.Sprintf("%d endpoints: RSS, pooled / dedicated", n),
				Value:   fmt.Sprintf("%s / %s", mib(replicas*m.rss), mib(int64(replicas*n)*one.rss)),
				Note:    fmt.Sprintf("pooled: measured, one process serving %d endpoints (%s) x 2; dedicated: one receiver's x %d", n, mib(m.rss), replicas*n),
			},
			Row{
				Measure: fmt.Sprintf("%d endpoints: requested CPU, pooled / dedicated", n),
				Value:   fmt.Sprintf("%dm / %dm", replicas*receiverCPURequest, replicas*n*receiverCPURequest),
				Note:    "the default request, 100m per pod",
			},
			Row{
				Measure: fmt.Sprintf("%d endpoints: database connections, pooled / dedicated", n),
				Value:   fmt.Sprintf("%d / %d", replicas*m.conns, int64(replicas*n)*one.conns),
				Note:    fmt.Sprintf("open 5 s after one webhook each (%s to load and serve all); dedicated: measured the same way", m.loaded.Round(10*time.Millisecond)),
			})
	}
	busy, err := measureBusyInPool(ctx, env, db, dbURL, vars)
	return append(rows, busy...), err
}

// footprint is what one receiver process was measured at.
type footprint struct {
	rss, conns int64
	loaded     time.Duration
}

// poolEndpointName is the bench's i-th pooled endpoint.
func poolEndpointName(i int) string { return "quiet-" + strconv.Itoa(i) }

// writeEndpointFiles writes NAME.json and NAME.env for each name, as the operator
// renders them into a pool's endpoints Secret.
func writeEndpointFiles(dir string, names []string, vars map[string]string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	var envFile []byte
	for k, v := range vars {
		envFile = append(envFile, k+"="+v+"\n"...)
	}
	for _, name := range names {
		data, err := json.Marshal(benchEndpointObject("bench", name, 2))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name+".json"), data, 0o600); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name+".env"), envFile, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// postQuiet sends one signed webhook for an unknown order to url: recorded as
// unmatched, acknowledged with 200.
func postQuiet(ctx context.Context, url, id string) error {
	body := demo.StripeEvent(id, "payment_intent.succeeded", "quiet-order-"+id, orderAmount, time.Now())
	code, err := demo.PostStripe(ctx, url, benchSecret, body)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("POST %s: %d, want 200", url, code)
	}
	return nil
}

// receiverConns counts the database's connections other than the suite's own.
func receiverConns(ctx context.Context, db *pgx.Conn) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n)
	return n, err
}

// startQuietReceiver is startReceiver logging warnings only.
func startQuietReceiver(ctx context.Context, env *Env, procEnv []string, args ...string) (*Process, string, error) {
	return env.StartReceiver(ctx, procEnv, append(args, "--log-level", "warn")...)
}

// measurePool starts one receiver serving n endpoints from a directory, sends each one
// webhook, and reads its RSS and the connections it holds.
func measurePool(ctx context.Context, env *Env, db *pgx.Conn, vars map[string]string, n int) (footprint, error) {
	names := make([]string, n)
	for i := range names {
		names[i] = poolEndpointName(i)
	}
	dir := filepath.Join(env.WorkDir, fmt.Sprintf("pool-%d", n))
	if err := writeEndpointFiles(dir, names, vars); err != nil {
		return footprint{}, fmt.Errorf("write pool endpoints: %w", err)
	}
	begin := time.Now()
	proc, webhookAddr, err := startQuietReceiver(ctx, env, nil, "--endpoints-dir", dir)
	if err != nil {
		return footprint{}, err
	}
	defer proc.Stop()
	for i, name := range names {
		// The pool loads the directory before /readyz passes; an endpoint answers once its
		// database pool is open, so retry the first request briefly.
		url := "http://" + webhookAddr + "/" + name + "/"
		id := fmt.Sprintf("evt_pool_%d_%d_%d", n, i, time.Now().UnixNano())
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := postQuiet(ctx, url, id)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return footprint{}, fmt.Errorf("pool of %d: endpoint %s: %w", n, name, err)
			}
			select {
			case <-ctx.Done():
				return footprint{}, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	loaded := time.Since(begin)
	mem, err := proc.Memory()
	if err != nil {
		return footprint{}, err
	}
	// Quiet endpoints give their sessions back after a second idle (and between their
	// dispatchers' polls): count what stays open once they are quiet.
	select {
	case <-ctx.Done():
		return footprint{}, ctx.Err()
	case <-time.After(poolIdleSettle):
	}
	conns, err := receiverConns(ctx, db)
	if err != nil {
		return footprint{}, err
	}
	env.Log.Printf("pool of %d endpoints: RSS %s, %d connections, all served after %s", n, mib(mem.Anon+mem.File), conns, loaded.Round(10*time.Millisecond))
	return footprint{rss: mem.Anon + mem.File, conns: conns, loaded: loaded}, nil
}

// measureDedicated starts dedicatedSample one-endpoint receivers one after another,
// each after one webhook, and returns their mean RSS and connections.
func measureDedicated(ctx context.Context, env *Env, db *pgx.Conn, vars map[string]string) (footprint, error) {
	var total footprint
	var procEnv []string
	for k, v := range vars {
		procEnv = append(procEnv, k+"="+v)
	}
	for i := range dedicatedSample {
		name := "dedicated-" + strconv.Itoa(i)
		data, err := json.Marshal(benchEndpointObject("bench", name, 2))
		if err != nil {
			return footprint{}, err
		}
		manifest := filepath.Join(env.WorkDir, name+".json")
		if err := os.WriteFile(manifest, data, 0o600); err != nil {
			return footprint{}, err
		}
		proc, webhookAddr, err := startQuietReceiver(ctx, env, procEnv, "--endpoint", manifest)
		if err != nil {
			return footprint{}, err
		}
		err = postQuiet(ctx, "http://"+webhookAddr+"/", fmt.Sprintf("evt_dedicated_%d_%d", i, time.Now().UnixNano()))
		if err == nil {
			// Counted after the same quiet time as a pool's.
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-time.After(poolIdleSettle):
			}
		}
		if err == nil {
			var mem Memory
			if mem, err = proc.Memory(); err == nil {
				total.rss += mem.Anon + mem.File
				var c int64
				c, err = receiverConns(ctx, db)
				total.conns += c
			}
		}
		proc.Stop()
		if err != nil {
			return footprint{}, fmt.Errorf("dedicated receiver %d: %w", i, err)
		}
	}
	total.rss /= dedicatedSample
	total.conns /= dedicatedSample
	env.Log.Printf("dedicated receiver: RSS %s, %d connections", mib(total.rss), total.conns)
	return total, nil
}
