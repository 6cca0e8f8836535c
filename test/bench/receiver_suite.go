package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	vegeta "github.com/tsenart/vegeta/v12/lib"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hookv1 "github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

func init() {
	register(Suite{Name: "receiver", Order: 10, Run: runReceiverSuite})
}

const (
	benchSchema   = "hookkeeper"
	benchSecret   = "whsec_benchmarkbenchmarkbenchmark"
	benchEndpoint = "bench/orders-payments"
	// pgbenchOrders pending orders for pgbench to pick from at random: enough that
	// most picks find a pending order during a phase.
	pgbenchOrders = 400_000
	warmup        = 3 * time.Second
	// abRounds is how many pgbench and receiver slices alternate for the ratio.
	abRounds = 3
)

// runReceiverSuite compares the receiver with pgbench running the seed's transaction
// at the same concurrency on the same database, then measures latency at half of the
// receiver's peak and the receiver's peak RSS.
func runReceiverSuite(ctx context.Context, env *Env) ([]Row, error) {
	dbURL, drop, err := env.NewDatabase(ctx, "hk_bench_receiver")
	if err != nil {
		return nil, err
	}
	defer drop()
	if _, err := store.Migrate(ctx, dbURL, benchSchema); err != nil {
		return nil, fmt.Errorf("migrate bench database: %w", err)
	}
	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("connect to bench database: %w", err)
	}
	defer func() { _ = db.Close(context.Background()) }()
	if _, err := db.Exec(ctx, seedTables); err != nil {
		return nil, fmt.Errorf("create seed tables: %w", err)
	}

	if err := addOrders(ctx, db, "pg-", 1, pgbenchOrders+1); err != nil {
		return nil, err
	}

	webhookAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	adminAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	manifest, err := writeBenchManifest(env.WorkDir, slices.Max(env.Concurrency))
	if err != nil {
		return nil, err
	}
	args := append([]string{"receiver", "--endpoint", manifest, "--listen-address", webhookAddr,
		"--admin-address", adminAddr, "--dispatcher=false"}, env.ReceiverArgs...)
	proc, err := env.StartHookkeeper(ctx, adminAddr,
		[]string{config.EnvDatabaseURL + "=" + dbURL, config.EnvSigningSecretPrefix + "0=" + benchSecret}, args...)
	if err != nil {
		return nil, err
	}
	defer proc.Stop()

	load := newStripeLoad("http://"+webhookAddr+"/", []byte(benchSecret))
	attacker := func(workers, maxWorkers int) *vegeta.Attacker {
		return vegeta.NewAttacker(vegeta.Workers(uint64(workers)), vegeta.MaxWorkers(uint64(maxWorkers)),
			vegeta.Connections(maxWorkers), vegeta.KeepAlive(true), vegeta.Timeout(10*time.Second),
			vegeta.Redirects(vegeta.NoFollow))
	}
	// closed keeps exactly `inFlight` requests in flight, as pgbench's clients do.
	closed := func(name string, inFlight int, d time.Duration, b *batch) (phaseResult, error) {
		if err := addOrders(ctx, db, "rx-", b.idFrom, b.idTo); err != nil {
			return phaseResult{}, err
		}
		if err := settle(ctx, db); err != nil {
			return phaseResult{}, err
		}
		env.Log.Printf("receiver: %s, %d in flight, %s, %d requests ready", name, inFlight, d, len(b.targets))
		var res phaseResult
		use, err := measureCPU(ctx, db, proc, func() {
			res = attack(attacker(inFlight, inFlight), b, vegeta.Rate{}, d, name)
		})
		if err != nil {
			return phaseResult{}, err
		}
		res.cpu = use
		load.settle(b)
		env.Log.Printf("receiver: %s: %s", name, res)
		return res, nil
	}

	warm, err := closed("warm-up", env.Concurrency[0], warmup, load.make(20_000))
	if err != nil {
		return nil, err
	}
	// At each concurrency, pgbench and the receiver's peak alternate in short slices, so
	// a busy moment of the machine (or of its disk) lands on both sides of the ratio.
	slice := max(env.Phase/abRounds, 2*time.Second)
	var levels []levelResult
	rate := warm.rate()
	for _, c := range env.Concurrency {
		lv := levelResult{concurrency: c}
		for round := 1; round <= abRounds; round++ {
			if err := settle(ctx, db); err != nil {
				return nil, err
			}
			var pgRound pgbenchResult
			use, err := measureCPU(ctx, db, nil, func() {
				pgRound, err = runPgbench(ctx, env, dbURL, c, pgbenchOrders, slice)
			})
			if err != nil {
				return nil, err
			}
			use.client = pgRound.ClientCPU
			env.Log.Printf("receiver: %d clients, round %d: pgbench: %d transactions, %.0f tps, p50 %s, p99 %s, CPU per transaction: pgbench %s, PostgreSQL %s",
				c, round, pgRound.Count, pgRound.TPS, ms(pgRound.P50), ms(pgRound.P99), us(use.per(pgRound.Count).client), us(use.per(pgRound.Count).database))
			lv.pg = lv.pg.merge(pgRound)
			lv.pgCPU = lv.pgCPU.add(use)
			lv.pgElapsed += pgRound.Duration

			before, err := readGroupStats(ctx, proc.AdminAddr)
			if err != nil {
				return nil, err
			}
			// Size the batch from the fastest rate seen so far, with room to spare.
			r, err := closed(fmt.Sprintf("%d in flight, round %d: peak", c, round), c, slice, load.make(int(rate*slice.Seconds()*2)+2_000))
			if err != nil {
				return nil, err
			}
			if r.exhausted {
				return nil, fmt.Errorf("%d in flight, round %d ran out of pre-signed requests after %d; raise the batch size", c, round, r.requests)
			}
			after, err := readGroupStats(ctx, proc.AdminAddr)
			if err != nil {
				return nil, err
			}
			rate = max(rate, r.rate())
			lv.groups = lv.groups.add(after.sub(before))
			lv.rounds = append(lv.rounds, fmt.Sprintf("%.2f", r.acceptedPerSec()/pgRound.TPS))
			lv.rx = lv.rx.merge(r)
		}
		lv.pg.finish()
		lv.rx.finish()
		levels = append(levels, lv)
	}

	// Open loop at half of the best peak: the pacer sends on schedule whatever the
	// latency, so queueing shows in the quantiles instead of slowing the sender.
	best := levels[0]
	for _, lv := range levels[1:] {
		if lv.rx.acceptedPerSec() > best.rx.acceptedPerSec() {
			best = lv
		}
	}
	halfRate := max(int(best.rx.acceptedPerSec()/2), 1)
	hb := load.make(int(float64(halfRate)*env.Phase.Seconds()) + 100)
	if err := addOrders(ctx, db, "rx-", hb.idFrom, hb.idTo); err != nil {
		return nil, err
	}
	if err := settle(ctx, db); err != nil {
		return nil, err
	}
	env.Log.Printf("receiver: half of peak, %d/s open loop, %s", halfRate, env.Phase)
	var half phaseResult
	halfCPU, err := measureCPU(ctx, db, proc, func() {
		workers := slices.Max(env.Concurrency)
		half = attack(attacker(workers, workers*8), hb, vegeta.Rate{Freq: halfRate, Per: time.Second}, env.Phase, "half")
	})
	if err != nil {
		return nil, err
	}
	half.cpu = halfCPU
	load.settle(hb)
	env.Log.Printf("receiver: half: %s", half)

	mem, err := proc.Memory()
	if err != nil {
		return nil, err
	}

	pgTotal := 0
	for _, lv := range levels {
		pgTotal += lv.pg.Count
	}
	rxBytes, pgBytes, err := bytesPerEvent(ctx, db, pgTotal)
	if err != nil {
		return nil, err
	}
	stored, want, err := checkStored(ctx, db, load)
	if err != nil {
		return nil, err
	}

	var rows []Row
	for _, lv := range levels {
		c := strconv.Itoa(lv.concurrency)
		pgPer, rxPer := lv.pgCPU.per(lv.pg.Count), lv.rx.cpu.per(lv.rx.requests)
		rows = append(rows,
			Row{Measure: "receiver / pgbench ratio, " + c + " in flight", Value: fmt.Sprintf("%.2f", lv.rx.acceptedPerSec()/lv.pg.TPS), Goal: ">= 1.00",
				Note: fmt.Sprintf("receiver %.0f accepted/s, pgbench %.0f tps; per slice %s", lv.rx.acceptedPerSec(), lv.pg.TPS, strings.Join(lv.rounds, ", "))},
			Row{Measure: "  latency p50 / p99, " + c + " in flight", Value: "receiver " + ms(lv.rx.p50) + " / " + ms(lv.rx.p99) + ", pgbench " + ms(lv.pg.P50) + " / " + ms(lv.pg.P99)},
			Row{Measure: "  CPU per event, " + c + " in flight", Value: fmt.Sprintf("receiver %s (load %s + receiver %s + PostgreSQL %s), pgbench %s (pgbench %s + PostgreSQL %s)",
				us(rxPer.total()), us(rxPer.client), us(rxPer.receiver), us(rxPer.database), us(pgPer.total()), us(pgPer.client), us(pgPer.database)),
				Note: fmt.Sprintf("cores busy: receiver %.2f, pgbench %.2f of %d", cores(lv.rx.cpu.total(), lv.rx.elapsed), cores(lv.pgCPU.total(), lv.pgElapsed), runtime.NumCPU())},
			Row{Measure: "  deliveries per receipt transaction, " + c + " in flight", Value: fmt.Sprintf("%.1f", lv.groups.mean()),
				Note: fmt.Sprintf("group commit: %.0f transactions for %.0f deliveries", lv.groups.count, lv.groups.sum)},
		)
	}
	pgBest := levels[0]
	for _, lv := range levels[1:] {
		if lv.pg.TPS > pgBest.pg.TPS {
			pgBest = lv
		}
	}
	rows = append(rows,
		Row{Measure: "receiver best / pgbench best", Value: fmt.Sprintf("%.2f", best.rx.acceptedPerSec()/pgBest.pg.TPS), Goal: ">= 1.00",
			Note: fmt.Sprintf("receiver %.0f accepted/s at %d in flight, pgbench %.0f tps at %d clients: each at its best level",
				best.rx.acceptedPerSec(), best.concurrency, pgBest.pg.TPS, pgBest.concurrency)},
		Row{Measure: "receiver latency p50 / p99 at half peak", Value: ms(half.p50) + " / " + ms(half.p99),
			Goal: "p99 <= 25ms", Note: fmt.Sprintf("open loop %d/s, %.0f accepted/s (peak: %d in flight)", halfRate, half.acceptedPerSec(), best.concurrency)},
		Row{Measure: "diagnostic: bytes stored per event", Value: fmt.Sprintf("receiver %d, pgbench %d", rxBytes, pgBytes),
			Note: "tables + indexes, orders excluded"},
		Row{Measure: "receiver peak RSS", Value: mib(mem.Peak), Goal: "<= 64 MiB",
			Note: fmt.Sprintf("VmHWM of the subprocess; after the run %s anon + %s file (binary pages)", mib(mem.Anon), mib(mem.File))},
		Row{Measure: "receipts stored / new events sent", Value: fmt.Sprintf("%d / %d", stored, want),
			Goal: "equal", Note: "exactly once, across all phases"},
	)
	unexpected := warm.unexpected + half.unexpected
	for _, lv := range levels {
		unexpected += lv.rx.unexpected
	}
	if unexpected != "" {
		rows = append(rows, Row{Measure: "unexpected responses", Value: strings.TrimSpace(unexpected), Goal: "none"})
	}
	if stored != want {
		return rows, fmt.Errorf("stored %d receipts for %d new events", stored, want)
	}
	return rows, nil
}

