package dataplanecmd_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/metrics"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/store"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// chainEndpoint is a Stripe endpoint whose orders go new -> pending -> paid -> refunded
// -> closed, one event type per step, each emitting an effect; an event that arrives
// before the order exists creates it, and one that arrives before its step parks.
const chainEndpoint = `apiVersion: hookkeeper.dev/v1alpha1
kind: WebhookEndpoint
metadata: {name: chain, namespace: shop}
spec:
  provider: {type: Stripe}
  signingSecrets:
  - secretKeyRef: {name: stripe-webhook, key: current}
  event:
    entityKey: body.data.object.metadata.client_txn_id
  database:
    urlSecretRef: {name: shop-db, key: uri}
    schema: ` + testsupport.StripeEndpointSchema + `
    maxConnections: 8
  entity: {onUnmatched: Create}
  stateMachine:
    initial: new
    states: [new, pending, paid, refunded, closed]
    transitions:
    - {name: open, "on": [payment_intent.created], from: [new], to: pending, emit: order.opened}
    - {name: capture, "on": [payment_intent.succeeded], from: [pending], to: paid, emit: order.paid}
    - {name: refund, "on": [charge.refunded], from: [paid], to: refunded, emit: order.refunded}
    - {name: close, "on": [charge.dispute.closed], from: [refunded], to: closed, emit: order.closed}
  delivery:
    sink: {url: "http://127.0.0.1:9/"}
  receiver: {path: /chain}
`

// chainSteps are an order's events in provider order, with the effect each emits.
var chainSteps = []struct{ typ, emit string }{
	{"payment_intent.created", "order.opened"},
	{"payment_intent.succeeded", "order.paid"},
	{"charge.refunded", "order.refunded"},
	{"charge.dispute.closed", "order.closed"},
}

// TestReceiverConvergesUnderConcurrentOutOfOrderCopies is a provider against the real
// receiver (`hookkeeper receiver`, group commit at its defaults): 32 senders deliver,
// signed, every event of 24 orders in a random order, each event two or three times at
// once, retrying whatever was not answered 2xx; in one run another session keeps
// terminating the receiver's database sessions. Every 2xx must name an event already
// stored when it is read back, and in the end every order is where provider order puts
// it, every event stored once and applied, and each effect written once, in provider
// order.
func TestReceiverConvergesUnderConcurrentOutOfOrderCopies(t *testing.T) {
	for _, tc := range []struct {
		name         string
		kill, hangUp bool
	}{
		{"steady", false, false},
		{"sessions killed", true, false},
		// The senders' first attempts give up after a few milliseconds, as a provider
		// with a short timeout does: members leave groups mid-transaction.
		{"senders hang up", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			receiverConverges(t, tc.kill, tc.hangUp)
		})
	}
}

