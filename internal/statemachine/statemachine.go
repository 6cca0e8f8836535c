// Package statemachine compiles a WebhookEndpoint's stateMachine into a transition table
// with compiled CEL guards, and decides what one event does to one entity.
//
// Decide applies these rules in order (docs/architecture.md, "Deciding"):
//
//  1. no transition lists the event type in `on`                -> Unhandled
//  2. the event's occurredAt is older than the entity's last applied event
//     -> IgnoredState, detail "stale": its moment has passed
//  3. no transition of the type lists the entity's state in `from`:
//     - a state some transition of the type starts from is reachable from the entity's
//     state (the graph of every transition, guards aside)    -> Park: it may apply later
//     - none is                                                 -> IgnoredState: it never can
//  4. the transitions of the type that start from the entity's state are tried in spec
//     order: the first whose guard holds applies                -> Apply;
//     a guard that fails to evaluate stops the decision         -> GuardError
//     (a later transition never applies because an earlier guard could not be read);
//     every guard false                                         -> GuardFailed
//
// Several transitions may share an event type (e.g. Adyen AUTHORISATION with
// `event.body.success == "true"` to paid, and with "false" to failed).
//
// Guards see three variables:
//
//	event  {id, type, entityKey, amount, occurredAt, body, headers}
//	entity {key, state, amount}
//	live   the provider's current object when the transition re-fetches, else null
//
// amount fields are int (minor units) or null; occurredAt is a timestamp or null.
package statemachine

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/event"
	"github.com/hookkeeper/hookkeeper/internal/expr"
)

// Outcome is what becomes of one event: one vocabulary from Decide to the stored
// receipt (webhook_events.outcome, receipt.Outcome is this type) and the metrics'
// outcome label. Decide returns the outcomes below; the receipt adds the two it decides
// without the machine (receipt.OutcomeExpired, receipt.OutcomeUnmatched).
type Outcome string

// The outcomes Decide returns.
const (
	Apply        Outcome = "applied"
	IgnoredState Outcome = "ignored_state"
	GuardFailed  Outcome = "guard_failed"
	GuardError   Outcome = "guard_error"
	Park         Outcome = "parked"
	Unhandled    Outcome = "unhandled"
)

// DetailStale is the detail of an IgnoredState decision caused by an old occurredAt.
const DetailStale = "stale"

// Transition is one compiled transition.
type Transition struct {
	Name string
	On   []string
	From []string
	To   string
	// Emit is the outbox event type; empty emits nothing.
	Emit string
	// Refetch is set when spec.provider.refetch lists this transition: its guard expects
	// `live`.
	Refetch bool
	guard   *expr.Program
}

// Machine is a compiled state machine. It is immutable and safe for concurrent use.
type Machine struct {
	initial     string
	states      []string
	transitions []*Transition
	byType      map[string][]*Transition
	// reachable[s] is the set of states reachable from s by one or more transitions,
	// guards aside.
	reachable map[string]map[string]bool
}

// Entity is the locked entity row as the transaction read it.
type Entity struct {
	Key    string
	State  string
	Amount *int64
	// LastEventAt is the occurredAt of the last applied event, nil when unknown.
	LastEventAt *time.Time
}

// Input is what Decide looks at.
type Input struct {
	Event  event.Event
	Entity Entity
	// Live is the re-fetched provider object (JSON-shaped Go values) or nil.
	Live any
}

// Decision is Decide's answer.
type Decision struct {
	Outcome Outcome
	// Transition is the applied transition (Apply), or the one whose guard failed to
	// evaluate (GuardError).
	Transition *Transition
	// Detail explains IgnoredState and GuardFailed decisions for the receipt's detail
	// column; it names transitions and states, never payload values.
	Detail string
}

// GuardFields are the fields of the guard variables, checked at compile time.
var GuardFields = map[string][]string{
	"event":  {"id", "type", "entityKey", "amount", "occurredAt", "body", "headers"},
	"entity": {"key", "state", "amount"},
}