// levelResult is one concurrency's alternating pgbench and receiver slices.
type levelResult struct {
	concurrency int
	pg          pgbenchResult
	pgCPU       phaseCPU
	pgElapsed   time.Duration
	rx          phaseResult
	groups      groupStats
	rounds      []string // the receiver/pgbench ratio of each round
}

// phaseResult summarizes one attack.
type phaseResult struct {
	requests   int
	accepted   int // 2xx
	elapsed    time.Duration
	p50, p99   time.Duration
	exhausted  bool
	unexpected string   // status codes other than 2xx and 401, with counts
	cpu        phaseCPU // CPU time of the load generator, receiver and database
	lat        []time.Duration
}

// merge adds the requests of another phase; call finish for the quantiles.
func (p phaseResult) merge(o phaseResult) phaseResult {
	p.requests += o.requests
	p.accepted += o.accepted
	p.elapsed += o.elapsed
	p.exhausted = p.exhausted || o.exhausted
	p.unexpected += o.unexpected
	p.cpu = p.cpu.add(o.cpu)
	p.lat = append(p.lat, o.lat...)
	return p
}

func (p *phaseResult) finish() { p.p50, p.p99 = quantile(p.lat, 0.50), quantile(p.lat, 0.99) }

func (p phaseResult) String() string {
	c := p.cpu.per(p.requests)
	return fmt.Sprintf("%d requests, %d accepted in %s (%.0f/s), p50 %s, p99 %s, CPU per request: load %s, receiver %s, PostgreSQL %s %s",
		p.requests, p.accepted, p.elapsed.Round(time.Millisecond), p.acceptedPerSec(), ms(p.p50), ms(p.p99),
		us(c.client), us(c.receiver), us(c.database), p.unexpected)
}

