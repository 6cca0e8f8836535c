package receipt

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/outbox"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

// entityModes runs fn for the managed entity table and for an app table, each with one
// order "o-1" in payment_pending for 500.
func entityModes(t *testing.T, fn func(t *testing.T, f *fixture, state func() string)) {
	t.Run("managed", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, nil))
		f.managedEntity("o-1", "payment_pending", 500)
		fn(t, f, func() string { return f.str(`SELECT state FROM hk.entities WHERE entity_key = 'o-1'`) })
	})
	t.Run("app table", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, ordersBinding()), ordersTable,
			`INSERT INTO public.orders (tenant_id, client_txn_id, status, expected_amount_paise) VALUES ('acme', 'o-1', 'payment_pending', 500)`)
		fn(t, f, func() string { return f.str(`SELECT status FROM public.orders WHERE client_txn_id = 'o-1'`) })
	})
}

// effects lists the outbox rows' event types and dedupe keys in insertion order.
func (f *fixture) effects() string {
	var s *string
	if err := f.pool.QueryRow(f.ctx, `SELECT string_agg(event_type, ',' ORDER BY id) FROM hk.outbox`).Scan(&s); err != nil {
		f.t.Fatalf("read outbox: %v", err)
	}
	if s == nil {
		return ""
	}
	return *s
}

func (f *fixture) outcomes() string {
	var s *string
	if err := f.pool.QueryRow(f.ctx, `SELECT string_agg(event_id || '=' || outcome, ',' ORDER BY event_id) FROM hk.webhook_events`).Scan(&s); err != nil {
		f.t.Fatalf("read receipts: %v", err)
	}
	if s == nil {
		return ""
	}
	return *s
}

// The demo's refund-before-capture: the refund parks, the capture applies and releases
// it in the same transaction, and both effects are in the outbox in provider order,
// each with the key it would have had in order.
func TestRefundBeforeCaptureConverges(t *testing.T) {
	t.Parallel()
	entityModes(t, func(t *testing.T, f *fixture, state func() string) {
		refund := ev("evt_ref", "charge.refunded", "o-1", 500, t0.Add(10*time.Second))
		if r := f.record(refund); r.Outcome != OutcomeParked {
			t.Fatalf("early refund: %+v", r)
		}
		if got := state(); got != "payment_pending" {
			t.Fatalf("a parked event moved the entity to %s", got)
		}
		r := f.record(ev("evt_cap", "payment_intent.succeeded", "o-1", 500, t0))
		if r.Outcome != OutcomeApplied || r.ToState != "paid" || len(r.Released) != 1 {
			t.Fatalf("capture: %+v", r)
		}
		rel := r.Released[0]
		if rel.EventID != "evt_ref" || rel.Outcome != OutcomeApplied || rel.FromState != "paid" || rel.ToState != "refunded" ||
			rel.OutboxKey != DedupeKey(f.ep.Key(), "evt_ref", "order.refunded") {
			t.Fatalf("released refund: %+v", rel)
		}
		if got := state(); got != "refunded" {
			t.Fatalf("state = %s, want refunded", got)
		}
		if got := f.effects(); got != "order.paid,order.refunded" {
			t.Fatalf("effects = %s", got)
		}
		if r := f.record(refund); !r.Duplicate {
			t.Fatalf("refund redelivery: %+v", r)
		}
		// A capture after the refund can never apply: refunded reaches no state a
		// capture starts from.
		if r := f.record(ev("evt_cap2", "payment_intent.succeeded", "o-1", 500, t0.Add(20*time.Second))); r.Outcome != OutcomeIgnoredState ||
			!strings.Contains(r.Detail, "or any state reachable") {
			t.Fatalf("capture after refund: %+v", r)
		}
		if got := f.outcomes(); got != "evt_cap=applied,evt_cap2=ignored_state,evt_ref=applied" {
			t.Fatalf("receipts = %s", got)
		}
	})
}

func TestStaleIsOlderThanTheLastAppliedEvent(t *testing.T) {
	t.Parallel()
	entityModes(t, func(t *testing.T, f *fixture, state func() string) {
		f.record(ev("evt_cap", "payment_intent.succeeded", "o-1", 500, t0.Add(5*time.Second)))
		// A refund that claims to predate the capture it follows: its moment has passed.
		if r := f.record(ev("evt_ref", "charge.refunded", "o-1", 500, t0)); r.Outcome != OutcomeIgnoredState || r.Detail != "stale" {
			t.Fatalf("stale refund: %+v", r)
		}
		if got := state(); got != "paid" {
			t.Fatalf("state = %s", got)
		}
	})
}

