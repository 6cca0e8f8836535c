package expr

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
)

func testEnv(t testing.TB) *cel.Env {
	t.Helper()
	env, err := NewEnv(cel.Variable("body", cel.DynType), cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)))
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func compile(t testing.TB, src string) *Program {
	t.Helper()
	p, err := Compile(testEnv(t), "spec.test", src, nil, nil)
	if err != nil {
		t.Fatalf("compile %q: %v", src, err)
	}
	return p
}

// largeBody is a payload with n items, decoded as the receiver decodes a body.
func largeBody(t testing.TB, n int) map[string]any {
	t.Helper()
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`{"id":%d,"name":"item-%d"}`, i, i)
	}
	v, err := DecodeJSON([]byte(`{"data":{"object":{"id":"pi_1","amount":4999}},"items":[` + strings.Join(items, ",") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	return v.(map[string]any)
}

// TestRunawayExpressionsStopAtTheCostLimit is the attacker's side: an expression that
// loops over what the payload holds (a provider's body is as large as maxBodyBytes
// lets it be) is metered, and stops at CostLimit with an error instead of running on.
func TestRunawayExpressionsStopAtTheCostLimit(t *testing.T) {
	t.Parallel()
	body := largeBody(t, 3000)
	for _, src := range []string{
		`body.items.all(x, body.items.all(y, x.id >= 0 && y.id >= 0))`,
		`body.items.map(x, body.items.filter(y, y.id == x.id)).size() > 0`,
		`body.items.exists(x, body.items.exists(y, y.id < 0))`,
	} {
		p := compile(t, src)
		if !p.tracked {
			t.Errorf("%s: not metered", src)
		}
		_, err := p.Eval(map[string]any{"body": body, "headers": map[string]string{}})
		if err == nil || !strings.Contains(err.Error(), "cost limit exceeded") {
			t.Errorf("%s over 3,000 items: err = %v, want the cost limit exceeded", src, err)
		}
	}
}

// TestBoundedExpressionsRunUnmetered: expressions whose cost CEL bounds statically within
// CostLimit (field reads, comparisons, arithmetic, presence tests) are not metered, and
// evaluate as before.
func TestBoundedExpressionsRunUnmetered(t *testing.T) {
	t.Parallel()
	body := largeBody(t, 3)
	vars := map[string]any{"body": body, "headers": map[string]string{"x-event-key": "repo:push"}}
	for src, want := range map[string]any{
		`body.data.object.id`:                                         "pi_1",
		`body.data.object.amount == 4999`:                             true,
		`int(body.data.object.amount) / 100`:                          int64(49),
		`has(body.data.object.email) ? 1 : 2`:                         int64(2),
		`body.?data.?object.?missing.orValue("none")`:                 "none",
		`headers["x-event-key"] == "repo:push"`:                       true,
		`body.data.object.amount > 1000 && body.data.object.id != ""`: true,
	} {
		p := compile(t, src)
		if p.tracked {
			t.Errorf("%s: metered, want a static bound", src)
		}
		got, err := p.Eval(vars)
		if err != nil {
			t.Errorf("%s: %v", src, err)
			continue
		}
		if got.Value() != want {
			t.Errorf("%s = %v (%T), want %v", src, got.Value(), got.Value(), want)
		}
	}
	// A loop or a size-dependent call over the payload stays metered.
	for _, src := range []string{`body.items.exists(x, x.id == 1)`, `string(body.data.object.id).contains("pi")`} {
		if p := compile(t, src); !p.tracked {
			t.Errorf("%s: not metered", src)
		}
	}
}

// BenchmarkEvalFieldRead compares one extraction expression's evaluation metered and
// unmetered: go test ./internal/expr -bench EvalFieldRead -benchmem
func BenchmarkEvalFieldRead(b *testing.B) {
	const src = `body.data.object.metadata.client_txn_id`
	env := testEnv(b)
	checked, iss := env.Compile(src)
	if iss.Err() != nil {
		b.Fatal(iss.Err())
	}
	v, err := DecodeJSON([]byte(`{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","amount":4999,"metadata":{"client_txn_id":"txn-1"}}}}`))
	if err != nil {
		b.Fatal(err)
	}
	vars := map[string]any{"body": v, "headers": map[string]string{}}
	for _, tc := range []struct {
		name string
		opts []cel.ProgramOption
	}{
		{"metered", []cel.ProgramOption{cel.CostLimit(CostLimit), cel.EvalOptions(cel.OptOptimize)}},
		{"unmetered", []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize)}},
	} {
		prg, err := env.Program(checked, tc.opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if _, _, err := prg.Eval(vars); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeJSON decodes a Stripe event of the bench's shape, as the receiver
// decodes every verified body: go test ./internal/expr -bench DecodeJSON -benchmem
func BenchmarkDecodeJSON(b *testing.B) {
	body := []byte(`{"id":"evt_bench_1","object":"event","api_version":"2025-10-29.clover","created":1764650000,` +
		`"type":"payment_intent.succeeded","livemode":false,"pending_webhooks":1,"data":{"object":{"id":"pi_evt_bench_1",` +
		`"object":"payment_intent","amount":4999,"amount_received":4999,"currency":"inr","status":"succeeded",` +
		`"metadata":{"client_txn_id":"rx-1"}}}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeJSON(body); err != nil {
			b.Fatal(err)
		}
	}
}
