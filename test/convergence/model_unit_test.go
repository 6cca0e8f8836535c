package convergence

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/testsupport"
)

// TestModel checks the checker's own model on the samples, without a receiver: the
// in-order run, the ambiguity rule and the generator.
func TestModel(t *testing.T) {
	root := testsupport.RepoRoot(t)
	load := func(rel string) *model {
		s, err := loadSample(root, rel)
		if err != nil {
			t.Fatal(err)
		}
		m, err := newModel(s.we.Spec.StateMachine)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	orders, adyen := load(ordersSample), load(adyenSample)
	ev := func(typ, success string) modelEvent { return modelEvent{Type: typ, Success: success, Amount: 500} }

	cases := []struct {
		name      string
		m         *model
		h         []modelEvent
		state     string
		effects   []string
		ambiguous bool
	}{
		{"orders capture then refund", orders,
			[]modelEvent{ev("payment_intent.succeeded", ""), ev("charge.refunded", "")},
			"refunded", []string{"order.paid", "order.refunded"}, false},
		// Not a history the generator draws (the refund does not apply in order), but
		// ambiguous by the rule: delivered capture first, the refund would apply.
		{"orders refund first is ignored in order", orders,
			[]modelEvent{ev("charge.refunded", ""), ev("payment_intent.succeeded", "")},
			"paid", []string{"order.paid"}, true},
		// A failed attempt, then a retry that succeeds: paid in any order, but delivered
		// success first, the older failure no longer applies and its effect is not emitted.
		{"orders failed then retried capture is ambiguous", orders,
			[]modelEvent{ev("payment_intent.payment_failed", ""), ev("payment_intent.succeeded", "")},
			"paid", []string{"order.payment_failed", "order.paid"}, true},
		{"orders capture guard false on another amount", orders,
			[]modelEvent{{Type: "payment_intent.succeeded", Amount: 499}},
			"payment_pending", nil, false},
		{"adyen authorise capture refund", adyen,
			[]modelEvent{ev("AUTHORISATION", "true"), ev("CAPTURE", "true"), ev("REFUND", "true")},
			"refunded", []string{"payment.authorised", "payment.captured", "payment.refunded"}, false},
		{"adyen refused", adyen, []modelEvent{ev("AUTHORISATION", "false")}, "refused", []string{"payment.refused"}, false},
		{"adyen authorise then cancel is ambiguous", adyen,
			[]modelEvent{ev("AUTHORISATION", "true"), ev("CANCELLATION", "true")},
			"cancelled", []string{"payment.authorised", "payment.cancelled"}, true},
		// A refused payment paid again under the same merchantReference: authorised in
		// any order, but payment.refused is emitted only when the refusal arrives first.
		{"adyen refused then authorised is ambiguous", adyen,
			[]modelEvent{ev("AUTHORISATION", "false"), ev("AUTHORISATION", "true")},
			"authorised", []string{"payment.refused", "payment.authorised"}, true},
		{"adyen cancel alone", adyen, []modelEvent{ev("CANCELLATION", "true")}, "cancelled", []string{"payment.cancelled"}, false},
	}
	for _, tc := range cases {
		o := tc.m.run(tc.h, 500)
		amb, why := tc.m.ambiguous(tc.h, 500)
		if o.State != tc.state || !slices.Equal(o.Effects, tc.effects) || amb != tc.ambiguous {
			t.Errorf("%s: state %s effects %v ambiguous %v (%s), want %s %v %v",
				tc.name, o.State, o.Effects, amb, why, tc.state, tc.effects, tc.ambiguous)
		}
	}

	// Generated histories apply event by event, in strictly increasing time; the only
	// ambiguous orders histories are a failure followed by the capture from failed.
	rng := rand.New(rand.NewPCG(1, 2))
	for _, m := range []*machine{{name: "orders", model: orders, attrs: []string{""}}, {name: "adyen", model: adyen, attrs: []string{"true", "false"}}} {
		m.generate(rng, 500, time.Now())
		lengths := map[int]int{}
		for _, e := range m.entities {
			lengths[len(e.history)]++
			if len(e.history) == 0 {
				t.Fatalf("%s: empty history", e)
			}
			path := e.expected.Path
			for i, h := range e.history {
				if path[i] == path[i+1] {
					t.Errorf("%s: event %s does not apply in provider order", e, h)
				}
				if i > 0 && !h.OccurredAt.After(e.history[i-1].OccurredAt) {
					t.Errorf("%s: occurredAt not increasing at %s", e, h)
				}
			}
			if m.name == "orders" && e.ambiguous && !failedThenCaptured(e.history) {
				t.Errorf("%s: orders history classed ambiguous: %s", e, e.why)
			}
		}
		t.Logf("%s: history lengths %v", m.name, lengths)
	}
}

// failedThenCaptured reports whether an orders history holds a payment failure directly
// followed by the capture.
func failedThenCaptured(h []modelEvent) bool {
	for i := 1; i < len(h); i++ {
		if h[i-1].Type == "payment_intent.payment_failed" && h[i].Type == "payment_intent.succeeded" {
			return true
		}
	}
	return false
}

// The check of an ambiguous history's effects.
func TestSubsequence(t *testing.T) {
	inOrder := []string{"order.payment_failed", "order.paid", "order.refunded"}
	for _, tc := range []struct {
		got  []string
		want bool
	}{
		{nil, true},
		{[]string{"order.paid", "order.refunded"}, true},
		{inOrder, true},
		{[]string{"order.refunded", "order.paid"}, false},        // out of order
		{[]string{"order.paid", "order.paid"}, false},            // twice
		{[]string{"order.paid", "order.cancelled"}, false},       // not emitted in order
		{append(slices.Clone(inOrder), "order.refunded"), false}, // one too many
	} {
		if got := subsequence(tc.got, inOrder); got != tc.want {
			t.Errorf("subsequence(%v) = %v, want %v", tc.got, got, tc.want)
		}
	}
}