// A parked event that the releasing event makes stale is closed, not applied.
func TestParkedEventMadeStaleIsClosed(t *testing.T) {
	t.Parallel()
	entityModes(t, func(t *testing.T, f *fixture, state func() string) {
		// A dispute (from paid or refunded) parks while the order is pending.
		if r := f.record(ev("evt_dsp", "charge.dispute.created", "o-1", 500, t0)); r.Outcome != OutcomeParked {
			t.Fatalf("dispute: %+v", r)
		}
		r := f.record(ev("evt_cap", "payment_intent.succeeded", "o-1", 500, t0.Add(time.Second)))
		if len(r.Released) != 1 || r.Released[0].Outcome != OutcomeIgnoredState || r.Released[0].Detail != "stale" {
			t.Fatalf("capture released %+v", r.Released)
		}
		if got := state(); got != "paid" {
			t.Fatalf("state = %s", got)
		}
	})
}

func TestParkingOff(t *testing.T) {
	t.Parallel()
	we := endpointSpec(v1alpha1.UnmatchedRecord, nil)
	we.Spec.StateMachine.ParkFor = &metav1.Duration{}
	f := newFixture(t, we)
	f.managedEntity("o-1", "payment_pending", 500)
	if r := f.record(ev("evt_ref", "charge.refunded", "o-1", 500, t0.Add(time.Second))); r.Outcome != OutcomeIgnoredState || !strings.Contains(r.Detail, "parking is off") {
		t.Fatalf("refund: %+v", r)
	}
	if r := f.record(ev("evt_cap", "payment_intent.succeeded", "o-1", 500, t0)); len(r.Released) != 0 {
		t.Fatalf("capture released %+v", r.Released)
	}
	if got := f.effects(); got != "order.paid" {
		t.Fatalf("effects = %s", got)
	}
}

func TestParkedEventsExpireAndReplay(t *testing.T) {
	t.Parallel()
	entityModes(t, func(t *testing.T, f *fixture, state func() string) {
		f.record(ev("evt_ref", "charge.refunded", "o-1", 500, t0.Add(time.Second)))
		f.exec(`UPDATE hk.webhook_events SET processed_at = now() - interval '73 hours'`)
		f.record(ev("evt_dsp", "charge.dispute.created", "o-1", 500, t0.Add(2*time.Second)))
		// Both arrived 73h ago, but the dispute was parked just now (as when a replay parks
		// an old unmatched receipt): the deadline counts from parking, so only the refund
		// expires.
		f.exec(`UPDATE hk.webhook_events SET received_at = now() - interval '73 hours'`)
		n, oldest, err := f.rec.ParkedStats(f.ctx)
		if err != nil || n != 2 || oldest < 72*time.Hour {
			t.Fatalf("ParkedStats = %d, %s, %v; want 2 parked, the oldest 73h", n, oldest, err)
		}
		expired, err := f.rec.ExpireParked(f.ctx)
		if err != nil || expired != 1 {
			t.Fatalf("ExpireParked = %d, %v; want 1", expired, err)
		}
		if expired, err := f.rec.ExpireParked(f.ctx); err != nil || expired != 0 {
			t.Fatalf("second ExpireParked = %d, %v; want 0", expired, err)
		}
		if got := f.outcomes(); got != "evt_dsp=parked,evt_ref=expired" {
			t.Fatalf("receipts = %s", got)
		}
		// An expired event is not released by the capture; a replay re-drives it.
		r := f.record(ev("evt_cap", "payment_intent.succeeded", "o-1", 500, t0))
		if len(r.Released) != 1 || r.Released[0].EventID != "evt_dsp" || r.Released[0].Outcome != OutcomeApplied {
			t.Fatalf("capture released %+v", r.Released)
		}
		// Now disputed: the refund (from paid) can never apply; it is closed.
		res, err := f.rec.Reprocess(f.ctx, int64(f.count(`SELECT id FROM hk.webhook_events WHERE outcome = 'expired'`)))
		if err != nil || res.Outcome != OutcomeIgnoredState {
			t.Fatalf("Reprocess(expired refund) = %+v, %v", res, err)
		}
		if got := state(); got != "disputed" {
			t.Fatalf("state = %s", got)
		}
	})
}

