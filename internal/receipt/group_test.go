package receipt

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// member queues nothing: it is a group member for run, with its reply channel.
func member(ctx context.Context, e Event) *groupMember {
	return &groupMember{ctx: ctx, ev: e, reply: make(chan groupReply, 1)}
}

// awaitReply waits for m's answer with a deadline.
func awaitReply(t *testing.T, m *groupMember) groupReply {
	t.Helper()
	select {
	case rep := <-m.reply:
		return rep
	case <-time.After(30 * time.Second):
		t.Fatalf("no reply for %s", m.ev.ID)
		return groupReply{}
	}
}

// heldGroups observes a Recorder's group transactions: it records each group's size, and
// holds the first group's leader (in Observe) until release is closed, so that the
// deliveries sent meanwhile queue for the next group: deterministic, no timing.
type heldGroups struct {
	mu      sync.Mutex
	sizes   []int
	release chan struct{}
}

// holdFirstGroup returns a fixture with the pending orders order-0 to order-(n-1)
// (amount 1000) and a Recorder with group commit cfg whose first group waits for the
// returned heldGroups' release.
func holdFirstGroup(t *testing.T, n int, cfg GroupCommit) (*fixture, *heldGroups) {
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, nil))
	f.pendingOrders(n, 1000)
	h := &heldGroups{release: make(chan struct{})}
	cfg.Observe = func(size int) {
		h.mu.Lock()
		first := len(h.sizes) == 0
		h.sizes = append(h.sizes, size)
		h.mu.Unlock()
		if first {
			<-h.release
		}
	}
	f.rec = NewRecorder(f.pool, f.ep, WithGroupCommit(cfg))
	return f, h
}

// groupSizes is the size of each group so far, in the order they ran.
func (h *heldGroups) groupSizes() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.sizes)
}

// awaitQueued waits until k deliveries wait in g's queue for a group.
func awaitQueued(t *testing.T, g *grouper, k int, what string) {
	t.Helper()
	testsupport.Eventually(t, 30*time.Second, 5*time.Millisecond, what, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.queue) == k
	})
}

// recordInBackground records e through f's Recorder on another goroutine; the channel
// gets Record's error.
func (f *fixture) recordInBackground(e Event) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := f.rec.Record(f.ctx, e)
		done <- err
	}()
	return done
}

// notAnsweredYet fails the test if the delivery behind done has answered: failure says
// why it must not have.
func notAnsweredYet(t *testing.T, done <-chan error, failure string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s (%v)", failure, err)
	default:
	}
}

// awaitAnswer waits for the delivery behind done (what it is) and fails the test on its
// error.
func awaitAnswer(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not finish", what)
	}
}

func TestGroupFormsUnderConcurrencyAndAppliesEachEventOnce(t *testing.T) {
	t.Parallel()
	const n = 24
	// The first group holds its leader until every other delivery has queued, so the
	// second group is all of them.
	f, held := holdFirstGroup(t, n, GroupCommit{MaxEvents: 32, Transactions: 1})
	g := f.rec.group

	results := make([]Result, n+1)
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	send := func(i int, e Event) {
		wg.Go(func() { results[i], errs[i] = f.rec.Record(f.ctx, e) })
	}
	send(0, ev("evt_0", "payment_intent.succeeded", "order-0", 1000, t0))
	testsupport.Eventually(t, 30*time.Second, 5*time.Millisecond, "the first group to start", func() bool { return len(held.groupSizes()) == 1 })
	for i := 1; i < n; i++ {
		send(i, ev(fmt.Sprintf("evt_%d", i), "payment_intent.succeeded", fmt.Sprintf("order-%d", i), 1000, t0))
	}
	awaitQueued(t, g, n-1, "deliveries 1.. to queue")
	// A copy of evt_1, queued after it, conflicts with it: it must wait for a later
	// group, and be a duplicate.
	send(n, ev("evt_1", "payment_intent.succeeded", "order-1", 1000, t0))
	awaitQueued(t, g, n, "every delivery to queue")
	close(held.release)
	wg.Wait()

	for i := range n {
		if errs[i] != nil || results[i].Outcome != OutcomeApplied {
			t.Fatalf("delivery %d: %+v, %v", i, results[i], errs[i])
		}
	}
	if errs[n] != nil || !results[n].Duplicate {
		t.Fatalf("the copy of evt_1: %+v, %v", results[n], errs[n])
	}
	if sizes := held.groupSizes(); len(sizes) != 3 || sizes[0] != 1 || sizes[1] != n-1 || sizes[2] != 1 {
		t.Fatalf("group sizes %v, want [1 %d 1]", sizes, n-1)
	}
	if got := f.rows.Receipts(t); got != n {
		t.Fatalf("receipts = %d, want %d", got, n)
	}
	if got := f.rows.Outbox(t); got != n {
		t.Fatalf("outbox rows = %d, want %d", got, n)
	}
	if got := f.rows.Count(t, f.rows.Tables.Entities, "state = $1 AND version = 1", "paid"); got != n {
		t.Fatalf("paid entities with one transition = %d, want %d", got, n)
	}
}

func TestGroupConcurrentCopiesApplyOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, nil))
	const entities, copies = 8, 8
	f.pendingOrders(entities, 1000)
	var mu sync.Mutex
	applied, dups := map[string]int{}, 0
	atOnce(entities*copies, func(i int) {
		e := ev(fmt.Sprintf("evt_%d", i%entities), "payment_intent.succeeded", fmt.Sprintf("order-%d", i%entities), 1000, t0)
		res, err := f.rec.Record(f.ctx, e)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			t.Errorf("%s: %v", e.ID, err)
		case res.Duplicate:
			dups++
		case res.Outcome == OutcomeApplied:
			applied[e.ID]++
		default:
			t.Errorf("%s: %+v", e.ID, res)
		}
	})
	if len(applied) != entities || dups != entities*(copies-1) {
		t.Fatalf("applied %v, duplicates %d", applied, dups)
	}
	for id, n := range applied {
		if n != 1 {
			t.Fatalf("%s applied %d times", id, n)
		}
	}
	if got := f.rows.Outbox(t); got != entities {
		t.Fatalf("outbox rows = %d, want %d", got, entities)
	}
}

func TestGroupMemberThatCannotCommitFailsAlone(t *testing.T) {
	t.Parallel()
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, ordersBinding()), ordersTable,
		`INSERT INTO public.orders (tenant_id, client_txn_id, status, expected_amount_paise) VALUES
		 ('acme', 'txn-1', 'payment_pending', 100), ('acme', 'poison', 'payment_pending', 100), ('acme', 'txn-2', 'payment_pending', 100)`,
		// The app's own rule refuses one order's update: that statement, and so a shared
		// transaction, fails.
		`CREATE FUNCTION public.refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN IF NEW.client_txn_id = 'poison' THEN RAISE EXCEPTION 'order poison is frozen'; END IF; RETURN NEW; END $$`,
		`CREATE TRIGGER refuse_poison BEFORE UPDATE ON public.orders FOR EACH ROW EXECUTE FUNCTION public.refuse_poison()`)

	group := []*groupMember{
		member(f.ctx, ev("evt_1", "payment_intent.succeeded", "txn-1", 100, t0)),
		member(f.ctx, ev("evt_p", "payment_intent.succeeded", "poison", 100, t0)),
		member(f.ctx, ev("evt_2", "payment_intent.succeeded", "txn-2", 100, t0)),
	}
	f.rec.group.run(group, func() {})
	for _, i := range []int{0, 2} {
		if rep := awaitReply(t, group[i]); rep.err != nil || rep.res.Outcome != OutcomeApplied {
			t.Fatalf("%s: %+v, %v", group[i].ev.ID, rep.res, rep.err)
		}
	}
	if rep := awaitReply(t, group[1]); rep.err == nil {
		t.Fatalf("poison: %+v, want an error", rep.res)
	}
	got := f.str(`SELECT string_agg(client_txn_id || '=' || status, ',' ORDER BY id) FROM public.orders`)
	if want := "txn-1=paid,poison=payment_pending,txn-2=paid"; got != want {
		t.Fatalf("orders = %s, want %s", got, want)
	}
	if got := f.rows.ReceiptsOf(t, "evt_p"); got != 0 {
		t.Fatalf("receipts of the failed member = %d, want 0 (it answered 503)", got)
	}
}

