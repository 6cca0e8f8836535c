package receipt

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// Two batches that name the same two entities in opposite orders, sent at the same
// moment, must not deadlock: each locks (or, with onUnmatched Create, creates) its
// entities in key order before deciding its items. The Recorders retry no deadlock, so
// one would fail the test instead of costing the provider deadlock_timeout. With Create,
// the first item of each new entity is the one that created it, and the entity takes
// the amount of the event that starts its history.
func TestBatchesLockTheirEntitiesInKeyOrder(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name        string
		onUnmatched v1alpha1.OnUnmatched
		existing    bool
	}{{"existing entities", v1alpha1.UnmatchedRecord, true}, {"created by the batches", v1alpha1.UnmatchedCreate, false}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, endpointSpec(mode.onUnmatched, nil))
			replicas := []*Recorder{NewRecorder(f.pool, f.ep, WithDeadlockRetries(0)), NewRecorder(f.pool, f.ep, WithDeadlockRetries(0))}
			const rounds = 25
			for i := range rounds {
				x, y := fmt.Sprintf("x-%d", i), fmt.Sprintf("y-%d", i)
				if mode.existing {
					f.managedEntity(x, "payment_pending", 700)
					f.managedEntity(y, "payment_pending", 700)
				}
				batches := [][]Event{
					{ev(fmt.Sprintf("a-%d-x", i), "payment_intent.succeeded", x, 700, t0), ev(fmt.Sprintf("a-%d-y", i), "payment_intent.succeeded", y, 700, t0)},
					{ev(fmt.Sprintf("b-%d-y", i), "payment_intent.succeeded", y, 700, t0), ev(fmt.Sprintf("b-%d-x", i), "payment_intent.succeeded", x, 700, t0)},
				}
				results := make([][]Result, 2)
				errs := make([]error, 2)
				atOnce(len(batches), func(j int) { results[j], errs[j] = replicas[j].RecordBatch(f.ctx, batches[j]) })
				for j, err := range errs {
					if err != nil {
						t.Fatalf("round %d, batch %d: %v", i, j, err)
					}
				}
				for _, key := range []string{x, y} {
					applied, created := 0, 0
					for j, b := range batches {
						for k, e := range b {
							if e.EntityKey != key {
								continue
							}
							r := results[j][k]
							if r.Outcome == OutcomeApplied {
								applied++
							}
							if strings.Contains(r.Detail, DetailCreated) {
								created++
							}
						}
					}
					wantCreated := 1
					if mode.existing {
						wantCreated = 0
					}
					if applied != 1 || created != wantCreated {
						t.Fatalf("round %d, %s: %d applied and %d created, want 1 and %d", i, key, applied, created, wantCreated)
					}
					if got := f.str(`SELECT state || ':' || amount FROM hk.entities WHERE entity_key = $1`, key); got != "paid:700" {
						t.Fatalf("round %d, %s = %s, want paid:700", i, key, got)
					}
				}
			}
		})
	}
}
