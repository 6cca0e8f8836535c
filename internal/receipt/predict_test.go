package receipt

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// Predicted groups (predict.go) decide before the database has answered. These tests
// make the prediction wrong in every way the database can disagree with it (another
// replica moved the entity, parked an event on it, recorded the event, deleted or
// created the entity) and expect what the two-round-trip path decides: the prediction
// may cost a round trip, never a decision.

// replicas is a fixture with a second Recorder on the same endpoint and database (B);
// f.rec is A.
func replicas(t *testing.T, onUnmatched v1alpha1.OnUnmatched) (*fixture, *Recorder) {
	t.Helper()
	f := newFixture(t, endpointSpec(onUnmatched, nil))
	return f, NewRecorder(f.pool, f.ep)
}

func recordOn(f *fixture, rec *Recorder, e Event) Result {
	f.t.Helper()
	res, err := rec.Record(f.ctx, e)
	if err != nil {
		f.t.Fatalf("Record(%s): %v", e.ID, err)
	}
	return res
}

func stateOf(f *fixture, key string) string {
	f.t.Helper()
	return f.str(`SELECT state FROM hk.entities WHERE entity_key = $1`, key)
}

func TestPredictionOfAnEntityAnotherReplicaMovedIsNotBelieved(t *testing.T) {
	t.Parallel()
	f, b := replicas(t, v1alpha1.UnmatchedCreate)

	// A captured o-1 and remembers it paid; B then disputes it. A's refund, which
	// applies to a paid order, must see the dispute: refund does not start from disputed.
	if r := f.record(ev("cap-1", "payment_intent.succeeded", "o-1", 100, t0)); r.Outcome != OutcomeApplied {
		t.Fatalf("capture: %+v", r)
	}
	if r := recordOn(f, b, ev("dis-1", "charge.dispute.created", "o-1", 100, t0.Add(time.Second))); r.Outcome != OutcomeApplied {
		t.Fatalf("dispute on B: %+v", r)
	}
	r := f.record(ev("ref-1", "charge.refunded", "o-1", 100, t0.Add(2*time.Second)))
	if r.Outcome == OutcomeApplied {
		t.Fatalf("refund applied to a disputed order on A's stale prediction: %+v", r)
	}
	if got := stateOf(f, "o-1"); got != "disputed" {
		t.Errorf("o-1 is %s, want disputed", got)
	}
	if n := f.rows.OutboxFor(t, "o-1"); n != 2 {
		t.Errorf("o-1 has %d outbox rows, want 2 (paid, disputed)", n)
	}

	// And where the moved entity still fits, the event applies from where it really is.
	if r := f.record(ev("cap-2", "payment_intent.succeeded", "o-2", 100, t0)); r.Outcome != OutcomeApplied {
		t.Fatalf("capture o-2: %+v", r)
	}
	if r := recordOn(f, b, ev("ref-2", "charge.refunded", "o-2", 100, t0.Add(time.Second))); r.Outcome != OutcomeApplied {
		t.Fatalf("refund o-2 on B: %+v", r)
	}
	r = f.record(ev("dis-2", "charge.dispute.created", "o-2", 100, t0.Add(2*time.Second)))
	if r.Outcome != OutcomeApplied || r.FromState != "refunded" {
		t.Fatalf("dispute o-2 on A: %+v, want applied from refunded", r)
	}
}

func TestPredictionNeverSkipsAnEventParkedByAnotherReplica(t *testing.T) {
	t.Parallel()
	f, b := replicas(t, v1alpha1.UnmatchedRecord)
	f.managedEntity("o-3", "payment_pending", 100)

	// A's capture with the wrong amount leaves o-3 pending: A predicts it pending next.
	if r := f.record(ev("cap-bad", "payment_intent.succeeded", "o-3", 1, t0)); r.Outcome != OutcomeGuardFailed {
		t.Fatalf("capture with the wrong amount: %+v", r)
	}
	// B parks a refund that arrived before the capture.
	if r := recordOn(f, b, ev("ref-3", "charge.refunded", "o-3", 100, t0.Add(2*time.Second))); r.Outcome != OutcomeParked {
		t.Fatalf("early refund on B: %+v", r)
	}
	// A's capture applies and releases it: the order converges to refunded.
	r := f.record(ev("cap-3", "payment_intent.succeeded", "o-3", 100, t0.Add(time.Second)))
	if r.Outcome != OutcomeApplied || len(r.Released) != 1 || r.Released[0].Outcome != OutcomeApplied {
		t.Fatalf("capture on A: %+v, want applied, releasing the parked refund", r)
	}
	if got := stateOf(f, "o-3"); got != "refunded" {
		t.Errorf("o-3 is %s, want refunded", got)
	}
	if n := f.rows.OutboxFor(t, "o-3"); n != 2 {
		t.Errorf("o-3 has %d outbox rows, want 2 (paid, refunded)", n)
	}
}