// holdBusyEntity makes the managed entities order-busy and order-free, both
// payment_pending with amount 100, and holds order-busy's row lock as another replica or
// the app would: in a transaction the test commits to release it (or its cleanup rolls
// back).
func holdBusyEntity(t *testing.T, f *fixture) pgx.Tx {
	t.Helper()
	f.managedEntity("order-busy", "payment_pending", 100)
	f.managedEntity("order-free", "payment_pending", 100)
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(f.ctx, `SELECT 1 FROM hk.entities WHERE entity_key = 'order-busy' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	return tx
}

func TestGroupDoesNotWaitBehindALockedEntity(t *testing.T) {
	t.Parallel()
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, nil))
	tx := holdBusyEntity(t, f)

	busy := member(f.ctx, ev("evt_busy", "payment_intent.succeeded", "order-busy", 100, t0))
	free := member(f.ctx, ev("evt_free", "payment_intent.succeeded", "order-free", 100, t0))
	ran := make(chan struct{})
	go func() { f.rec.group.run([]*groupMember{busy, free}, func() {}); close(ran) }()

	// The group gives up on the lock; the free member commits and the leader is free
	// for the next group while the busy member waits on its own.
	if rep := awaitReply(t, free); rep.err != nil || rep.res.Outcome != OutcomeApplied {
		t.Fatalf("free member: %+v, %v", rep.res, rep.err)
	}
	select {
	case <-ran:
	case <-time.After(30 * time.Second):
		t.Fatal("the leader is still held by the locked entity")
	}
	select {
	case rep := <-busy.reply:
		t.Fatalf("the busy member answered while its entity was locked: %+v, %v", rep.res, rep.err)
	default:
	}
	if err := tx.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	if rep := awaitReply(t, busy); rep.err != nil || rep.res.Outcome != OutcomeApplied {
		t.Fatalf("busy member after the lock was released: %+v, %v", rep.res, rep.err)
	}
	if got := f.rows.Count(t, f.rows.Tables.Entities, "state = $1 AND version = 1", "paid"); got != 2 {
		t.Fatalf("paid entities = %d, want 2", got)
	}
}

func TestGroupRetryLaterMemberWritesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRetry, nil))
	f.managedEntity("order-1", "payment_pending", 100)
	missing := member(f.ctx, ev("evt_early", "payment_intent.succeeded", "order-later", 100, t0))
	present := member(f.ctx, ev("evt_1", "payment_intent.succeeded", "order-1", 100, t0))
	f.rec.group.run([]*groupMember{missing, present}, func() {})
	if rep := awaitReply(t, missing); !errors.Is(rep.err, ErrRetryLater) {
		t.Fatalf("missing entity: %+v, %v; want ErrRetryLater", rep.res, rep.err)
	}
	if rep := awaitReply(t, present); rep.err != nil || rep.res.Outcome != OutcomeApplied {
		t.Fatalf("present entity: %+v, %v", rep.res, rep.err)
	}
	if got := f.rows.Receipts(t); got != 1 {
		t.Fatalf("receipts = %d, want 1", got)
	}
}

func TestGroupTakeSkipsConflictsAndGoneCallers(t *testing.T) {
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	live := context.Background()
	g := &grouper{cfg: GroupCommit{MaxEvents: 3, Transactions: 1}}
	goneMember := member(gone, ev("b", "t", "k2", 0, time.Time{}))
	g.queue = []*groupMember{
		member(live, ev("a", "t", "k1", 0, time.Time{})),
		goneMember,
		member(live, ev("c", "t", "k1", 0, time.Time{})), // same entity as a
		member(live, ev("a", "t", "k3", 0, time.Time{})), // same event id as a
		member(live, ev("d", "t", "", 0, time.Time{})),   // no entity: never conflicts on one
		member(live, ev("e", "t", "", 0, time.Time{})),
		member(live, ev("f", "t", "k4", 0, time.Time{})), // beyond MaxEvents
	}
	gotIDs := func(ms []*groupMember) (s []string) {
		for _, m := range ms {
			s = append(s, m.ev.ID+"/"+m.ev.EntityKey)
		}
		return s
	}
	group := g.take()
	if got, want := fmt.Sprint(gotIDs(group)), "[a/k1 d/ e/]"; got != want {
		t.Fatalf("group %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(gotIDs(g.queue)), "[c/k1 a/k3 f/k4]"; got != want {
		t.Fatalf("left queued %s, want %s", got, want)
	}
	if rep := awaitReply(t, goneMember); !errors.Is(rep.err, context.Canceled) {
		t.Fatalf("the member whose caller left: %+v, %v; want context.Canceled", rep.res, rep.err)
	}
}

func TestGroupLoneDeliveryRunsOnTheCallersGoroutine(t *testing.T) {
	t.Parallel()
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, nil))
	f.managedEntity("order-1", "payment_pending", 1000)
	// Observe runs where the group runs: on the caller's goroutine, Record is on its stack;
	// on a leader's, the stack starts at the leader.
	var onCaller []bool
	f.rec = NewRecorder(f.pool, f.ep, WithGroupCommit(GroupCommit{MaxEvents: 32, Transactions: 2, Observe: func(int) {
		pcs := make([]uintptr, 64)
		frames := runtime.CallersFrames(pcs[:runtime.Callers(0, pcs)])
		found := false
		for {
			fr, more := frames.Next()
			found = found || strings.HasSuffix(fr.Function, ".(*Recorder).Record")
			if !more {
				break
			}
		}
		onCaller = append(onCaller, found)
	}}))
	res, err := f.rec.Record(f.ctx, ev("evt_1", "payment_intent.succeeded", "order-1", 1000, t0))
	if err != nil || res.Outcome != OutcomeApplied {
		t.Fatalf("lone delivery: %+v, %v", res, err)
	}
	if len(onCaller) != 1 || !onCaller[0] {
		t.Fatalf("groups run on the caller's goroutine: %v, want [true]", onCaller)
	}
	g := f.rec.group
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.leaders != 0 || len(g.queue) != 0 {
		t.Fatalf("after the lone delivery: %d leaders, %d queued; want the slot given back", g.leaders, len(g.queue))
	}
}

// BenchmarkGroupContext is the context a group runs under, for a lone delivery and a
// group of four: go test ./internal/receipt -run XXX -bench GroupContext -benchmem
func BenchmarkGroupContext(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for _, n := range []int{1, 4} {
		group := make([]*groupMember, n)
		for i := range group {
			group[i] = &groupMember{ctx: ctx}
		}
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, stop := groupContext(group)
				stop()
			}
		})
	}
}

// TestLoneDeliveryOnALockedEntityStallsNoOther: a delivery that arrives alone runs as a
// group of one and forms the next group's turn until it holds its entity's lock. When
// the app (or another replica) holds that row for seconds, every other delivery of the
// endpoint would wait behind it; instead it gives the lock up after groupLockTimeout and
// waits on its own, and the others commit meanwhile.
func TestLoneDeliveryOnALockedEntityStallsNoOther(t *testing.T) {
	t.Parallel()
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, nil))
	tx := holdBusyEntity(t, f)

	busy := f.recordInBackground(ev("evt_busy", "payment_intent.succeeded", "order-busy", 100, t0))
	// The busy delivery is alone and waits for its lock before the free one arrives.
	testsupport.Eventually(t, 10*time.Second, 10*time.Millisecond, "the busy delivery waits for its entity's lock", func() bool {
		return f.count(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`) > 0
	})

	freeCtx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
	defer cancel()
	res, err := f.rec.Record(freeCtx, ev("evt_free", "payment_intent.succeeded", "order-free", 100, t0))
	if err != nil || res.Outcome != OutcomeApplied {
		t.Fatalf("a delivery for another entity waited behind the locked one: %+v, %v", res, err)
	}
	notAnsweredYet(t, busy, "the busy delivery answered while its entity was locked")
	if err := tx.Commit(f.ctx); err != nil {
		t.Fatal(err)
	}
	awaitAnswer(t, busy, "the busy delivery after its lock was released")
	if got := f.rows.EntitiesInState(t, "paid"); got != 2 {
		t.Fatalf("paid entities = %d, want 2", got)
	}
}