func (p phaseResult) acceptedPerSec() float64 { return float64(p.accepted) / p.elapsed.Seconds() }
func (p phaseResult) rate() float64           { return float64(p.requests) / p.elapsed.Seconds() }

func attack(a *vegeta.Attacker, b *batch, rate vegeta.Rate, d time.Duration, name string) phaseResult {
	var (
		res        phaseResult
		lat        = make([]time.Duration, 0, len(b.targets))
		codes      = map[int]int{}
		first      time.Time
		last       time.Time
		errSamples = map[string]bool{}
	)
	for r := range a.Attack(b.targeter(), rate, d, name) {
		if r.Error == vegeta.ErrNoTargets.Error() {
			res.exhausted = true
			continue
		}
		res.requests++
		if first.IsZero() || r.Timestamp.Before(first) {
			first = r.Timestamp
		}
		if end := r.Timestamp.Add(r.Latency); end.After(last) {
			last = end
		}
		lat = append(lat, r.Latency)
		codes[int(r.Code)]++
		if r.Code >= 200 && r.Code < 300 {
			res.accepted++
		}
		if r.Code == 0 && r.Error != "" && len(errSamples) < 3 {
			errSamples[r.Error] = true
		}
	}
	res.elapsed = last.Sub(first)
	res.lat = lat
	res.finish()
	for code, n := range codes {
		if (code < 200 || code >= 300) && code != http.StatusUnauthorized {
			res.unexpected += fmt.Sprintf("%s:%d×%d ", name, code, n)
		}
	}
	for e := range errSamples {
		res.unexpected += fmt.Sprintf("(%s) ", e)
	}
	return res
}