func TestPredictedCopiesAcrossReplicas(t *testing.T) {
	t.Parallel()
	f, b := replicas(t, v1alpha1.UnmatchedCreate)

	// B created and captured o-4; A, which has not seen it, predicts it new. The copy is
	// a duplicate and leaves the order as it is.
	if r := recordOn(f, b, ev("cap-4", "payment_intent.succeeded", "o-4", 100, t0)); r.Outcome != OutcomeApplied {
		t.Fatalf("capture on B: %+v", r)
	}
	if r := f.record(ev("cap-4", "payment_intent.succeeded", "o-4", 100, t0)); !r.Duplicate {
		t.Fatalf("copy on A: %+v, want a duplicate", r)
	}
	if got := stateOf(f, "o-4"); got != "paid" {
		t.Errorf("o-4 is %s, want paid", got)
	}

	// The app deleted o-5 after B recorded its capture: A's lock creates it, as
	// predicted, and the copy deletes it again, as the unpredicted path does.
	if r := recordOn(f, b, ev("cap-5", "payment_intent.succeeded", "o-5", 100, t0)); r.Outcome != OutcomeApplied {
		t.Fatalf("capture o-5 on B: %+v", r)
	}
	f.exec(`DELETE FROM hk.entities WHERE entity_key = 'o-5'`)
	if r := f.record(ev("cap-5", "payment_intent.succeeded", "o-5", 100, t0)); !r.Duplicate {
		t.Fatalf("copy of cap-5 on A: %+v, want a duplicate", r)
	}
	if n := f.count(`SELECT count(*) FROM hk.entities WHERE entity_key = 'o-5'`); n != 0 {
		t.Errorf("the copy left the entity its lock created (%d rows)", n)
	}
	if n := f.rows.Receipts(t); n != 2 {
		t.Errorf("%d receipts, want 2", n)
	}
}

func TestPredictionOfADeletedEntityCreatesItAgain(t *testing.T) {
	t.Parallel()
	f, _ := replicas(t, v1alpha1.UnmatchedCreate)

	// A remembers o-6 paid; the app deletes it. A's refund then finds no entity: its
	// lock creates one in the initial state (a miss, undone), and the refund, decided
	// again, parks on the entity it creates, as it would have without a prediction.
	if r := f.record(ev("cap-6", "payment_intent.succeeded", "o-6", 100, t0)); r.Outcome != OutcomeApplied {
		t.Fatalf("capture: %+v", r)
	}
	f.exec(`DELETE FROM hk.entities WHERE entity_key = 'o-6'`)
	r := f.record(ev("ref-6", "charge.refunded", "o-6", 100, t0.Add(time.Second)))
	if r.Outcome != OutcomeParked || !strings.Contains(r.Detail, DetailCreated) {
		t.Fatalf("refund: %+v, want parked on an entity it created", r)
	}
	if got := stateOf(f, "o-6"); got != "payment_pending" {
		t.Errorf("o-6 is %s, want payment_pending", got)
	}
}

// TestPredictionsStopWhileTheyMiss: a recorder whose predictions keep missing stops
// predicting (a miss costs a second transaction), and starts again once a probe holds.
func TestPredictionsStopWhileTheyMiss(t *testing.T) {
	t.Parallel()
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, nil))
	f.pendingOrders(64, 100)
	results := map[string]int{}
	g := DefaultGroupCommit
	g.ObservePrediction = func(r string) { results[r]++ } // one delivery at a time: no race
	f.rec = NewRecorder(f.pool, f.ep, WithGroupCommit(g))
	// Every capture carries the wrong amount: predicted new, every one misses.
	for i := range 8 {
		if r := f.record(ev(bad(i), "payment_intent.succeeded", order(i), 1, t0)); r.Outcome != OutcomeGuardFailed {
			t.Fatalf("capture %d: %+v, want guard_failed", i, r)
		}
	}
	if got := f.rec.predictions.credit; got != 0 {
		t.Fatalf("credit %d after 8 misses, want 0", got)
	}
	if results[PredictionMissed] < 4 || results[PredictionHeld] != 0 {
		t.Errorf("observed %v, want only misses (at least 4: credit 8, 2 a miss)", results)
	}
	before := f.writes.Load()
	f.record(ev(bad(8), "payment_intent.succeeded", order(8), 1, t0))
	if got := f.writes.Load() - before; got != 2 {
		t.Errorf("%d round trips with no credit, want 2 (not predicted)", got)
	}
	// Right amounts again: the probes hold, predictions resume.
	for i := 9; i < 9+2*probeEvery; i++ {
		f.record(ev(bad(i), "payment_intent.succeeded", order(i), 100, t0))
	}
	if got := f.rec.predictions.credit; got == 0 || results[PredictionHeld] == 0 {
		t.Errorf("credit %d, %v after %d events that predictions would have got right: predictions never resumed",
			got, results, 2*probeEvery)
	}
}

func bad(i int) string   { return fmt.Sprintf("cap-%d", i) }
func order(i int) string { return fmt.Sprintf("order-%d", i) }

// TestPredictedEntitiesAreBounded: the memory of entities never passes
// WithPredictedEntities; entities it forgot are predicted new again.
func TestPredictedEntitiesAreBounded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedCreate, nil))
	f.rec = NewRecorder(f.pool, f.ep, WithPredictedEntities(3))
	for i := range 10 {
		if r := f.record(ev(bad(i), "payment_intent.succeeded", order(i), 100, t0)); r.Outcome != OutcomeApplied {
			t.Fatalf("capture %d: %+v", i, r)
		}
		if n := len(f.rec.predictions.settled); n > 3 {
			t.Fatalf("%d entities remembered after %d captures, want at most 3", n, i+1)
		}
	}
}
