package receipt

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
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

// onUnmatched Retry while the entities do not exist yet and the receipt sessions keep
// being terminated: two replicas (group commit on, so deliveries for entities that exist
// and for ones that do not share transactions) record every event of 24 payments out of
// order with copies, each sender retrying whatever was not acknowledged, while the
// payments appear one by one, each only after deliveries for it were turned away.
// Besides them, each payment has an early event sent once before it exists and never
// again (a provider that gave up), and a cancellation sent in one batch with an event of
// a payment that never appears (refused whole, given up after two refusals sent once its
// own payment existed); six payments never appear (their events are given up after three
// refusals). A nil error must name an event committed when read back at once; when a
// payment appears, nothing may have been written for it by the refusals and crashes
// before; in the end every payment is where provider order puts it, each event stored
// once and applied with each effect once, in order, and the early events, the refused
// batches and the payments that never appeared left no receipt, entity or outbox row. In
// app-table mode another tenant's row with the same key exists from the start: it is not
// the entity, and must not move.
func TestRetryLaterUnderSessionKillsAppliesOnceEntitiesAppear(t *testing.T) {
	t.Parallel()
	inPaymentModes(t, v1alpha1.UnmatchedRetry, retryLaterUnderKills)
}

func retryLaterUnderKills(t *testing.T, f *fixture, mode paymentMode) {
	const (
		payments = 24
		ghosts   = 6
		victim   = "retry-kill-victim"
	)
	appTable := mode.table != nil
	entitySQL := `SELECT count(*) FROM hk.entities WHERE entity_key = $1`
	if appTable {
		entitySQL = `SELECT count(*) FROM public.payments WHERE ref = $1 AND tenant_id = 'acme'`
	}
	appear := func(key string) {
		if appTable {
			f.exec(`INSERT INTO public.payments (tenant_id, ref, status, amount) VALUES ('acme', $1, 'pending', 500)`, key)
		} else {
			f.managedEntity(key, "pending", 500)
		}
	}
	victims := f.openPool(6, victim)
	var grouped atomic.Int64
	group := DefaultGroupCommit
	group.Observe = func(n int) {
		if n > 1 {
			grouped.Add(1)
		}
	}
	replicas := []*Recorder{NewRecorder(victims, f.ep, WithGroupCommit(group)), NewRecorder(victims, f.ep, WithGroupCommit(group))}

	type delivery struct {
		ev Event
		// early: sent until the first ErrRetryLater, then given up; ghost: given up
		// after three; neither may ever be acknowledged.
		early, ghost bool
		// doomed: ev goes in one batch with an event of a payment that never appears,
		// so the batch is refused whole, and given up after two refusals sent once ev's
		// payment existed: ev (a cancellation that would move or park the payment) must
		// never be stored.
		doomed *Event
	}
	rng := rand.New(rand.NewPCG(31, 37))
	var early, rest []delivery
	for i := range payments {
		key := fmt.Sprintf("r-%d", i)
		if appTable {
			// Another tenant's payment with the same key: never the entity.
			f.exec(`INSERT INTO public.payments (tenant_id, ref, status, amount) VALUES ('globex', $1, 'pending', 500)`, key)
		}
		early = append(early, delivery{ev: ev("early-"+key, "payment.authorized", key, 500, t0), early: true})
		for _, e := range paymentHistory(key) {
			for range 1 + rng.IntN(2) {
				rest = append(rest, delivery{ev: e})
			}
		}
		ghostly := ev("ghostly-"+key, "payment.authorized", fmt.Sprintf("ghost-%d", i%ghosts), 500, t0)
		rest = append(rest, delivery{ev: ev("doomed-"+key, "payment.cancelled", key, 0, t0.Add(time.Minute)), doomed: &ghostly})
	}
	for i := range ghosts {
		key := fmt.Sprintf("ghost-%d", i)
		for _, e := range paymentHistory(key)[:2] {
			rest = append(rest, delivery{ev: e, ghost: true})
		}
	}
	rng.Shuffle(len(rest), func(a, b int) { rest[a], rest[b] = rest[b], rest[a] })
	// The early events go first, so every payment's is refused before it appears.
	deliveries := append(early, rest...)

	// What the creator waits for: a payment appears once its early event was refused
	// and a delivery of its history was turned away too.
	var mu sync.Mutex
	earlyRefused := map[string]bool{}
	turnedAway := map[string]int{}
	created := map[string]bool{} // payments that appeared
	var retryLaters, failures atomic.Int64

	killer := testsupport.KillSessions(f.ctx, f.pool, victim)
	var creator sync.WaitGroup
	creatorErrs := make(chan error, payments)
	creator.Go(func() {
		for appeared := 0; appeared < payments; appeared++ {
			var key string
			err := testsupport.Poll(f.ctx, 40*time.Second, time.Millisecond, func() error {
				mu.Lock()
				defer mu.Unlock()
				for i := range payments {
					k := fmt.Sprintf("r-%d", i)
					if !created[k] && earlyRefused[k] && turnedAway[k] > 0 {
						key = k
						return nil
					}
				}
				return fmt.Errorf("%d of %d payments appeared; none more was turned away yet", appeared, payments)
			})
			if err != nil {
				creatorErrs <- err
				return
			}
			// The refusals and the crashes so far wrote nothing for it.
			var receipts, effects, entities int
			if err := f.pool.QueryRow(f.ctx, `SELECT (SELECT count(*) FROM hk.webhook_events WHERE entity_key = $1),
				(SELECT count(*) FROM hk.outbox WHERE entity_key = $1)`, key).Scan(&receipts, &effects); err != nil {
				creatorErrs <- err
				return
			}
			if err := f.pool.QueryRow(f.ctx, entitySQL, key).Scan(&entities); err != nil {
				creatorErrs <- err
				return
			}
			if receipts+effects+entities != 0 {
				creatorErrs <- fmt.Errorf("before %s appeared: %d receipts, %d outbox rows, %d entities; its refused deliveries must leave nothing", key, receipts, effects, entities)
			}
			appear(key)
			mu.Lock()
			created[key] = true
			mu.Unlock()
		}
	})

	for _, err := range fanOut(deliveries, 10, func(w int, d delivery) error {
		e, key := d.ev, d.ev.EntityKey
		deadline := time.Now().Add(40 * time.Second)
		refusals := 0
		for attempt := 0; ; attempt++ {
			var err error
			rec := replicas[(w+attempt)%2]
			mu.Lock()
			existed := created[key]
			mu.Unlock()
			if d.doomed != nil {
				_, err = rec.RecordBatch(f.ctx, []Event{e, *d.doomed})
			} else {
				_, err = rec.Record(f.ctx, e)
			}
			if err == nil {
				killer.Progress()
				if d.early || d.ghost || d.doomed != nil {
					return fmt.Errorf("%s acknowledged though an entity of its delivery did not exist", e.ID)
				}
				// Acknowledged: committed, so it reads back at once.
				var n int
				if err := f.pool.QueryRow(f.ctx, `SELECT count(*) FROM hk.webhook_events WHERE event_id = $1`, e.ID).Scan(&n); err != nil {
					return err
				}
				if n != 1 {
					return fmt.Errorf("%s acknowledged but %d receipts read back", e.ID, n)
				}
				return nil
			}
			if errors.Is(err, ErrRetryLater) {
				killer.Progress()
				retryLaters.Add(1)
				if d.doomed == nil || existed {
					refusals++
				}
				mu.Lock()
				turnedAway[key]++
				if d.early {
					earlyRefused[key] = true
				}
				mu.Unlock()
				if d.early || (d.ghost && refusals == 3) || (d.doomed != nil && refusals == 2) {
					return nil // the provider gives up
				}
			} else {
				failures.Add(1)
			}
			if err := f.pauseBeforeResend(deadline, e.ID, err); err != nil {
				return err
			}
		}
	}) {
		t.Error(err)
	}
	creator.Wait()
	killed := killer.Stop()
	close(creatorErrs)
	for err := range creatorErrs {
		t.Error(err)
	}
	t.Logf("%d deliveries; %d answered retry-later, %d other failures retried, %d sessions terminated, %d shared transactions",
		len(deliveries), retryLaters.Load(), failures.Load(), killed, grouped.Load())
	if killed == 0 {
		t.Error("no session was terminated: the run crashed nothing")
	}
	if grouped.Load() == 0 {
		t.Error("no receipt transaction was shared: the run formed no group")
	}

	for i := range payments {
		key := fmt.Sprintf("r-%d", i)
		if got := f.stateAndEffects(key, mode.stateSQL()); got != paymentInOrder {
			t.Errorf("%s: %s, want %s", key, got, paymentInOrder)
		}
	}
	if got, applied := f.rows.Receipts(t), f.rows.ReceiptsWithOutcome(t, OutcomeApplied); got != payments*6 || applied != payments*6 {
		t.Errorf("%d receipts, %d applied; want %d of each (one per event, none of the refused ones)", got, applied, payments*6)
	}
	if got := f.rows.Outbox(t); got != payments*6 {
		t.Errorf("%d outbox rows, want %d", got, payments*6)
	}
	if got := f.count(`SELECT count(*) FROM hk.webhook_events WHERE event_id LIKE 'early-%' OR event_id LIKE 'doomed-%' OR entity_key LIKE 'ghost-%'`); got != 0 {
		t.Errorf("%d receipts of early events, refused batches or payments that never appeared", got)
	}
	if got := f.count(`SELECT count(*) FROM hk.outbox WHERE entity_key LIKE 'ghost-%'`); got != 0 {
		t.Errorf("%d outbox rows of payments that never appeared", got)
	}
	if appTable {
		if got := f.count(`SELECT count(*) FROM public.payments WHERE tenant_id <> 'acme' AND status <> 'pending' OR ref LIKE 'ghost-%'`); got != 0 {
			t.Errorf("%d rows of another tenant moved, or payments that never appeared exist", got)
		}
	} else if got := f.count(`SELECT count(*) FROM hk.entities WHERE entity_key LIKE 'ghost-%'`); got != 0 {
		t.Errorf("%d entities of payments that never appeared", got)
	}
}
