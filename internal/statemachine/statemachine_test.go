package statemachine

import (
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/event"
)

func i64(v int64) *int64 { return &v }

func orders(t *testing.T) *Machine {
	t.Helper()
	m, err := Compile(v1alpha1.StateMachineSpec{
		Initial: "pending",
		States:  []string{"pending", "authorised", "paid", "failed", "refunded"},
		Transitions: []v1alpha1.Transition{
			{Name: "authorise", On: []string{"AUTHORISATION"}, From: []string{"pending"}, To: "authorised", Guard: `event.body.success == "true"`},
			{Name: "decline", On: []string{"AUTHORISATION"}, From: []string{"pending"}, To: "failed", Guard: `event.body.success == "false"`},
			{Name: "capture", On: []string{"payment_intent.succeeded", "CAPTURE"}, From: []string{"pending", "authorised"}, To: "paid",
				Guard: "event.amount == entity.amount", Emit: "order.paid"},
			{Name: "refund", On: []string{"charge.refunded"}, From: []string{"paid"}, To: "refunded", Emit: "order.refunded"},
			{Name: "confirm", On: []string{"confirm"}, From: []string{"pending"}, To: "paid", Guard: `live != null && live.status == "succeeded"`},
		},
	}, []string{"confirm"})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return m
}

func TestDecide(t *testing.T) {
	m := orders(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	older := t0.Add(-time.Minute)
	cases := []struct {
		name       string
		ev         event.Event
		ent        Entity
		live       any
		outcome    Outcome
		transition string
		detail     string
	}{
		{"unhandled type", event.Event{Type: "customer.created"}, Entity{State: "pending"}, nil, Unhandled, "", ""},
		{"capture applies", event.Event{Type: "payment_intent.succeeded", Amount: i64(100)}, Entity{State: "pending", Amount: i64(100)}, nil, Apply, "capture", ""},
		{"amount mismatch", event.Event{Type: "payment_intent.succeeded", Amount: i64(99)}, Entity{State: "pending", Amount: i64(100)}, nil, GuardFailed, "", "capture: guard is false"},
		{"missing amount fails closed", event.Event{Type: "payment_intent.succeeded"}, Entity{State: "pending", Amount: i64(100)}, nil, GuardFailed, "", "capture"},
		{"refund before capture parks", event.Event{Type: "charge.refunded"}, Entity{State: "pending"}, nil, Park, "", `state "pending" yet`},
		{"refund after refund can never apply", event.Event{Type: "charge.refunded"}, Entity{State: "refunded"}, nil, IgnoredState, "", "or any state reachable"},
		{"stale wins over parking", event.Event{Type: "charge.refunded", OccurredAt: &older}, Entity{State: "pending", LastEventAt: &t0}, nil, IgnoredState, "", DetailStale},
		{"duplicate capture after paid", event.Event{Type: "payment_intent.succeeded", Amount: i64(100)}, Entity{State: "paid", Amount: i64(100)}, nil, IgnoredState, "", ""},
		{"stale event", event.Event{Type: "payment_intent.succeeded", Amount: i64(100), OccurredAt: &older}, Entity{State: "pending", Amount: i64(100), LastEventAt: &t0}, nil, IgnoredState, "", DetailStale},
		{"same instant is not stale", event.Event{Type: "charge.refunded", OccurredAt: &t0}, Entity{State: "paid", LastEventAt: &t0}, nil, Apply, "refund", ""},
		{"first guard true wins", event.Event{Type: "AUTHORISATION", Body: map[string]any{"success": "true"}}, Entity{State: "pending"}, nil, Apply, "authorise", ""},
		{"second guard", event.Event{Type: "AUTHORISATION", Body: map[string]any{"success": "false"}}, Entity{State: "pending"}, nil, Apply, "decline", ""},
		{"guard error stops the decision", event.Event{Type: "AUTHORISATION", Body: map[string]any{}}, Entity{State: "pending"}, nil, GuardError, "authorise", "authorise: guard failed to evaluate"},
		{"live null fails closed", event.Event{Type: "confirm"}, Entity{State: "pending"}, nil, GuardFailed, "", "confirm"},
		{"live confirms", event.Event{Type: "confirm"}, Entity{State: "pending"}, map[string]any{"status": "succeeded"}, Apply, "confirm", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := m.Decide(Input{Event: tc.ev, Entity: tc.ent, Live: tc.live})
			if d.Outcome != tc.outcome {
				t.Fatalf("outcome = %s (%s), want %s", d.Outcome, d.Detail, tc.outcome)
			}
			if tc.transition != "" && (d.Transition == nil || d.Transition.Name != tc.transition) {
				t.Fatalf("transition = %+v, want %s", d.Transition, tc.transition)
			}
			if !strings.Contains(d.Detail, tc.detail) {
				t.Fatalf("detail = %q, want it to contain %q", d.Detail, tc.detail)
			}
		})
	}
	if !m.NeedsLive("confirm") || m.NeedsLive("charge.refunded") || !m.Handles("CAPTURE") || m.Handles("nope") {
		t.Fatalf("NeedsLive/Handles wrong")
	}
}

