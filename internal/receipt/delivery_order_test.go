package receipt

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// paymentMachine is a linear payment life cycle, unambiguous in the sense of
// docs/convergence.md: every event type applies from exactly one state, so every
// delivery order must end in the in-order state with the in-order effects.
func paymentMachine() v1alpha1.StateMachineSpec {
	return v1alpha1.StateMachineSpec{
		Initial: "pending",
		States:  []string{"pending", "authorized", "captured", "partially_refunded", "refunded", "disputed", "dispute_won", "cancelled"},
		Transitions: []v1alpha1.Transition{
			{Name: "authorize", On: []string{"payment.authorized"}, From: []string{"pending"}, To: "authorized", Emit: "payment.authorized"},
			{Name: "cancel", On: []string{"payment.cancelled"}, From: []string{"authorized"}, To: "cancelled", Emit: "payment.cancelled"},
			{Name: "capture", On: []string{"payment.captured"}, From: []string{"authorized"}, To: "captured",
				Guard: "event.amount == entity.amount", Emit: "payment.captured"},
			{Name: "partial_refund", On: []string{"charge.partially_refunded"}, From: []string{"captured"}, To: "partially_refunded", Emit: "payment.partially_refunded"},
			{Name: "refund", On: []string{"charge.refunded"}, From: []string{"partially_refunded"}, To: "refunded", Emit: "payment.refunded"},
			{Name: "dispute_open", On: []string{"dispute.opened"}, From: []string{"refunded"}, To: "disputed", Emit: "dispute.opened"},
			{Name: "dispute_close", On: []string{"dispute.closed"}, From: []string{"disputed"}, To: "dispute_won", Emit: "dispute.closed"},
		},
	}
}

func paymentEndpoint(onUnmatched v1alpha1.OnUnmatched, table *v1alpha1.EntityTableSpec) *v1alpha1.WebhookEndpoint {
	we := endpointSpec(onUnmatched, table)
	we.Spec.StateMachine = paymentMachine()
	return we
}

// paymentInOrder is a payment's state and effects once its whole history (paymentHistory)
// applied in provider order.
const paymentInOrder = "dispute_won | payment.authorized,payment.captured,payment.partially_refunded,payment.refunded,dispute.opened,dispute.closed"

// paymentMode is an entity mode the payment tests run in: hookkeeper's managed entities,
// or the app's payments table with a tenant column, whose setup creates it (another
// tenant's rows may share keys and must never move).
type paymentMode struct {
	name  string
	table *v1alpha1.EntityTableSpec
	setup []string
}

func paymentModes() []paymentMode {
	return []paymentMode{{name: "managed"}, {
		name: "app table with tenant",
		table: &v1alpha1.EntityTableSpec{Schema: "public", Name: "payments", KeyColumn: "ref", StateColumn: "status",
			AmountColumn: "amount", Tenant: &v1alpha1.TenantSpec{Column: "tenant_id", Value: "acme"}},
		setup: []string{`CREATE TABLE public.payments (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		tenant_id text NOT NULL, ref text NOT NULL, status text NOT NULL, amount bigint NOT NULL,
		UNIQUE (tenant_id, ref))`},
	}}
}

// inPaymentModes runs fn in each payment mode, in parallel, on a fixture of its own: the
// payment endpoint with onUnmatched, and the mode's table set up.
func inPaymentModes(t *testing.T, onUnmatched v1alpha1.OnUnmatched, fn func(t *testing.T, f *fixture, mode paymentMode)) {
	for _, mode := range paymentModes() {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			fn(t, newFixture(t, paymentEndpoint(onUnmatched, mode.table), mode.setup...), mode)
		})
	}
}

// managedStateSQL reads the state of the managed entity $1.
const managedStateSQL = `SELECT state FROM hk.entities WHERE entity_key = $1`

