package receipt

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// recordOneGroup runs evs as one group transaction of rec, with no fallback: an error
// of the group's own statements fails the test instead of being hidden by each member
// then running alone.
func recordOneGroup(t *testing.T, ctx context.Context, rec *Recorder, evs ...Event) []groupReply {
	t.Helper()
	group := make([]*groupMember, len(evs))
	for i, e := range evs {
		group[i] = member(ctx, e)
	}
	replies, err := rec.recordGroup(ctx, group, func() {})
	if err != nil {
		t.Fatalf("the group of %d did not commit: %v", len(evs), err)
	}
	return replies
}

// A group decides each member on its own entity, in every entity mode: each member
// gets its own entity's state, amount, clock, parked events and seen flag, and a member
// whose entity is missing is unmatched (or created) alone. The group runs without the
// fallback that would otherwise hide a failure of its own statements.
func TestGroupDecidesEachMemberOnItsOwnEntity(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		onUnmatched v1alpha1.OnUnmatched
		table       *v1alpha1.EntityTableSpec
		setup       []string
		managed     bool
		// missing is the outcome of the member whose entity does not exist.
		missing Outcome
	}{
		{name: "managed", onUnmatched: v1alpha1.UnmatchedRecord, managed: true, missing: OutcomeUnmatched},
		{name: "managed, onUnmatched Create", onUnmatched: v1alpha1.UnmatchedCreate, managed: true, missing: OutcomeApplied},
		{name: "app table", onUnmatched: v1alpha1.UnmatchedRecord, table: ordersBinding(), missing: OutcomeUnmatched,
			setup: []string{ordersTable, `INSERT INTO public.orders (tenant_id, client_txn_id, status, expected_amount_paise) VALUES
				('acme', 'o-paid', 'paid', 100), ('acme', 'o-pending', 'payment_pending', 100),
				('acme', 'o-parked', 'payment_pending', 100),
				('globex', 'o-missing', 'payment_pending', 100)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, endpointSpec(tc.onUnmatched, tc.table), tc.setup...)
			if tc.managed {
				f.managedEntity("o-paid", "paid", 100)
				f.managedEntity("o-pending", "payment_pending", 100)
				f.managedEntity("o-parked", "payment_pending", 100)
			}
			// A refund that arrived before its capture waits on o-parked.
			if r := f.record(ev("evt_early_refund", "charge.refunded", "o-parked", 0, t0.Add(time.Minute))); r.Outcome != OutcomeParked {
				t.Fatalf("early refund: %+v, want parked", r)
			}
			// A copy of a recorded event rides in the group as a duplicate.
			f.record(ev("evt_seen", "payment_intent.succeeded", "o-seen", 100, t0))

			// Members in an order other than their keys': the locks are taken sorted.
			replies := recordOneGroup(t, f.ctx, f.rec,
				ev("evt_refund", "charge.refunded", "o-paid", 0, t0),
				ev("evt_missing", "payment_intent.succeeded", "o-missing", 100, t0),
				ev("evt_capture", "payment_intent.succeeded", "o-pending", 100, t0),
				ev("evt_seen", "payment_intent.succeeded", "o-seen", 100, t0),
				ev("evt_late_capture", "payment_intent.succeeded", "o-parked", 100, t0),
			)
			want := []struct {
				outcome  Outcome
				to       string
				released int
			}{
				{OutcomeApplied, "refunded", 0},
				{tc.missing, "", 0},
				{OutcomeApplied, "paid", 0},
				{"", "", 0},
				{OutcomeApplied, "paid", 1}, // and the parked refund then applies
			}
			for i, w := range want {
				rep := replies[i]
				if rep.err != nil {
					t.Fatalf("member %d: %v", i, rep.err)
				}
				if w.outcome == "" {
					if !rep.res.Duplicate {
						t.Errorf("member %d: %+v, want a duplicate", i, rep.res)
					}
					continue
				}
				if rep.res.Outcome != w.outcome || (w.to != "" && rep.res.ToState != w.to) || len(rep.res.Released) != w.released {
					t.Errorf("member %d: %+v, want %s to %q releasing %d", i, rep.res, w.outcome, w.to, w.released)
				}
			}
			if got := f.rows.ReceiptsOf(t, "evt_seen"); got != 1 {
				t.Errorf("receipts of the copy = %d, want 1", got)
			}
		})
	}
}

// Two spellings of one key of a non-text key column (7 and 07 of a bigint) name one
// row. In one group both would decide on its state and both apply: the second guarded
// update finds the row moved, the group fails as a whole, and each member then runs
// alone, one after the other: one applies, the other finds the state it needs gone.
func TestGroupNeverAppliesTwoSpellingsOfOneKeyTwice(t *testing.T) {
	t.Parallel()
	table := &v1alpha1.EntityTableSpec{Schema: "public", Name: "numbered", KeyColumn: "n", StateColumn: "status"}
	f := newFixture(t, endpointSpec(v1alpha1.UnmatchedRecord, table),
		`CREATE TABLE public.numbered (n bigint PRIMARY KEY, status text NOT NULL)`,
		`INSERT INTO public.numbered VALUES (7, 'paid')`)
	group := []*groupMember{
		member(f.ctx, ev("evt_a", "charge.refunded", "7", 0, t0)),
		member(f.ctx, ev("evt_b", "charge.refunded", "07", 0, t0)),
	}
	if _, err := f.rec.recordGroup(f.ctx, group, func() {}); err == nil || !strings.Contains(err.Error(), "state changed during the transaction") {
		t.Fatalf("recordGroup: %v, want the second move refused", err)
	}
	f.rec.group.run(group, func() {})
	outcomes := map[Outcome]int{}
	for _, m := range group {
		rep := awaitReply(t, m)
		if rep.err != nil {
			t.Fatalf("%s alone: %v", m.ev.ID, rep.err)
		}
		outcomes[rep.res.Outcome]++
	}
	if outcomes[OutcomeApplied] != 1 || outcomes[OutcomeIgnoredState] != 1 {
		t.Fatalf("outcomes = %v, want one applied and one ignored_state", outcomes)
	}
	if got := f.str(`SELECT status FROM public.numbered WHERE n = 7`); got != "refunded" {
		t.Fatalf("row 7 = %s, want refunded", got)
	}
	if got := f.rows.Outbox(t); got != 1 {
		t.Fatalf("outbox rows = %d, want 1", got)
	}
}
