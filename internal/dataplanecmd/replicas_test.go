package dataplanecmd_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"testing"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/receipt"
	"github.com/hookkeeper/hookkeeper/internal/signature/sigtest"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// TestReceiverConvergesUnderConcurrentOutOfOrderCopies is a provider against the real
// receiver (`hookkeeper receiver`, group commit at its defaults): 32 senders deliver,
// signed, every event of 24 orders in a random order, each event two or three times at
// once, retrying whatever was not answered 2xx, while an attacker's forged and replayed
// copies race them; in one run another session keeps terminating the receiver's
// database sessions, in another the senders hang up. Every 2xx must name an event already
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
		orders = 24
		victim = "hk-receiver-victim"
		secret = "whsec_chain_test"
	)
	run := newChainRun(t, secret, victim)
	bases := startReplicas(t, run.ctx, chainEndpoint(), 1)
	chain := stripeChainPosts(rand.New(rand.NewPCG(7, 8)), orders, secret)
	// A nil killer (the runs that kill nothing) does nothing.
	var killer *testsupport.SessionKiller
	if kill {
		killer = testsupport.KillSessions(run.ctx, run.checker, victim)
	}
	refused := run.spread(t, bases, chain.posts, spread{senders: 32, hangUp: hangUp, acked: killer.Progress})
	killed := killer.Stop()
	t.Logf("%d sessions terminated", killed)
	if kill && killed == 0 {
		t.Error("no session was terminated: the run crashed nothing")
	}
	if hangUp && refused == 0 {
		t.Error("no sender hung up: the run abandoned nothing")
	}
	if !kill && !hangUp && refused != 0 {
		t.Errorf("%d deliveries were not answered 2xx with nothing failing", refused)
	}
	chain.checkOutcome(t, run, entityStateSQL, "closed v4")
}

// Two receivers on one database and one endpoint, as a Deployment with two replicas
// runs them: the provider's copies of one event reach both at once, out of order, and
// only the database (entity locks, the receipt's unique constraint) keeps them apart.

// TestReplicasConvergeUnderSpreadOutOfOrderCopies: two receivers on one database serve
// one endpoint; 32 senders deliver every event of 24 orders in a random order, two or
// three copies of each at once, the copies spread over both replicas, with an
// attacker's forged and replayed copies racing them (each answered 401). Every 2xx
// names stored events, nothing genuine is refused, and every order ends where provider
// order puts it, each event stored once, applied and holding its signed body, each
// effect once and in provider order.
func TestReplicasConvergeUnderSpreadOutOfOrderCopies(t *testing.T) {
	const (
		orders = 24
		secret = "whsec_replicas_test"
	)
	run := newChainRun(t, secret, "")
	bases := startReplicas(t, run.ctx, chainEndpoint(), 2)
	chain := stripeChainPosts(rand.New(rand.NewPCG(11, 12)), orders, secret)
	// Forged requests are answered 401 and not retried. Replicas lock entities in key
	// order and a group waits at most its lock timeout before its members run alone:
	// nothing fails with nothing failing.
	if refused := run.spread(t, bases, chain.posts, spread{senders: 32}); refused != 0 {
		t.Errorf("%d deliveries were not answered 2xx with nothing failing", refused)
	}
	chain.checkOutcome(t, run, entityStateSQL, "closed v4")
}

// adyenChain are a payment's notifications in provider order. Adyen signs no time, so
// provider order is the state machine's: an item that arrives before its step parks.
var adyenChain = []chainStep{
	{"authorise", "AUTHORISATION", "authorised", "payment.authorised"},
	{"capture", "CAPTURE", "captured", "payment.captured"},
	{"refund", "REFUND", "refunded", "payment.refunded"},
	{"chargeback", "CHARGEBACK", "disputed", "payment.disputed"},
}

// adyenChainEndpoint is chainEndpoint for Adyen (at /adyen): payments, keyed by Adyen's
// merchantReference, go through adyenChain.
func adyenChainEndpoint() *v1alpha1.WebhookEndpoint {
	we := chainEndpoint()
	we.Spec.Provider.Type = v1alpha1.ProviderAdyen
	we.Spec.SigningSecrets = []v1alpha1.SigningSecret{{SecretKeyRef: testsupport.SecretRef("adyen-hmac", "current")}}
	we.Spec.Event = v1alpha1.EventSpec{}
	we.Spec.StateMachine = chainMachine("new", adyenChain)
	we.Spec.Receiver.Path = "/adyen"
	return we
}