// stateSQL reads the state of the payment $1 in m's entity table (the acme tenant's row
// in the app table).
func (m paymentMode) stateSQL() string {
	if m.table != nil {
		return `SELECT status FROM public.payments WHERE ref = $1 AND tenant_id = 'acme'`
	}
	return managedStateSQL
}

// paymentHistory is one payment's history in provider order. Each event carries the
// amount the provider puts in it: the partial refund its own (refund) amount, the
// full refund the rest, the dispute the disputed amount, the closing none.
func paymentHistory(key string) []Event {
	return []Event{
		ev("auth-"+key, "payment.authorized", key, 500, t0),
		ev("cap-"+key, "payment.captured", key, 500, t0.Add(1*time.Second)),
		ev("pref-"+key, "charge.partially_refunded", key, 200, t0.Add(2*time.Second)),
		ev("ref-"+key, "charge.refunded", key, 300, t0.Add(3*time.Second)),
		ev("dopen-"+key, "dispute.opened", key, 300, t0.Add(4*time.Second)),
		ev("dclose-"+key, "dispute.closed", key, 0, t0.Add(5*time.Second)),
	}
}

func permutations(n int) [][]int {
	var out [][]int
	var rec func(prefix []int, rest []int)
	rec = func(prefix, rest []int) {
		if len(rest) == 0 {
			out = append(out, append([]int(nil), prefix...))
			return
		}
		for i := range rest {
			next := append(append([]int(nil), rest[:i]...), rest[i+1:]...)
			rec(append(prefix, rest[i]), next)
		}
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	rec(nil, idx)
	return out
}

// entitySummary is one entity's final state and its effects in outbox order.
func (f *fixture) stateAndEffects(key string, stateSQL string) string {
	f.t.Helper()
	var state string
	if err := f.pool.QueryRow(f.ctx, stateSQL, key).Scan(&state); err != nil {
		f.t.Fatalf("state of %s: %v", key, err)
	}
	var effects *string
	if err := f.pool.QueryRow(f.ctx, `SELECT string_agg(event_type, ',' ORDER BY id) FROM hk.outbox WHERE entity_key = $1`, key).Scan(&effects); err != nil {
		f.t.Fatalf("effects of %s: %v", key, err)
	}
	e := ""
	if effects != nil {
		e = *effects
	}
	return state + " | " + e
}

// Every permutation of a six-event payment history (authorized, captured, partially
// refunded, refunded, dispute opened, dispute closed), each delivered with random
// copies, must end as the in-order delivery does: same state, same effects, same order.
// With onUnmatched Create the first event to arrive creates the entity.
func TestEveryPermutationConverges(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name        string
		onUnmatched v1alpha1.OnUnmatched
	}{{"managed, entities exist", v1alpha1.UnmatchedRecord}, {"managed, onUnmatched Create", v1alpha1.UnmatchedCreate}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, paymentEndpoint(mode.onUnmatched, nil))
			f.rec = NewRecorder(f.pool, f.ep, WithRecentEvents(0))
			rng := rand.New(rand.NewPCG(7, 11))
			perms := permutations(6)
			var bad []string
			for p, perm := range perms {
				key := fmt.Sprintf("pay-%d", p)
				if mode.onUnmatched == v1alpha1.UnmatchedRecord {
					f.managedEntity(key, "pending", 500)
				}
				h := paymentHistory(key)
				for _, i := range perm {
					for range 1 + rng.IntN(2) {
						if _, err := f.rec.Record(f.ctx, h[i]); err != nil {
							t.Fatalf("%s: %v", h[i].ID, err)
						}
					}
				}
				if got := f.stateAndEffects(key, managedStateSQL); got != paymentInOrder {
					bad = append(bad, fmt.Sprintf("order %v: %s", perm, got))
				}
			}
			if len(bad) > 0 {
				t.Fatalf("%d of %d delivery orders diverge from the in-order result (%s); first ones:\n%s",
					len(bad), len(perms), paymentInOrder, strings.Join(bad[:min(len(bad), 5)], "\n"))
			}
		})
	}
}

