package convergence

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// The model: a small interpreter of a sample's state machine (on, from, to, emit, in
// spec order) with the guards the samples use reproduced in Go. It is the reference the
// receiver's results are compared with; it shares no code with internal/statemachine.

// modelEvent is one provider event of an entity's history.
type modelEvent struct {
	Index int    // position in the history, 0-based
	ID    string // the provider's event id as the receiver derives it
	Type  string
	// Success is Adyen's success flag ("true" or "false"); unused for Stripe.
	Success    string
	Amount     int64
	OccurredAt time.Time
	// PSP is the Adyen pspReference of this item (Stripe: the object id).
	PSP string
}

func (e modelEvent) String() string {
	s := fmt.Sprintf("#%d %s %s at %s", e.Index, e.ID, e.Type, e.OccurredAt.Format(time.RFC3339))
	if e.Success != "" {
		s += " success=" + e.Success
	}
	return s
}

// guardFunc is a sample's CEL guard, in Go.
type guardFunc func(ev modelEvent, entityAmount int64) bool

// knownGuards are the guards of the two samples, by their CEL text. A sample that gains
// another guard makes the test fail until its Go twin is written here.
var knownGuards = map[string]guardFunc{
	"":                                     func(modelEvent, int64) bool { return true },
	"event.amount == entity.amount":        func(ev modelEvent, amount int64) bool { return ev.Amount == amount },
	"string(event.body.success) == 'true'": func(ev modelEvent, _ int64) bool { return ev.Success == "true" },
	"string(event.body.success) == 'false'": func(ev modelEvent, _ int64) bool {
		return ev.Success == "false"
	},
	// The orders sample's send-test transition applies to the reserved order
	// hookkeeper-test only, which is never one of the checker's orders.
	`entity.key == "hookkeeper-test"`: func(modelEvent, int64) bool { return false },
}

type modelTransition struct {
	Name, To, Emit string
	On, From       []string
	guard          guardFunc
}

// model is one sample's state machine.
type model struct {
	Initial     string
	Transitions []modelTransition
}

func newModel(sm v1alpha1.StateMachineSpec) (*model, error) {
	m := &model{Initial: sm.Initial}
	for _, t := range sm.Transitions {
		g, ok := knownGuards[strings.TrimSpace(t.Guard)]
		if !ok {
			return nil, fmt.Errorf("transition %s: guard %q has no Go model in test/convergence (add it to knownGuards)", t.Name, t.Guard)
		}
		m.Transitions = append(m.Transitions, modelTransition{
			Name: t.Name, To: t.To, Emit: t.Emit, On: t.On, From: t.From, guard: g,
		})
	}
	return m, nil
}

// decide is the transition ev takes from state (the first in spec order whose type,
// from state and guard match), or nil.
func (m *model) decide(state string, ev modelEvent, entityAmount int64) *modelTransition {
	for i := range m.Transitions {
		t := &m.Transitions[i]
		if slices.Contains(t.On, ev.Type) && slices.Contains(t.From, state) && t.guard(ev, entityAmount) {
			return t
		}
	}
	return nil
}

// outcome is what applying a history in provider order gives.
type outcome struct {
	State   string
	Effects []string // emitted types, in order
	// Path is the state before each event, then the final state (len(history)+1).
	Path []string
}

// run applies a history in provider order.
func (m *model) run(h []modelEvent, entityAmount int64) outcome {
	o := outcome{State: m.Initial, Path: []string{m.Initial}}
	for _, ev := range h {
		if t := m.decide(o.State, ev, entityAmount); t != nil {
			o.State = t.To
			if t.Emit != "" {
				o.Effects = append(o.Effects, t.Emit)
			}
		}
		o.Path = append(o.Path, o.State)
	}
	return o
}

// ambiguous reports whether some event of the history could apply earlier than its own
// position: with s_k the state after the first k events, event i (0-based, applying
// from s_i) has a transition whose guard holds from some s_k with k < i. Delivered
// before the events in between, such an event may apply there, and the events that
// precede it in provider order are then stale: no receiver can emit the in-order
// effects for every delivery order, only the final state can converge.
func (m *model) ambiguous(h []modelEvent, entityAmount int64) (bool, string) {
	path := m.run(h, entityAmount).Path
	for i, ev := range h {
		for k := range i {
			if t := m.decide(path[k], ev, entityAmount); t != nil {
				return true, fmt.Sprintf("event #%d (%s) could apply from %s (state before event #%d) by %s", i, ev.Type, path[k], k, t.Name)
			}
		}
	}
	return false, ""
}

// generate draws a history the machine allows in provider order: a random walk in which
// every event applies (transition chosen among those leaving the state, weighted by
// 1 + the transitions leaving its target; the walk stops at a state with none, or with
// probability stop after each event). attrs
// lists the candidate attributes of an event (e.g. Adyen success true/false); the first
// candidate that makes the chosen transition the machine's decision is used.
func (m *model) generate(rng *rand.Rand, amount int64, stop float64, attrs []string) []modelEvent {
	state := m.Initial
	var h []modelEvent
	for {
		type choice struct {
			t       *modelTransition
			typ     string
			success string
		}
		var choices []choice
		for i := range m.Transitions {
			t := &m.Transitions[i]
			if !slices.Contains(t.From, state) {
				continue
			}
			for _, typ := range t.On {
				for _, a := range attrs {
					ev := modelEvent{Type: typ, Success: a, Amount: amount}
					if m.decide(state, ev, amount) == t {
						choices = append(choices, choice{t, typ, a})
						break
					}
				}
			}
		}
		if len(choices) == 0 {
			return h
		}
		// Weighted towards transitions into states that lead further, so that long
		// histories (where order matters most) are common.
		total := 0
		weights := make([]int, len(choices))
		for i, c := range choices {
			weights[i] = 1
			for _, t := range m.Transitions {
				if slices.Contains(t.From, c.t.To) {
					weights[i]++
				}
			}
			total += weights[i]
		}
		pick := rng.IntN(total)
		c := choices[0]
		for i, w := range weights {
			if pick < w {
				c = choices[i]
				break
			}
			pick -= w
		}
		h = append(h, modelEvent{Index: len(h), Type: c.typ, Success: c.success, Amount: amount})
		state = c.t.To
		if rng.Float64() < stop {
			return h
		}
	}
}