// TestGroupQueuesBehindTheRunningTransaction: deliveries that arrive while a group
// transaction runs form the next group, and no second transaction opens before they
// have queued OverflowAfter.
func TestGroupQueuesBehindTheRunningTransaction(t *testing.T) {
	t.Parallel()
	const n = 6
	// The first transaction runs until the test says.
	f, held := holdFirstGroup(t, n, GroupCommit{MaxEvents: 32, Transactions: 2, OverflowAfter: time.Hour})
	g := f.rec.group
	var wg sync.WaitGroup
	errs := make([]error, n)
	send := func(i int) {
		wg.Go(func() {
			_, errs[i] = f.rec.Record(f.ctx, ev(fmt.Sprintf("evt_%d", i), "payment_intent.succeeded", fmt.Sprintf("order-%d", i), 1000, t0))
		})
	}
	send(0)
	testsupport.Eventually(t, 30*time.Second, 5*time.Millisecond, "the first transaction to start", func() bool { return len(held.groupSizes()) == 1 })
	for i := 1; i < n; i++ {
		send(i)
	}
	awaitQueued(t, g, n-1, "the others to queue")
	g.mu.Lock()
	leaders := g.leaders
	g.mu.Unlock()
	if leaders != 1 {
		t.Errorf("%d transactions running, want 1: the second opens only after OverflowAfter", leaders)
	}
	close(held.release)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("delivery %d: %v", i, err)
		}
	}
	if sizes := held.groupSizes(); !slices.Equal(sizes, []int{1, n - 1}) {
		t.Errorf("group sizes %v, want [1 %d]", sizes, n-1)
	}
	if got := f.rows.EntitiesInState(t, "paid"); got != n {
		t.Errorf("paid entities = %d, want %d", got, n)
	}
}

