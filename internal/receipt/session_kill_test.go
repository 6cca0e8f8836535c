package receipt

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// Crashes in the middle: while two replicas (group commit on) record every event of 40
// payments out of order with copies, another session keeps terminating their database
// sessions (a transaction dies at any of its round trips, commits included). A sender
// retries anything that was not acknowledged, as a provider does. In the end every
// payment is where provider order puts it, with each effect once and in order, and
// nothing is left parked.
func TestSessionKillsDuringOutOfOrderDeliveriesConverge(t *testing.T) {
	t.Parallel()
	f := newFixture(t, paymentEndpoint(v1alpha1.UnmatchedRecord, nil))
	victims := f.openPool(6, "receipt-crash-victim")
	replicas := []*Recorder{NewRecorder(victims, f.ep), NewRecorder(victims, f.ep)}

	const entities = 40
	var deliveries []Event
	rng := rand.New(rand.NewPCG(21, 22))
	for i := range entities {
		key := fmt.Sprintf("k-%d", i)
		f.managedEntity(key, "pending", 500)
		for _, e := range paymentHistory(key) {
			for range 1 + rng.IntN(2) {
				deliveries = append(deliveries, e)
			}
		}
	}
	rng.Shuffle(len(deliveries), func(a, b int) { deliveries[a], deliveries[b] = deliveries[b], deliveries[a] })

	killer := testsupport.KillSessions(f.ctx, f.pool, "receipt-crash-victim")
	var failures atomic.Int64
	for _, err := range fanOut(deliveries, 10, func(w int, e Event) error {
		// A provider retries until it gets an answer, pausing a little between attempts.
		deadline := time.Now().Add(40 * time.Second)
		for {
			_, err := replicas[w%2].Record(f.ctx, e)
			if err == nil {
				killer.Progress()
				return nil
			}
			failures.Add(1)
			if err := f.pauseBeforeResend(deadline, e.ID, err); err != nil {
				return err
			}
		}
	}) {
		t.Error(err)
	}
	killed := killer.Stop()
	t.Logf("%d deliveries, %d sessions terminated, %d failed attempts retried", len(deliveries), killed, failures.Load())
	if killed == 0 {
		t.Error("no session was terminated: the run crashed nothing")
	}

	for i := range entities {
		key := fmt.Sprintf("k-%d", i)
		if got := f.stateAndEffects(key, managedStateSQL); got != paymentInOrder {
			t.Errorf("%s: %s", key, got)
		}
	}
	if got := f.rows.ReceiptsWithOutcome(t, OutcomeParked); got != 0 {
		t.Errorf("%d events still parked", got)
	}
	if got := f.count(`SELECT count(*) FROM hk.webhook_events`); got != entities*6 {
		t.Errorf("%d receipts, want %d", got, entities*6)
	}
}