// checkStored counts the receipts of new events and the distinct new events sent.
// Every new event was answered 2xx in a healthy run, and each must be stored once.
func checkStored(ctx context.Context, db *pgx.Conn, load *stripeLoad) (int64, int64, error) {
	var stored int64
	err := db.QueryRow(ctx, `SELECT count(*) FROM `+store.TablesIn(benchSchema).Events+
		` WHERE endpoint = $1 AND event_id LIKE 'evt\_bench\_%' AND event_id NOT LIKE 'evt\_bench\_forged\_%'`,
		benchEndpoint).Scan(&stored)
	if err != nil {
		return 0, 0, fmt.Errorf("count receipts: %w", err)
	}
	return stored, int64(load.delivered), nil
}

// bytesPerEvent divides the on-disk size of what each side writes per event (heap,
// TOAST and indexes; the shared orders table excluded) by the events written.
func bytesPerEvent(ctx context.Context, db *pgx.Conn, pgbenchTxns int) (int64, int64, error) {
	t := store.TablesIn(benchSchema)
	var rx, rxEvents, pg int64
	err := db.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass) + pg_total_relation_size($2::regclass)
		+ pg_total_relation_size($3::regclass), (SELECT count(*) FROM `+t.Events+`),
		pg_total_relation_size('webhook_receipts') + pg_total_relation_size('fulfilment_outbox')`,
		t.Events, t.Outbox, t.EntityClocks).Scan(&rx, &rxEvents, &pg)
	if err != nil {
		return 0, 0, fmt.Errorf("measure table sizes: %w", err)
	}
	if rxEvents == 0 || pgbenchTxns == 0 {
		return 0, 0, errors.New("nothing was written")
	}
	return rx / rxEvents, pg / int64(pgbenchTxns), nil
}

// addOrders inserts pending orders prefix<from>..prefix<to-1>.
func addOrders(ctx context.Context, db *pgx.Conn, prefix string, from, to int) error {
	if to <= from {
		return nil
	}
	_, err := db.Exec(ctx, `INSERT INTO orders (tenant_id, client_txn_id, status, expected_amount_paise)
		SELECT 'acme', $1 || n, 'payment_pending', $4 FROM generate_series($2::int, $3::int - 1) AS n`,
		prefix, from, to, orderAmount)
	if err != nil {
		return fmt.Errorf("insert orders: %w", err)
	}
	return nil
}

// settle gives every phase the same starting point: fresh statistics and no
// checkpoint pending from the previous phase's writes.
func settle(ctx context.Context, db *pgx.Conn) error {
	for _, stmt := range []string{"VACUUM ANALYZE", "CHECKPOINT"} {
		if _, err := db.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", strings.ToLower(stmt), err)
		}
	}
	return nil
}

// writeBenchManifest writes the endpoint of the seed document: Stripe, bound to the
// app's orders table with its tenant, capture from payment_pending to paid when the
// amount matches, emitting order.paid.
func writeBenchManifest(dir string, conns int) (string, error) {
	ns, name, _ := strings.Cut(benchEndpoint, "/")
	ep := hookv1.WebhookEndpoint{
		TypeMeta:   metav1.TypeMeta{APIVersion: hookv1.GroupVersion.String(), Kind: "WebhookEndpoint"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: hookv1.WebhookEndpointSpec{
			Provider: hookv1.ProviderSpec{Type: hookv1.ProviderStripe},
			SigningSecrets: []hookv1.SigningSecret{{SecretKeyRef: corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "stripe-webhook"}, Key: "current"}}},
			Event: hookv1.EventSpec{
				ID:         "body.id",
				Type:       "body.type",
				EntityKey:  "body.data.object.metadata.client_txn_id",
				Amount:     "body.data.object.amount",
				OccurredAt: "body.created",
			},
			Database: hookv1.DatabaseSpec{
				URLSecretRef: corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "shop-db-app"}, Key: "uri"},
				Schema:         benchSchema,
				MaxConnections: int32(max(conns, 2)),
			},
			Entity: hookv1.EntitySpec{
				Table: &hookv1.EntityTableSpec{
					Schema: "public", Name: "orders", KeyColumn: "client_txn_id", StateColumn: "status",
					AmountColumn: "expected_amount_paise",
					Tenant:       &hookv1.TenantSpec{Column: "tenant_id", Value: "acme"},
				},
				OnUnmatched: hookv1.UnmatchedRecord,
			},
			StateMachine: hookv1.StateMachineSpec{
				Initial: "payment_pending",
				States:  []string{"payment_pending", "paid", "failed", "refunded"},
				Transitions: []hookv1.Transition{{
					Name: "capture", On: []string{"payment_intent.succeeded"},
					From: []string{"payment_pending"}, To: "paid",
					Guard: "event.amount == entity.amount", Emit: "order.paid",
				}},
			},
			Delivery: hookv1.DeliverySpec{Sink: hookv1.SinkSpec{URL: "http://127.0.0.1:1/unused"}},
			Receiver: hookv1.ReceiverSpec{Path: "/", MaxBodyBytes: 1 << 20},
		},
	}
	data, err := json.MarshalIndent(ep, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode bench manifest: %w", err)
	}
	path := filepath.Join(dir, "endpoint.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", fmt.Errorf("write bench manifest: %w", err)
	}
	return path, nil
}

// quantile sorts lat and returns its q-quantile (nearest rank).
func quantile(lat []time.Duration, q float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	i := int(q*float64(len(lat))+0.5) - 1
	return lat[min(max(i, 0), len(lat)-1)]
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
}