// TestGroupOverflowsASlowCommit: a group transaction that takes long after it holds its
// locks (a slow commit, a trigger of the app's) holds no delivery much longer than
// OverflowAfter: a second transaction opens for them.
func TestGroupOverflowsASlowCommit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, nil))
	f.managedEntity("order-slow", "payment_pending", 100)
	f.managedEntity("order-free", "payment_pending", 100)
	f.exec(`CREATE FUNCTION hk.slow_move() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.entity_key = 'order-slow' THEN PERFORM pg_sleep(5); END IF;
  RETURN NEW;
END $$`)
	f.exec(`CREATE TRIGGER slow_move BEFORE UPDATE ON hk.entities FOR EACH ROW EXECUTE FUNCTION hk.slow_move()`)
	if DefaultGroupCommit.OverflowAfter <= 0 || DefaultGroupCommit.Transactions < 2 {
		t.Fatalf("DefaultGroupCommit %+v: the default must overflow", DefaultGroupCommit)
	}

	slow := f.recordInBackground(ev("evt_slow", "payment_intent.succeeded", "order-slow", 100, t0))
	testsupport.Eventually(t, 10*time.Second, 5*time.Millisecond, "the slow transaction to sleep in its write", func() bool {
		return f.count(`SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()`) > 0
	})
	res, err := f.rec.Record(f.ctx, ev("evt_free", "payment_intent.succeeded", "order-free", 100, t0))
	if err != nil || res.Outcome != OutcomeApplied {
		t.Fatalf("free delivery: %+v, %v", res, err)
	}
	notAnsweredYet(t, slow, "the free delivery waited for the slow transaction to end")
	awaitAnswer(t, slow, "the slow delivery")
	if got := f.rows.EntitiesInState(t, "paid"); got != 2 {
		t.Fatalf("paid entities = %d, want 2", got)
	}
}

// A GroupCommit that sets neither MaxEvents nor Transactions is the default one, so a
// caller that builds options and leaves it zero gets group commit as the receiver
// command does; MaxEvents 1 is the way to turn it off.
func TestGroupCommitZeroIsTheDefault(t *testing.T) {
	observed := false
	g := newGrouper(&Recorder{}, GroupCommit{Observe: func(int) { observed = true }})
	if g == nil {
		t.Fatal("a zero GroupCommit turned group commit off")
	}
	if g.cfg.MaxEvents != DefaultGroupCommit.MaxEvents || g.cfg.Transactions != DefaultGroupCommit.Transactions ||
		g.cfg.OverflowAfter != DefaultGroupCommit.OverflowAfter {
		t.Fatalf("zero GroupCommit = %+v, want %+v", g.cfg, DefaultGroupCommit)
	}
	g.cfg.Observe(1)
	if !observed {
		t.Fatal("the zero GroupCommit's Observe was dropped")
	}
	if newGrouper(&Recorder{}, GroupCommit{MaxEvents: 1}) != nil {
		t.Fatal("MaxEvents 1 did not turn group commit off")
	}
}