// postAdyen sends an Adyen Standard webhook: the items carry their own signatures.
func postAdyen(ctx context.Context, client *http.Client, url string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	_ = resp.Body.Close()
	if resp.StatusCode == http.StatusOK && string(b) != "[accepted]" {
		return 0, fmt.Errorf("200 with body %q, want [accepted]", b)
	}
	return resp.StatusCode, nil
}

// TestReplicasAdyenBatchesRaceSingleItems: two receivers of one Adyen endpoint.
// Every item of 16 payments is delivered alone once or twice, and again inside
// batches of two to five items that mix payments and steps in random order (a batch
// may hold an item twice); batches and single items race over both replicas, and so
// do an attacker's copies of each item with its amount changed after signing, alone
// and inside genuine batches (each answered 401, nothing of it stored). Batches lock
// their entities in key order, as groups do, so none deadlocks (a 5xx is fine when the
// retry succeeds; a request left unanswered, or any deadlock, is not). Every item is stored once and every
// payment ends as provider order puts it, each effect once, in order.
func TestReplicasAdyenBatchesRaceSingleItems(t *testing.T) {
	const (
		payments = 16
		senders  = 24
	)
	run := newChainRun(t, sigtest.AdyenHexKey, "")
	ctx, checker := run.ctx, run.checker
	bases := startReplicas(t, ctx, adyenChainEndpoint(), 2)

	type item struct {
		id          string
		obj, forged map[string]any // forged: its amount changed to 1 after it was signed
	}
	rng := rand.New(rand.NewPCG(21, 22))
	var items []item
	var ids, dedupeKeys, keys []string
	for p := range payments {
		ref := fmt.Sprintf("pay-%d", p)
		keys = append(keys, ref)
		auth := fmt.Sprintf("PSP%04d0", p)
		for s, step := range adyenChain {
			it := sigtest.AdyenItem{PSP: fmt.Sprintf("PSP%04d%d", p, s), Merchant: "ShopAccount", Reference: ref,
				Value: 500, Currency: "EUR", EventCode: step.on, Success: "true"}
			if s > 0 {
				it.Original = auth
			}
			id := it.PSP + ":" + step.on + ":true"
			extra := map[string]any{"eventDate": "2026-01-01T01:00:00+01:00"}
			tampered := it
			tampered.Value = 1
			items = append(items, item{id, it.JSON(t, "", extra), tampered.WithSignature(it.Signature(t), extra)})
			ids = append(ids, id)
			dedupeKeys = append(dedupeKeys, receipt.DedupeKey("shop/chain", id, step.emit))
		}
	}
	send := func(body []byte) func(ctx context.Context, client *http.Client, base string) (int, error) {
		return func(ctx context.Context, client *http.Client, base string) (int, error) {
			return postAdyen(ctx, client, base+"/adyen", body)
		}
	}
	var posts []replicaPost
	for _, it := range items {
		first := rng.IntN(2)
		for c := range 1 + rng.IntN(2) {
			posts = append(posts, replicaPost{what: "item " + it.id, replica: first + c, ids: []string{it.id},
				send: send(sigtest.AdyenBody(t, nil, it.obj))})
		}
		// An attacker's copy, racing the genuine ones: alone, and riding in a batch of
		// genuine items.
		other := items[rng.IntN(len(items))]
		posts = append(posts,
			replicaPost{what: "forged item " + it.id, replica: rng.IntN(2), forged: true, send: send(sigtest.AdyenBody(t, nil, it.forged))},
			replicaPost{what: "batch with forged item " + it.id, replica: rng.IntN(2), forged: true,
				send: send(sigtest.AdyenBody(t, nil, other.obj, it.forged, it.obj))})
	}
	batches := 0
	for range 2 {
		pass := slices.Clone(items)
		rng.Shuffle(len(pass), func(a, b int) { pass[a], pass[b] = pass[b], pass[a] })
		for len(pass) > 0 {
			n := min(len(pass), 2+rng.IntN(4))
			batch := pass[:n]
			pass = pass[n:]
			var objs []map[string]any
			var bids []string
			for _, it := range batch {
				objs = append(objs, it.obj)
				bids = append(bids, it.id)
			}
			if rng.IntN(4) == 0 {
				objs = append(objs, batch[0].obj)
			}
			posts = append(posts, replicaPost{what: fmt.Sprintf("batch of %d (%s...)", len(objs), bids[0]),
				replica: rng.IntN(2), ids: bids, send: send(sigtest.AdyenBody(t, nil, objs...))})
			batches++
		}
	}
	posts = shuffled(rng, posts)
	t.Logf("%d of the posts are batches", batches)
	run.spread(t, bases, posts, spread{senders: senders})

	chainOutcome(t, ctx, checker, keys, entityStateSQL,
		"disputed v4", emits(adyenChain), len(ids), dedupeKeys)
	var forged int
	if err := checker.QueryRow(ctx, `SELECT (SELECT count(*) FROM hookkeeper.webhook_events WHERE amount IS DISTINCT FROM 500)
		+ (SELECT count(*) FROM hookkeeper.entities WHERE amount IS DISTINCT FROM 500)`).Scan(&forged); err != nil {
		t.Fatal(err)
	}
	if forged != 0 {
		t.Errorf("%d receipts or payments hold a forged amount", forged)
	}
}