// A guard that cannot be evaluated (a typo) records the error and applies nothing, not
// even another transition of the same type; once the guard is fixed, a replay applies.
func TestGuardErrorAppliesNothing(t *testing.T) {
	t.Parallel()
	withTypo := func(table *v1alpha1.EntityTableSpec) *v1alpha1.WebhookEndpoint {
		we := endpointSpec(v1alpha1.UnmatchedRecord, table)
		sm := &we.Spec.StateMachine
		sm.Transitions = append([]v1alpha1.Transition{{Name: "merge", On: []string{"payment_intent.succeeded"},
			From: []string{"payment_pending"}, To: "refunded", Guard: "event.body.pull_request.mergd == true", Emit: "pr.merged"}},
			sm.Transitions...)
		return we
	}
	for _, tc := range []struct {
		name  string
		we    *v1alpha1.WebhookEndpoint
		setup []string
		state string
	}{
		{"managed", withTypo(nil), nil, `SELECT state FROM hk.entities WHERE entity_key = 'o-1'`},
		{"app table", withTypo(ordersBinding()), []string{ordersTable,
			`INSERT INTO public.orders (tenant_id, client_txn_id, status, expected_amount_paise) VALUES ('acme', 'o-1', 'payment_pending', 500)`},
			`SELECT status FROM public.orders WHERE client_txn_id = 'o-1'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, tc.we, tc.setup...)
			if tc.we.Spec.Entity.Table == nil {
				f.managedEntity("o-1", "payment_pending", 500)
			}
			merged := ev("evt_cap", "payment_intent.succeeded", "o-1", 500, t0)
			merged.Payload = []byte(`{"id":"evt_cap","pull_request":{"merged":true}}`)
			merged.Body = map[string]any{"id": "evt_cap", "pull_request": map[string]any{"merged": true}}
			r := f.record(merged)
			if r.Outcome != OutcomeGuardError || r.Transition != "merge" || !strings.Contains(r.Detail, "mergd") {
				t.Fatalf("result = %+v", r)
			}
			if got := f.str(tc.state); got != "payment_pending" {
				t.Fatalf("state = %s: a transition applied after a guard error", got)
			}
			if got := f.effects(); got != "" {
				t.Fatalf("effects = %s", got)
			}
			// Fixed guard, then a replay: the merge applies.
			fixed := *tc.we
			fixed.Spec.StateMachine.Transitions = append([]v1alpha1.Transition(nil), tc.we.Spec.StateMachine.Transitions...)
			fixed.Spec.StateMachine.Transitions[0].Guard = "event.body.pull_request.merged == true"
			f.ep = f.compile(&fixed)
			rec := NewRecorder(f.pool, f.ep)
			res, err := rec.Reprocess(f.ctx, r.ReceiptID)
			if err != nil || res.Outcome != OutcomeApplied || res.Transition != "merge" {
				t.Fatalf("replay after the fix = %+v, %v", res, err)
			}
			if got := f.effects(); got != "pr.merged" {
				t.Fatalf("effects after the replay = %s", got)
			}
		})
	}
}

// Many deliveries of the same entities, in random orders, concurrently, with copies:
// the entity row lock serialises them and every entity converges to the in-order
// result with its effects in provider order.
func TestConcurrentOutOfOrderDeliveriesConverge(t *testing.T) {
	t.Parallel()
	// "two replicas" sends each delivery to one of two Recorders at random: each one's
	// predictions (predict.go) keep missing what the other wrote, under concurrency.
	for _, name := range []string{"group commit true", "group commit false", "two replicas"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, endpointSpec(v1alpha1.UnmatchedCreate, nil))
			recs := []*Recorder{f.rec}
			var missed atomic.Int64
			switch name {
			case "group commit false":
				recs[0] = NewRecorder(f.pool, f.ep, WithGroupCommit(GroupCommit{MaxEvents: 1}))
			case "two replicas":
				g := DefaultGroupCommit
				g.ObservePrediction = func(r string) {
					if r == PredictionMissed {
						missed.Add(1)
					}
				}
				recs = []*Recorder{NewRecorder(f.pool, f.ep, WithGroupCommit(g)), NewRecorder(f.pool, f.ep, WithGroupCommit(g))}
			}
			const entities = 40
			var deliveries []Event
			for i := range entities {
				key := fmt.Sprintf("o-%d", i)
				history := []Event{
					ev("cap-"+key, "payment_intent.succeeded", key, 500, t0),
					ev("ref-"+key, "charge.refunded", key, 500, t0.Add(time.Second)),
					ev("dsp-"+key, "charge.dispute.created", key, 500, t0.Add(2*time.Second)),
				}
				for _, e := range history {
					for range 1 + i%3 {
						deliveries = append(deliveries, e)
					}
				}
			}
			rng := rand.New(rand.NewPCG(1, 2))
			rng.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
			for _, err := range fanOut(deliveries, 12, func(w int, e Event) error {
				if _, err := recs[w%len(recs)].Record(f.ctx, e); err != nil {
					return fmt.Errorf("%s: %w", e.ID, err)
				}
				return nil
			}) {
				t.Fatal(err)
			}
			// The dispute applies from paid or refunded: delivered before the refund it
			// may apply first (an ambiguous history), so only the final state is fixed.
			if got := f.rows.EntitiesInState(t, "disputed"); got != entities {
				t.Fatalf("%d of %d entities disputed", got, entities)
			}
			if got := f.rows.ReceiptsWithOutcome(t, OutcomeParked); got != 0 {
				t.Fatalf("%d events still parked", got)
			}
			if name == "two replicas" && missed.Load() == 0 {
				t.Errorf("no prediction missed: the test did not exercise the replicas' disagreement")
			}
			t.Logf("predictions missed: %d", missed.Load())
			if got := f.count(`SELECT count(*) FROM (SELECT entity_key FROM hk.outbox GROUP BY entity_key
				HAVING string_agg(event_type, ',' ORDER BY id) NOT IN ('order.paid,order.refunded,order.disputed', 'order.paid,order.disputed')) bad`); got != 0 {
				t.Fatalf("%d entities have effects out of provider order", got)
			}
		})
	}
}

// A parked event whose transition re-fetches is fetched when it can apply, once, however
// many release passes judge it: the fetch runs holding the entity's lock.
func TestReleasedEventReFetchesOnceWhenItFits(t *testing.T) {
	t.Parallel()
	we := endpointSpec(v1alpha1.UnmatchedRecord, nil)
	sm := &we.Spec.StateMachine
	sm.States = append(sm.States, "shipped")
	sm.Transitions = append(sm.Transitions, v1alpha1.Transition{Name: "ship", On: []string{"order.shipped"},
		From: []string{"paid"}, To: "shipped", Emit: "order.shipped"})
	for i := range sm.Transitions {
		if sm.Transitions[i].Name == "refund" {
			sm.Transitions[i].From = []string{"shipped"}
			sm.Transitions[i].Guard = `live != null && live.status == "refunded"`
		}
	}
	we.Spec.Provider.Refetch = &v1alpha1.RefetchSpec{APIKeySecretRef: secretRef("stripe", "key"), Transitions: []string{"refund"}}
	f := newFixture(t, we)
	f.managedEntity("o-1", "payment_pending", 500)
	calls := 0
	rec := NewRecorder(f.pool, f.ep, WithLive(func(context.Context, Event) (any, error) {
		calls++
		return map[string]any{"status": "refunded"}, nil
	}))
	record := func(e Event) Result {
		t.Helper()
		r, err := rec.Record(f.ctx, e)
		if err != nil {
			t.Fatalf("Record(%s): %v", e.ID, err)
		}
		return r
	}
	// Same instant, so arrival decides the order: the refund is judged first in every
	// pass, and fits only after the shipment applied.
	if r := record(ev("evt_ref", "charge.refunded", "o-1", 500, t0)); r.Outcome != OutcomeParked {
		t.Fatalf("refund: %+v", r)
	}
	if r := record(ev("evt_ship", "order.shipped", "o-1", 500, t0)); r.Outcome != OutcomeParked {
		t.Fatalf("shipment: %+v", r)
	}
	calls = 0
	r := record(ev("evt_cap", "payment_intent.succeeded", "o-1", 500, t0))
	if len(r.Released) != 2 || r.Released[0].EventID != "evt_ship" || r.Released[1].EventID != "evt_ref" ||
		r.Released[1].Outcome != OutcomeApplied {
		t.Fatalf("capture released %+v", r.Released)
	}
	if calls != 1 {
		t.Fatalf("the refund's object was fetched %d times in one transaction, want once", calls)
	}
	if got := f.effects(); got != "order.paid,order.shipped,order.refunded" {
		t.Fatalf("effects = %s", got)
	}
}

// Parking's deadline racing the release, on two replicas: the sweep of one replica
// expires an old parked refund while the other replica's capture releases it. Whichever
// wins, the receipt, the entity and the outbox must agree: refund applied, order
// refunded, both effects; or refund expired, order paid, one effect.
func TestExpiryRacesTheRelease(t *testing.T) {
	t.Parallel()
	for _, table := range []*v1alpha1.EntityTableSpec{nil, ordersBinding()} {
		t.Run(fmt.Sprintf("app table %v", table != nil), func(t *testing.T) {
			t.Parallel()
			var setup []string
			if table != nil {
				setup = []string{ordersTable}
			}
			f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, table), setup...)
			sweeper := NewRecorder(f.pool, f.ep)
			const n = 40
			for i := range n {
				f.managedOrApp(t, fmt.Sprintf("x-%d", i))
				f.record(ev(fmt.Sprintf("ref-%d", i), "charge.refunded", fmt.Sprintf("x-%d", i), 500, t0.Add(time.Second)))
			}
			f.exec(`UPDATE hk.webhook_events SET received_at = now() - interval '73 hours', processed_at = now() - interval '73 hours'`)
			var wg sync.WaitGroup
			wg.Go(func() {
				for range 20 {
					if _, err := sweeper.ExpireParked(f.ctx); err != nil {
						t.Error(err)
					}
				}
			})
			for i := range n {
				wg.Go(func() {
					if _, err := f.rec.Record(f.ctx, ev(fmt.Sprintf("cap-%d", i), "payment_intent.succeeded", fmt.Sprintf("x-%d", i), 500, t0)); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			for i := range n {
				key := fmt.Sprintf("x-%d", i)
				outcome := f.str(`SELECT outcome FROM hk.webhook_events WHERE event_id = $1`, fmt.Sprintf("ref-%d", i))
				got := f.stateAndEffects(key, stateQuery(f))
				want := map[string]string{"applied": "refunded | order.paid,order.refunded", "expired": "paid | order.paid"}[outcome]
				if got != want {
					t.Errorf("%s: refund %s, entity and effects %q, want %q", key, outcome, got, want)
				}
			}
		})
	}
}

func stateQuery(f *fixture) string {
	if f.ep.Spec.Entity.Table != nil {
		return `SELECT status FROM public.orders WHERE client_txn_id = $1`
	}
	return managedStateSQL
}

// The events that expire are the ones that arrived before their predecessor. A capture
// and a partial refund both arrive before the authorization (both park), both expire,
// then the authorization arrives. `hookkeeper replay --receipts --outcome expired`
// (outbox.ReplayReceipts with Recorder.Reprocess) re-drives them in arrival (id) order.
// When the partial refund comes first it still cannot apply: it is parked again (left
// expired, the capture would not release it), and the capture applies and releases it.
// One replay run ends the payment the same way whichever arrived first.
func TestReplayOfExpiredEventsDoesNotDependOnArrivalOrder(t *testing.T) {
	t.Parallel()
	f := newFixture(t, paymentEndpoint(v1alpha1.UnmatchedRecord, nil))
	run := func(key string, arrival []Event) string {
		f.managedEntity(key, "pending", 500)
		for _, e := range arrival {
			if r := f.record(e); r.Outcome != OutcomeParked {
				t.Fatalf("%s: %+v, want parked", e.ID, r)
			}
		}
		f.exec(`UPDATE hk.webhook_events SET received_at = now() - interval '73 hours', processed_at = now() - interval '73 hours' WHERE entity_key = $1`, key)
		if n, err := f.rec.ExpireParked(f.ctx); err != nil || n != 2 {
			t.Fatalf("ExpireParked = %d, %v", n, err)
		}
		f.record(ev("auth-"+key, "payment.authorized", key, 500, t0))
		sel := outbox.Selection{Endpoint: f.ep.Key(), Outcomes: []string{string(OutcomeExpired)}}
		reprocess := func(ctx context.Context, id int64) error { _, err := f.rec.Reprocess(ctx, id); return err }
		if _, err := outbox.ReplayReceipts(f.ctx, f.pool, store.TablesIn(schema), sel, reprocess, outbox.ReplayOptions{}); err != nil {
			t.Fatal(err)
		}
		return f.stateAndEffects(key, managedStateSQL)
	}
	cap := func(key string) Event { return ev("cap-"+key, "payment.captured", key, 500, t0.Add(time.Second)) }
	pref := func(key string) Event {
		return ev("pref-"+key, "charge.partially_refunded", key, 200, t0.Add(2*time.Second))
	}
	captureFirst := run("p-1", []Event{cap("p-1"), pref("p-1")})
	refundFirst := run("p-2", []Event{pref("p-2"), cap("p-2")})
	if captureFirst != refundFirst {
		t.Fatalf("one replay of the same expired events: capture arrived first -> %q; refund arrived first -> %q (left: %s)",
			captureFirst, refundFirst, f.outcomes())
	}
}

// A replay of a parked receipt racing the live delivery that releases it, many times:
// the event applies once, with one outbox row, whichever wins.
func TestReplayRacesTheReleasingDelivery(t *testing.T) {
	t.Parallel()
	f := newFixture(t, paymentEndpoint(v1alpha1.UnmatchedRecord, nil))
	other := NewRecorder(f.pool, f.ep) // a second replica
	for i := range 40 {
		key := "race-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		f.managedEntity(key, "pending", 500)
		f.record(ev("auth-"+key, "payment.authorized", key, 500, t0))
		parked := f.record(ev("pref-"+key, "charge.partially_refunded", key, 200, t0.Add(2*time.Second)))
		if parked.Outcome != OutcomeParked {
			t.Fatalf("%+v", parked)
		}
		var wg sync.WaitGroup
		var replayErr, liveErr error
		wg.Go(func() { _, replayErr = other.Reprocess(f.ctx, parked.ReceiptID) })
		wg.Go(func() {
			_, liveErr = f.rec.Record(f.ctx, ev("cap-"+key, "payment.captured", key, 500, t0.Add(time.Second)))
		})
		wg.Wait()
		if replayErr != nil || liveErr != nil {
			t.Fatalf("replay: %v; live: %v", replayErr, liveErr)
		}
		if got := f.stateAndEffects(key, managedStateSQL); got != "partially_refunded | payment.authorized,payment.captured,payment.partially_refunded" {
			t.Fatalf("%s: %s", key, got)
		}
	}
}

// An old unmatched event that a replay parks gets its whole parkFor, counted from when it
// was parked: were it counted from received_at, the next parking sweep (every 30 s in a
// receiver) would expire it before the replay reaches the event that releases it. The
// order's events arrived before the order existed (refund first, then capture); the app
// created the order four days later and an operator replays the unmatched receipts.
func TestReplayParkedOldEventsGetTheirWholeParkFor(t *testing.T) {
	t.Parallel()
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, nil))
	refund := f.record(ev("evt_ref", "charge.refunded", "o-9", 500, t0.Add(time.Second)))
	capture := f.record(ev("evt_cap", "payment_intent.succeeded", "o-9", 500, t0))
	if refund.Outcome != OutcomeUnmatched || capture.Outcome != OutcomeUnmatched {
		t.Fatalf("before the order exists: %+v %+v", refund, capture)
	}
	f.exec(`UPDATE hk.webhook_events SET received_at = now() - interval '96 hours'`)
	f.managedEntity("o-9", "payment_pending", 500)

	// The replay, in id order, with a parking sweep between two receipts.
	if r, err := f.rec.Reprocess(f.ctx, refund.ReceiptID); err != nil || r.Outcome != OutcomeParked {
		t.Fatalf("replay refund: %+v %v", r, err)
	}
	if n, err := f.rec.ExpireParked(f.ctx); err != nil {
		t.Fatal(err)
	} else if n != 0 {
		t.Errorf("the sweep expired %d event(s) a replay parked a moment ago (parkFor counts from received_at)", n)
	}
	if _, err := f.rec.Reprocess(f.ctx, capture.ReceiptID); err != nil {
		t.Fatal(err)
	}
	if got := f.stateAndEffects("o-9", managedStateSQL); got != "refunded | order.paid,order.refunded" {
		t.Fatalf("after the replay: %s, want refunded with both effects (%s)", got, f.outcomes())
	}
}
