package receipt

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/outbox"
	"github.com/hookkeeper/hookkeeper/internal/store"
)

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