// appTableChainEndpoint is chainEndpoint bound to the app's own orders table (tenant
// acme), with the capture guarded by the order's expected amount.
func appTableChainEndpoint() *v1alpha1.WebhookEndpoint {
	we := chainEndpoint()
	we.Spec.Entity = v1alpha1.EntitySpec{Table: &v1alpha1.EntityTableSpec{Schema: "public", Name: "orders",
		KeyColumn: "client_txn_id", StateColumn: "status", AmountColumn: "expected_amount_paise",
		Tenant: &v1alpha1.TenantSpec{Column: "tenant_id", Value: "acme"}}}
	we.Spec.StateMachine.Transitions[1].Guard = "event.amount == entity.amount"
	return we
}

// TestReplicasAppTableConvergesUnderSpreadOutOfOrderCopies is the two-replica run on an
// endpoint whose entities are the app's orders table: every acme order ends closed with
// its effects once and in provider order and its clock at its last event, while the
// other tenant's orders with the same keys never move.
func TestReplicasAppTableConvergesUnderSpreadOutOfOrderCopies(t *testing.T) {
	const (
		orders = 24
		secret = "whsec_replicas_app_table"
	)
	run := newChainRun(t, secret, "")
	ctx, checker := run.ctx, run.checker
	if _, err := checker.Exec(ctx, `CREATE TABLE public.orders (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		tenant_id text NOT NULL,
		client_txn_id text NOT NULL,
		status text NOT NULL,
		expected_amount_paise bigint NOT NULL,
		UNIQUE (tenant_id, client_txn_id))`); err != nil {
		t.Fatal(err)
	}
	for _, key := range orderKeys(orders) {
		if _, err := checker.Exec(ctx, `INSERT INTO public.orders (tenant_id, client_txn_id, status, expected_amount_paise)
			VALUES ('acme', $1, 'new', 500), ('globex', $1, 'new', 500)`, key); err != nil {
			t.Fatal(err)
		}
	}
	bases := startReplicas(t, ctx, appTableChainEndpoint(), 2)
	chain := stripeChainPosts(rand.New(rand.NewPCG(31, 32)), orders, secret)
	if refused := run.spread(t, bases, chain.posts, spread{senders: 32}); refused != 0 {
		t.Errorf("%d deliveries were not answered 2xx with nothing failing", refused)
	}
	chain.checkOutcome(t, run, `SELECT status FROM public.orders WHERE tenant_id = 'acme' AND client_txn_id = $1`, "closed")
	var moved, clocks int
	if err := checker.QueryRow(ctx, `SELECT count(*) FILTER (WHERE tenant_id <> 'acme' AND status <> 'new') FROM public.orders`).Scan(&moved); err != nil {
		t.Fatal(err)
	}
	if moved != 0 {
		t.Errorf("%d orders of another tenant moved", moved)
	}
	// Each order's clock is its last event's time: the close, step 3 of order o.
	if err := checker.QueryRow(ctx, `SELECT count(*) FROM hookkeeper.entity_clocks c
		JOIN hookkeeper.webhook_events e ON e.entity_key = c.entity_key AND e.event_type = 'charge.dispute.closed'
		WHERE c.last_event_at = e.occurred_at`).Scan(&clocks); err != nil {
		t.Fatal(err)
	}
	if clocks != orders {
		t.Errorf("%d entity clocks at their order's last event, want %d", clocks, orders)
	}
}
