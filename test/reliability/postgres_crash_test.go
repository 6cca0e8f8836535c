// Package reliability holds the crash tests (docs/architecture.md, "Numbers we hold
// ourselves to", reliability) that need a database of their own: PostgreSQL is crashed (immediate stop, crash recovery on restart) while
// the receiver is under load, and every acknowledged event must be stored exactly once
// with exactly one outbox row per applied transition.
package reliability

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/config"
	"github.com/hookkeeper/hookkeeper/internal/demo"
	"github.com/hookkeeper/hookkeeper/internal/pgtemp"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/receiver"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

const (
	schema  = "hookkeeper"
	secret  = "whsec_reliability_test_secret"
	senders = 8
	// perSender events each; every one is sent until acknowledged, some twice.
	perSender = 60
)

func endpoint() *v1alpha1.WebhookEndpoint {
	ref := func(n, k string) corev1.SecretKeySelector {
		return corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: n}, Key: k}
	}
	return &v1alpha1.WebhookEndpoint{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "WebhookEndpoint"},
		ObjectMeta: metav1.ObjectMeta{Name: "payments", Namespace: "reliability"},
		Spec: v1alpha1.WebhookEndpointSpec{
			Provider:       v1alpha1.ProviderSpec{Type: v1alpha1.ProviderStripe},
			SigningSecrets: []v1alpha1.SigningSecret{{SecretKeyRef: ref("signing", "current")}},
			Database:       v1alpha1.DatabaseSpec{URLSecretRef: ref("db", "uri"), Schema: schema, MaxConnections: 8},
			Event:          v1alpha1.EventSpec{EntityKey: "body.data.object.metadata.order"},
			Entity:         v1alpha1.EntitySpec{OnUnmatched: v1alpha1.UnmatchedCreate},
			StateMachine: v1alpha1.StateMachineSpec{
				Initial: "payment_pending",
				States:  []string{"payment_pending", "paid"},
				Transitions: []v1alpha1.Transition{{
					Name: "capture", On: []string{"payment_intent.succeeded"},
					From: []string{"payment_pending"}, To: "paid", Emit: "order.paid",
				}},
			},
			Delivery: v1alpha1.DeliverySpec{Sink: v1alpha1.SinkSpec{URL: "http://127.0.0.1:1/unused"}},
			Receiver: v1alpha1.ReceiverSpec{Path: "/", MaxBodyBytes: 1 << 20},
		},
	}
}

// refused counts deliveries that were not acknowledged (the crash window's 503s).
var refused atomic.Int64

// deliver sends one event until it is acknowledged, as a provider retries non-2xx.
func deliver(client *http.Client, url string, body []byte, deadline time.Time) bool {
	for time.Now().Before(deadline) {
		code, err := demo.PostStripeWith(context.Background(), client, url, secret, body)
		if err == nil && code/100 == 2 {
			return true
		}
		refused.Add(1)
		time.Sleep(20 * time.Millisecond) // a provider's retry interval, not a wait for a condition
	}
	return false
}

func TestPostgresCrashUnderLoadLosesAndRepeatsNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and crashes a PostgreSQL server of its own")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	pg, err := pgtemp.StartWith(ctx, pgtemp.Settings{Durable: true})
	if err != nil {
		t.Fatalf("start a durable throwaway PostgreSQL: %v", err)
	}
	t.Cleanup(pg.Stop)
	if _, err := store.Migrate(ctx, pg.URL, schema); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	env := map[string]string{config.EnvDatabaseURL: pg.URL, config.EnvSigningSecretPrefix + "0": secret}
	ep, err := config.Compile(endpoint(), func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("compile endpoint: %v", err)
	}
	pool, err := store.Open(ctx, pg.URL, 8)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	handler, err := receiver.HandlerFor(ep, receipt.NewRecorder(pool, ep), logr.Discard())
	if err != nil {
		t.Fatalf("handler: %v", err)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	client := &http.Client{Timeout: 10 * time.Second}

	// Senders deliver their events until acknowledged; every third event is delivered
	// a second time after its acknowledgement, as a provider whose ack was lost would.
	var acked, crashed atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(3 * time.Minute)
	failures := make(chan string, senders*perSender)
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perSender {
				body := fmt.Appendf(nil, `{"id":"evt_%d_%d","object":"event","type":"payment_intent.succeeded",`+
					`"created":%d,"data":{"object":{"id":"pi_%d_%d","object":"payment_intent","amount":100,`+
					`"metadata":{"order":"order-%d-%d"}}}}`, s, i, time.Now().Unix(), s, i, s, i)
				copies := 1
				if i%3 == 0 {
					copies = 2
				}
				for range copies {
					if !deliver(client, srv.URL, body, deadline) {
						failures <- fmt.Sprintf("evt_%d_%d never acknowledged", s, i)
						return
					}
				}
				acked.Add(1)
			}
		}()
	}

	// Crash the server once a third of the events are in, while the senders keep going.
	for acked.Load() < senders*perSender/3 {
		select {
		case msg := <-failures:
			t.Fatal(msg)
		case <-ctx.Done():
			t.Fatal("load did not start")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := pg.Crash(ctx); err != nil {
		t.Fatalf("crash PostgreSQL: %v", err)
	}
	crashed.Store(acked.Load())
	wg.Wait()
	close(failures)
	for msg := range failures {
		t.Error(msg)
	}
	if t.Failed() {
		return
	}
	t.Logf("crashed PostgreSQL after %d of %d events were acknowledged; %d deliveries refused and retried",
		crashed.Load(), senders*perSender, refused.Load())
	if refused.Load() == 0 {
		t.Fatal("no delivery was refused: the crash happened outside the load, so the test proved nothing")
	}

	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	tables := store.TablesIn(schema)
	var receipts, applied, outbox, orphanOutbox, entitiesPaid int64
	query := fmt.Sprintf(`SELECT
		(SELECT count(*) FROM %[1]s),
		(SELECT count(*) FROM %[1]s WHERE outcome = 'applied'),
		(SELECT count(*) FROM %[2]s),
		(SELECT count(*) FROM %[2]s o WHERE NOT EXISTS (
			SELECT 1 FROM %[1]s e WHERE e.endpoint = o.endpoint AND e.event_id = o.source_event_id AND e.outcome = 'applied')),
		(SELECT count(*) FROM %[3]s WHERE state = 'paid')`, tables.Events, tables.Outbox, tables.Entities)
	if err := conn.QueryRow(ctx, query).Scan(&receipts, &applied, &outbox, &orphanOutbox, &entitiesPaid); err != nil {
		t.Fatalf("count rows: %v", err)
	}
	want := int64(senders * perSender)
	if receipts != want || applied != want {
		t.Errorf("receipts %d (applied %d), want exactly %d: every acknowledged event stored once", receipts, applied, want)
	}
	if outbox != want || orphanOutbox != 0 {
		t.Errorf("outbox rows %d (%d without an applied receipt), want exactly one per applied transition (%d)", outbox, orphanOutbox, want)
	}
	if entitiesPaid != want {
		t.Errorf("%d entities paid, want %d", entitiesPaid, want)
	}
}