func receiverConverges(t *testing.T, kill, hangUp bool) {
	const (
		orders  = 24
		senders = 32
		victim  = "hk-receiver-victim"
		secret  = "whsec_chain_test"
	)
	dbURL := testsupport.MigratedDatabase(t, testsupport.StripeEndpointSchema)
	sep := "?"
	if strings.Contains(dbURL, "?") {
		sep = "&"
	}
	t.Setenv(config.EnvDatabaseURL, dbURL+sep+"application_name="+victim)
	t.Setenv(config.EnvSigningSecretPrefix+"0", secret)
	manifest := filepath.Join(t.TempDir(), "endpoint.yaml")
	if err := os.WriteFile(manifest, []byte(chainEndpoint), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	checker, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer checker.Close()

	webhookAddr, adminAddr := testsupport.FreeAddr(t), testsupport.FreeAddr(t)
	receiver := testsupport.Run(t, ctx, "receiver", 20*time.Second, receiverCommand(
		"--endpoint", manifest, "--listen-address", webhookAddr, "--admin-address", adminAddr,
		"--dispatcher=false", "--log-level", "error", "--shutdown-timeout", "10s"))
	testsupport.WaitReady(t, "http://"+adminAddr+"/readyz", 20*time.Second, receiver.Exited)

	type delivery struct{ id, typ, order string }
	var deliveries []delivery
	rng := rand.New(rand.NewPCG(7, 8))
	for o := range orders {
		for _, s := range chainSteps {
			d := delivery{fmt.Sprintf("evt_%d_%s", o, s.typ), s.typ, fmt.Sprintf("ord-%d", o)}
			for range 2 + rng.IntN(2) {
				deliveries = append(deliveries, d)
			}
		}
	}
	rng.Shuffle(len(deliveries), func(a, b int) { deliveries[a], deliveries[b] = deliveries[b], deliveries[a] })
	// Provider order is occurredAt (Stripe's created, in seconds): the steps of an order
	// are a second apart, in the past.
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	bodies := map[string][]byte{}
	for o := range orders {
		for i, s := range chainSteps {
			id := fmt.Sprintf("evt_%d_%s", o, s.typ)
			at := base.Add(time.Duration(o*10+i) * time.Second)
			bodies[id] = demo.StripeEvent(id, s.typ, fmt.Sprintf("ord-%d", o), 500, at)
		}
	}

	// A nil killer (the runs that kill nothing) does nothing.
	var killer *testsupport.SessionKiller
	if kill {
		killer = testsupport.KillSessions(ctx, checker, victim)
	}

	groupsBefore, alonesBefore := groupSizes(t)
	url := "http://" + webhookAddr + "/chain"
	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: senders}}
	// Connections dialled for requests that were abandoned hold the receiver's graceful
	// shutdown for 5 s (net/http counts a new connection as idle only after 5 s).
	defer client.CloseIdleConnections()
	var refused atomic.Int64
	work := make(chan delivery)
	errs := make(chan error, len(deliveries))
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() {
			for d := range work {
				deadline := time.Now().Add(40 * time.Second)
				for attempt := 0; ; attempt++ {
					actx, acancel := context.WithCancel(ctx)
					if hangUp && attempt < 3 {
						actx, acancel = context.WithTimeout(ctx, time.Duration(1+rand.IntN(15))*time.Millisecond)
					}
					status, err := demo.PostStripeWith(actx, client, url, secret, bodies[d.id])
					acancel()
					if err == nil && status == http.StatusOK {
						// A 2xx promises the event is stored: read it back at once.
						var stored bool
						if err := checker.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM hookkeeper.webhook_events WHERE event_id = $1)`, d.id).Scan(&stored); err != nil {
							errs <- err
						} else if !stored {
							errs <- fmt.Errorf("%s answered %d but not stored", d.id, status)
						}
						killer.Progress()
						break
					}
					refused.Add(1)
					if ctx.Err() != nil || time.Now().After(deadline) {
						errs <- fmt.Errorf("%s never acknowledged: %d, %s", d.id, status, fmt.Sprint(err))
						break
					}
					select {
					case <-ctx.Done():
					case <-time.After(time.Duration(1+rand.IntN(5)) * time.Millisecond):
					}
				}
			}
		})
	}
	for _, d := range deliveries {
		work <- d
	}
	close(work)
	wg.Wait()
	killed := killer.Stop()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	groups, alones := groupSizes(t)
	groups, alones = groups-groupsBefore, alones-alonesBefore
	t.Logf("%d deliveries by %d senders, %d answers not 2xx (retried), %d sessions terminated; %d receipt transactions, %d of them alone",
		len(deliveries), senders, refused.Load(), killed, groups, alones)
	if groups == alones {
		t.Error("no receipt transaction was shared: the run formed no group")
	}
	if kill && killed == 0 {
		t.Error("no session was terminated: the run crashed nothing")
	}
	if hangUp && refused.Load() == 0 {
		t.Error("no sender hung up: the run abandoned nothing")
	}
	if !kill && !hangUp && refused.Load() != 0 {
		t.Errorf("%d deliveries were not answered 2xx with nothing failing", refused.Load())
	}

	q := func(sql string, args ...any) string {
		t.Helper()
		var s string
		if err := checker.QueryRow(ctx, sql, args...).Scan(&s); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return s
	}
	var wantEffects []string
	for _, s := range chainSteps {
		wantEffects = append(wantEffects, s.emit)
	}
	for o := range orders {
		key := fmt.Sprintf("ord-%d", o)
		got := q(`SELECT COALESCE((SELECT state || ' v' || version FROM hookkeeper.entities WHERE entity_key = $1), 'missing')
			|| ' | ' || COALESCE((SELECT string_agg(event_type, ',' ORDER BY id) FROM hookkeeper.outbox WHERE entity_key = $1), '')`, key)
		if want := "closed v4 | " + strings.Join(wantEffects, ","); got != want {
			t.Errorf("%s: %s, want %s", key, got, want)
		}
	}
	// One receipt per event (the unique constraint makes them distinct), each applied.
	rows := testsupport.NewRows(checker, store.TablesIn(testsupport.StripeEndpointSchema))
	if got, applied := rows.Receipts(t), rows.ReceiptsWithOutcome(t, receipt.OutcomeApplied); got != orders*4 || applied != orders*4 {
		t.Errorf("%d receipts, %d applied; want %d of each", got, applied, orders*4)
	}
	// Each receipt holds the body its event was sent with, whoever answered or left.
	for id, body := range bodies {
		var same bool
		if err := checker.QueryRow(ctx, `SELECT payload = $2::jsonb FROM hookkeeper.webhook_events WHERE event_id = $1`, id, string(body)).Scan(&same); err != nil || !same {
			t.Errorf("receipt of %s does not hold its body (%v)", id, err)
		}
	}
	// Each effect once, under the key derived from its event.
	var wantKeys []string
	for o := range orders {
		for _, s := range chainSteps {
			wantKeys = append(wantKeys, receipt.DedupeKey("shop/chain", fmt.Sprintf("evt_%d_%s", o, s.typ), s.emit))
		}
	}
	slices.Sort(wantKeys)
	if got := q(`SELECT COALESCE(string_agg(dedupe_key, ',' ORDER BY dedupe_key), '') FROM hookkeeper.outbox`); got != strings.Join(wantKeys, ",") {
		t.Errorf("outbox keys differ from one per applied event (%d rows)", strings.Count(got, ",")+1)
	}
}

// groupSizes reads the receiver's group-size histogram for shop/chain: how many receipt
// transactions ran, and how many of them alone.
func groupSizes(t *testing.T) (all, alone uint64) {
	t.Helper()
	var m dto.Metric
	if err := metrics.GroupSize.WithLabelValues("shop/chain").(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	h := m.GetHistogram()
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == 1 {
			alone = b.GetCumulativeCount()
		}
	}
	return h.GetSampleCount(), alone
}