// NewGuardEnv returns the CEL environment guards compile in.
func NewGuardEnv() (*cel.Env, error) {
	return expr.NewEnv(
		cel.Variable("event", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("entity", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("live", cel.DynType),
	)
}

// Compile checks spec and compiles its guards. refetch names the transitions of
// spec.provider.refetch.transitions. Every problem is reported (joined), each naming its
// field, e.g. `spec.stateMachine.transitions[capture].guard: undeclared reference to
// 'entty' (at 1:1)`.
func Compile(spec v1alpha1.StateMachineSpec, refetch []string) (*Machine, error) {
	const base = "spec.stateMachine"
	var errs []error
	m := &Machine{initial: spec.Initial, byType: map[string][]*Transition{}}

	if len(spec.States) == 0 {
		errs = append(errs, expr.Errorf(base+".states", "at least one state is required"))
	}
	for i, s := range spec.States {
		switch {
		case s == "":
			errs = append(errs, expr.Errorf(fmt.Sprintf("%s.states[%d]", base, i), "state name is empty"))
		case slices.Contains(m.states, s):
			errs = append(errs, expr.Errorf(fmt.Sprintf("%s.states[%d]", base, i), "state %q is listed twice", s))
		default:
			m.states = append(m.states, s)
		}
	}
	if !slices.Contains(m.states, spec.Initial) {
		errs = append(errs, expr.Errorf(base+".initial", "%q is not one of stateMachine.states", spec.Initial))
	}
	if len(spec.Transitions) == 0 {
		errs = append(errs, expr.Errorf(base+".transitions", "at least one transition is required"))
	}

	env, err := NewGuardEnv()
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for i, t := range spec.Transitions {
		field := fmt.Sprintf("%s.transitions[%s]", base, t.Name)
		if t.Name == "" {
			field = fmt.Sprintf("%s.transitions[%d]", base, i)
			errs = append(errs, expr.Errorf(field+".name", "transition name is empty"))
		} else if names[t.Name] {
			errs = append(errs, expr.Errorf(field+".name", "transition name %q is used twice", t.Name))
		}
		names[t.Name] = true
		if len(t.On) == 0 {
			errs = append(errs, expr.Errorf(field+".on", "at least one event type is required"))
		}
		for _, typ := range t.On {
			if typ == "" {
				errs = append(errs, expr.Errorf(field+".on", "event type is empty"))
			}
		}
		if len(t.From) == 0 {
			errs = append(errs, expr.Errorf(field+".from", "at least one state is required"))
		}
		for _, f := range t.From {
			if !slices.Contains(m.states, f) {
				errs = append(errs, expr.Errorf(field+".from", "%q is not one of stateMachine.states", f))
			}
		}
		if !slices.Contains(m.states, t.To) {
			errs = append(errs, expr.Errorf(field+".to", "%q is not one of stateMachine.states", t.To))
		}
		ct := &Transition{
			Name: t.Name, On: t.On, From: t.From, To: t.To, Emit: t.Emit,
			Refetch: slices.Contains(refetch, t.Name),
		}
		if strings.TrimSpace(t.Guard) != "" {
			prg, err := expr.Compile(env, field+".guard", t.Guard, []*cel.Type{cel.BoolType}, GuardFields)
			if err != nil {
				errs = append(errs, err)
			}
			ct.guard = prg
		}
		m.transitions = append(m.transitions, ct)
		for _, typ := range t.On {
			m.byType[typ] = append(m.byType[typ], ct)
		}
	}
	for i, name := range refetch {
		if !names[name] {
			errs = append(errs, expr.Errorf(fmt.Sprintf("spec.provider.refetch.transitions[%d]", i), "%q is not a transition of stateMachine.transitions", name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	m.reachable = reachability(m.states, m.transitions)
	return m, nil
}

// reachability computes, for every state, the states reachable from it by one or more
// transitions (a breadth-first walk per state; machines have at most 32 states).
func reachability(states []string, transitions []*Transition) map[string]map[string]bool {
	next := map[string][]string{}
	for _, t := range transitions {
		for _, f := range t.From {
			next[f] = append(next[f], t.To)
		}
	}
	out := make(map[string]map[string]bool, len(states))
	for _, s := range states {
		seen := map[string]bool{}
		queue := slices.Clone(next[s])
		for len(queue) > 0 {
			q := queue[0]
			queue = queue[1:]
			if seen[q] {
				continue
			}
			seen[q] = true
			queue = append(queue, next[q]...)
		}
		out[s] = seen
	}
	return out
}

// CanStillApply reports whether an event of eventType could apply to an entity in state
// from some state reachable from it: some transition of the type starts from such a
// state. Guards are not evaluated: they may hold by then.
func (m *Machine) CanStillApply(eventType, state string) bool {
	for _, t := range m.byType[eventType] {
		for _, f := range t.From {
			if m.reachable[state][f] {
				return true
			}
		}
	}
	return false
}

// LeavesInitial reports whether some transition triggered by eventType starts from the
// initial state: whether an event of the type can be an entity's first applied event.
func (m *Machine) LeavesInitial(eventType string) bool {
	for _, t := range m.byType[eventType] {
		if slices.Contains(t.From, m.initial) {
			return true
		}
	}
	return false
}

// Initial is the state of an entity created by onUnmatched Create.
func (m *Machine) Initial() string { return m.initial }

// States lists the states in spec order.
func (m *Machine) States() []string { return slices.Clone(m.states) }

// Transitions lists the compiled transitions in spec order.
func (m *Machine) Transitions() []*Transition { return slices.Clone(m.transitions) }

// Handles reports whether some transition is triggered by eventType. Events no
// transition handles need no entity lookup.
func (m *Machine) Handles(eventType string) bool { return len(m.byType[eventType]) > 0 }

// NeedsLive reports whether a transition triggered by eventType re-fetches, so the caller
// should supply Input.Live.
func (m *Machine) NeedsLive(eventType string) bool {
	for _, t := range m.byType[eventType] {
		if t.Refetch {
			return true
		}
	}
	return false
}

// Decide applies the rules of the package documentation.
func (m *Machine) Decide(in Input) Decision {
	candidates := m.byType[in.Event.Type]
	if len(candidates) == 0 {
		return Decision{Outcome: Unhandled, Detail: "no transition handles this event type"}
	}
	if in.Event.OccurredAt != nil && in.Entity.LastEventAt != nil && in.Event.OccurredAt.Before(*in.Entity.LastEventAt) {
		return Decision{Outcome: IgnoredState, Detail: DetailStale}
	}
	var allowed []*Transition
	for _, t := range candidates {
		if slices.Contains(t.From, in.Entity.State) {
			allowed = append(allowed, t)
		}
	}
	if len(allowed) == 0 {
		if m.CanStillApply(in.Event.Type, in.Entity.State) {
			return Decision{Outcome: Park, Detail: fmt.Sprintf("no transition for this event type starts from state %q yet; one starts from a state reachable from it", in.Entity.State)}
		}
		return Decision{Outcome: IgnoredState, Detail: fmt.Sprintf("no transition for this event type starts from state %q or any state reachable from it", in.Entity.State)}
	}
	var failed []string
	for _, t := range allowed {
		if t.guard == nil {
			return Decision{Outcome: Apply, Transition: t}
		}
		ok, err := t.evalGuard(in)
		if err != nil {
			return Decision{Outcome: GuardError, Transition: t, Detail: fmt.Sprintf("%s: guard failed to evaluate: %v", t.Name, err)}
		}
		if ok {
			return Decision{Outcome: Apply, Transition: t}
		}
		failed = append(failed, t.Name+": guard is false")
	}
	return Decision{Outcome: GuardFailed, Detail: strings.Join(failed, "; ")}
}

func (t *Transition) evalGuard(in Input) (bool, error) {
	live := in.Live
	if live == nil {
		live = types.NullValue
	}
	out, err := t.guard.Eval(map[string]any{
		"event":  EventVars(in.Event),
		"entity": entityVars(in.Entity),
		"live":   live,
	})
	if err != nil {
		return false, err
	}
	return expr.AsBool(out)
}

// EventVars is the `event` variable of a guard.
func EventVars(ev event.Event) map[string]any {
	vars := map[string]any{
		"id":         ev.ID,
		"type":       ev.Type,
		"entityKey":  ev.EntityKey,
		"amount":     types.NullValue,
		"occurredAt": types.NullValue,
		"body":       ev.Body,
		"headers":    ev.Headers,
	}
	if ev.Amount != nil {
		vars["amount"] = *ev.Amount
	}
	if ev.OccurredAt != nil {
		vars["occurredAt"] = *ev.OccurredAt
	}
	if ev.Body == nil {
		vars["body"] = map[string]any{}
	}
	if ev.Headers == nil {
		vars["headers"] = map[string]string{}
	}
	return vars
}

func entityVars(e Entity) map[string]any {
	vars := map[string]any{"key": e.Key, "state": e.State, "amount": types.NullValue}
	if e.Amount != nil {
		vars["amount"] = *e.Amount
	}
	return vars
}