// onUnmatched Create: a partial refund delivered before the capture creates the entity
// without an amount (no transition of its type leaves the initial state), and the
// capture sets it. Were the entity created with the refund's amount, the capture's guard
// (event.amount == entity.amount) would be false and the payment would never move.
func TestCreatedEntityTakesTheAmountOfAnEventThatStartsItsHistory(t *testing.T) {
	t.Parallel()
	we := endpointSpec(v1alpha1.UnmatchedCreate, nil)
	we.Spec.StateMachine.Transitions = append(we.Spec.StateMachine.Transitions, v1alpha1.Transition{
		Name: "partial_refund", On: []string{"charge.refund.updated"}, From: []string{"paid"}, To: "refunded", Emit: "order.partially_refunded"})
	f := newFixture(t, we)
	capture := func(key string) Event { return ev("cap-"+key, "payment_intent.succeeded", key, 500, t0) }
	refund := func(key string) Event { return ev("ref-"+key, "charge.refund.updated", key, 200, t0.Add(time.Second)) }

	f.record(capture("in-order"))
	f.record(refund("in-order"))
	f.record(refund("late-capture"))
	r := f.record(capture("late-capture"))

	want := f.stateAndEffects("in-order", managedStateSQL)
	got := f.stateAndEffects("late-capture", managedStateSQL)
	if got != want {
		t.Fatalf("refund first then capture ends %q (capture: %s %s), in order ends %q", got, r.Outcome, r.Detail, want)
	}
}

// Provider times with sub-microsecond digits (Twitch's RFC 3339 nanoseconds, Mailgun's
// float seconds turned into nanoseconds by expr.AsTime) are stored truncated to
// PostgreSQL's microseconds. Were the delivered event decided with its nanoseconds, then
// out of order the refund would park (stored as ...908180), the capture apply with
// ...908180952, and the parked refund, read back, look older than the last applied
// event: stale. The Recorder decides with the stored precision, so both orders end alike.
func TestSubMicrosecondTimesOrderTheSameInAnyDeliveryOrder(t *testing.T) {
	t.Parallel()
	entityModes(t, func(t *testing.T, f *fixture, state func() string) {
		// Mailgun-style: 1521472262.908181 s as float64 -> ...908180952 ns.
		at := time.Unix(1521472262, 908180952).UTC()
		f.managedOrApp(t, "o-2")
		// In provider order, each in its own transaction.
		f.record(ev("cap-1", "payment_intent.succeeded", "o-1", 500, at))
		r := f.record(ev("ref-1", "charge.refunded", "o-1", 500, at))
		inOrder := state()
		// Out of order: the refund parks, the capture releases it in one transaction.
		f.record(ev("ref-2", "charge.refunded", "o-2", 500, at))
		r2 := f.record(ev("cap-2", "payment_intent.succeeded", "o-2", 500, at))
		outOfOrder := f.stateOf(t, "o-2")
		if inOrder != outOfOrder {
			t.Fatalf("same two events, same time: in order the refund is %s and the order ends %s; out of order the capture released %+v and it ends %s",
				r.Outcome, inOrder, r2.Released, outOfOrder)
		}
	})
}

// managedOrApp adds order key in payment_pending for 500 where entityModes keeps o-1.
func (f *fixture) managedOrApp(t *testing.T, key string) {
	if f.ep.Spec.Entity.Table == nil {
		f.managedEntity(key, "payment_pending", 500)
		return
	}
	f.exec(`INSERT INTO public.orders (tenant_id, client_txn_id, status, expected_amount_paise) VALUES ('acme', $1, 'payment_pending', 500)`, key)
}

func (f *fixture) stateOf(t *testing.T, key string) string {
	s, _, err := EntityState(f.ctx, f.pool, f.ep, key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
