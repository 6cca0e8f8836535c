package receipt

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// Batch providers: one request carries several events of one entity, out of order
// within the batch, with copies inside the batch and across batches, and the batches
// arrive in random order from concurrent senders on two replicas. Every entity must end
// as in provider order, with its effects in provider order, and no event may stay
// parked. Managed entities and an app table with a tenant column (a second tenant's
// row with the same key must not move).
func TestBatchesOutOfOrderConverge(t *testing.T) {
	t.Parallel()
	inPaymentModes(t, v1alpha1.UnmatchedRecord, func(t *testing.T, f *fixture, mode paymentMode) {
		replicas := []*Recorder{NewRecorder(f.pool, f.ep), NewRecorder(f.pool, f.ep)}
		rng := rand.New(rand.NewPCG(3, 5))
		const entities = 30
		var batches [][]Event
		for i := range entities {
			key := fmt.Sprintf("b-%d", i)
			if mode.table == nil {
				f.managedEntity(key, "pending", 500)
			} else {
				f.exec(`INSERT INTO public.payments (tenant_id, ref, status, amount) VALUES ('acme', $1, 'pending', 500), ('globex', $1, 'pending', 500)`, key)
			}
			h := paymentHistory(key)
			var copies []Event
			for _, e := range h {
				for range 1 + rng.IntN(2) {
					copies = append(copies, e)
				}
			}
			rng.Shuffle(len(copies), func(a, b int) { copies[a], copies[b] = copies[b], copies[a] })
			for len(copies) > 0 {
				n := min(len(copies), 1+rng.IntN(4))
				batches = append(batches, copies[:n])
				copies = copies[n:]
			}
		}
		rng.Shuffle(len(batches), func(a, b int) { batches[a], batches[b] = batches[b], batches[a] })
		for _, err := range fanOut(batches, 8, func(w int, b []Event) error {
			if _, err := replicas[w%2].RecordBatch(f.ctx, b); err != nil {
				return fmt.Errorf("batch %s..: %w", b[0].ID, err)
			}
			return nil
		}) {
			t.Error(err)
		}
		for i := range entities {
			key := fmt.Sprintf("b-%d", i)
			if got := f.stateAndEffects(key, mode.stateSQL()); got != paymentInOrder {
				t.Errorf("%s: %s, want %s", key, got, paymentInOrder)
			}
		}
		if got := f.rows.ReceiptsWithOutcome(t, OutcomeParked); got != 0 {
			t.Errorf("%d events still parked", got)
		}
		if mode.table != nil {
			if got := f.count(`SELECT count(*) FROM public.payments WHERE tenant_id = 'globex' AND status <> 'pending'`); got != 0 {
				t.Errorf("%d rows of another tenant moved", got)
			}
		}
	})
}

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
