package receipt

import (
	"fmt"
	"math/rand/v2"
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
