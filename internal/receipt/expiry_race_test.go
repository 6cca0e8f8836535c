package receipt

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

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