func TestCompileReportsEveryProblem(t *testing.T) {
	_, err := Compile(v1alpha1.StateMachineSpec{
		Initial: "nowhere",
		States:  []string{"a", "b", "a"},
		Transitions: []v1alpha1.Transition{
			{Name: "t1", On: []string{"x"}, From: []string{"a", "zz"}, To: "b", Guard: "entty.amount > 0"},
			{Name: "t1", On: []string{"y"}, From: []string{"a"}, To: "c", Guard: "event.amount"},
		},
	}, []string{"ghost"})
	if err == nil {
		t.Fatal("Compile accepted an inconsistent machine")
	}
	for _, want := range []string{
		`spec.stateMachine.states[2]: state "a" is listed twice`,
		`spec.stateMachine.initial: "nowhere" is not one of stateMachine.states`,
		`spec.stateMachine.transitions[t1].from: "zz" is not one of stateMachine.states`,
		`spec.stateMachine.transitions[t1].guard: undeclared reference to 'entty'`,
		`spec.stateMachine.transitions[t1].name: transition name "t1" is used twice`,
		`spec.stateMachine.transitions[t1].to: "c" is not one of stateMachine.states`,
		`spec.provider.refetch.transitions[0]: "ghost" is not a transition`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// A guard that cannot be evaluated (here a typo: `mergd`) must stop the decision: the
// next transition of the same type must not apply in its place.
func TestGuardErrorNeverFallsThrough(t *testing.T) {
	m, err := Compile(v1alpha1.StateMachineSpec{
		Initial: "opened",
		States:  []string{"opened", "merged", "closed"},
		Transitions: []v1alpha1.Transition{
			{Name: "merge", On: []string{"pull_request.closed"}, From: []string{"opened"}, To: "merged", Guard: "event.body.pull_request.mergd == true", Emit: "pr.merged"},
			{Name: "close", On: []string{"pull_request.closed"}, From: []string{"opened"}, To: "closed", Emit: "pr.closed"},
		},
	}, nil)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	d := m.Decide(Input{
		Event:  event.Event{Type: "pull_request.closed", Body: map[string]any{"pull_request": map[string]any{"merged": true}}},
		Entity: Entity{State: "opened"},
	})
	if d.Outcome != GuardError || d.Transition == nil || d.Transition.Name != "merge" {
		t.Fatalf("decision = %s %+v (%s), want guard_error on merge", d.Outcome, d.Transition, d.Detail)
	}
	if !strings.Contains(d.Detail, "mergd") {
		t.Fatalf("detail %q does not name the missing field", d.Detail)
	}
}

func TestCanStillApply(t *testing.T) {
	m := orders(t)
	for _, tc := range []struct {
		typ, state string
		want       bool
	}{
		{"charge.refunded", "pending", true},    // pending -> paid -> refund
		{"charge.refunded", "authorised", true}, // authorised -> paid
		{"charge.refunded", "failed", false},    // failed is terminal
		{"charge.refunded", "refunded", false},  // nothing leaves refunded
		{"AUTHORISATION", "paid", false},        // pending is never reached again
		{"payment_intent.succeeded", "paid", false},
	} {
		if got := m.CanStillApply(tc.typ, tc.state); got != tc.want {
			t.Errorf("CanStillApply(%s, %s) = %v, want %v", tc.typ, tc.state, got, tc.want)
		}
	}
}
