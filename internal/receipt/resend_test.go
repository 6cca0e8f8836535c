package receipt

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// An event id re-sent with a different payload is deduplicated by its id and never
// re-applied, whatever changed: the amount (a guard_failed first copy stays
// guard_failed), the time, the type, or the entity key (with onUnmatched Create the
// entity the copy's lock created is removed again). Copies race on two replicas.
func TestResentIDWithAnotherPayloadIsADuplicate(t *testing.T) {
	t.Parallel()
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedCreate, nil))
	replicas := []*Recorder{NewRecorder(f.pool, f.ep, WithRecentEvents(0)), NewRecorder(f.pool, f.ep, WithRecentEvents(0))}
	for i := range 20 {
		key := fmt.Sprintf("o-%d", i)
		// The order fails; then the first version of evt- (a refund, ignored), then its
		// variants, concurrently.
		f.record(ev("first-"+key, "payment_intent.payment_failed", key, 500, t0))
		first := ev("evt-"+key, "charge.refunded", key, 500, t0.Add(time.Second))
		variants := []Event{
			ev("evt-"+key, "charge.refunded", key, 500, t0.Add(time.Hour)),
			ev("evt-"+key, "payment_intent.succeeded", key, 500, t0.Add(2*time.Second)),
			ev("evt-"+key, "payment_intent.succeeded", key+"-other", 500, t0.Add(2*time.Second)),
			ev("evt-"+key, "customer.updated", "", 0, time.Time{}),
		}
		f.record(first) // ignored: a failed order is never refunded
		var wg sync.WaitGroup
		for j, e := range variants {
			wg.Go(func() {
				if _, err := replicas[j%2].Record(f.ctx, e); err != nil {
					t.Errorf("%s: %v", e.ID, err)
				}
			})
		}
		wg.Wait()
	}
	if got := f.count(`SELECT count(*) FROM hk.webhook_events WHERE event_id LIKE 'evt-%'`); got != 20 {
		t.Errorf("%d receipts for 20 event ids", got)
	}
	if got := f.count(`SELECT count(*) FROM hk.entities WHERE entity_key LIKE '%-other'`); got != 0 {
		t.Errorf("%d entities created by copies with another entity key", got)
	}
	if got := f.count(`SELECT count(*) FROM hk.entities WHERE state <> 'failed'`); got != 0 {
		t.Errorf("%d entities moved by a copy (the first version could not apply: failed orders are never refunded or paid)", got)
	}
	if got := f.rows.Outbox(t); got != 0 {
		t.Errorf("%d outbox rows written by copies", got)
	}
}
