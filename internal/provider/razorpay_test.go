package provider

import (
	"testing"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types/ref"

	"github.com/hookkeeper/hookkeeper/internal/expr"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// presetValues is what a provider's presets read from one verified request.
type presetValues struct {
	ID, Type, EntityKey string
	Amount              *int64
	OccurredAt          *time.Time
}

// presetsOverSignedVector verifies the named vector with its provider and evaluates the
// provider's presets over the signed document the way the extractor does (variables
// body, headers and signed; the same result types): id and type must evaluate, the
// others may be absent. extra headers are added to (or replace) the vector's, to show
// what an unsigned header changes.
func presetsOverSignedVector(t *testing.T, name string, extra map[string]string) presetValues {
	t.Helper()
	v := vectorNamed(t, name)
	p, _ := Lookup(v.spec().Type)
	verified, err := mustNew(t, v.spec(), signature.Secret{Value: v.Secret}).Open(v.request())
	if err != nil {
		t.Fatalf("the vector does not verify: %v", err)
	}
	docs, err := verified.Documents()
	if err != nil || len(docs) != 1 {
		t.Fatalf("documents: %d, %v", len(docs), err)
	}
	body, err := expr.DecodeJSON(docs[0])
	if err != nil {
		t.Fatal(err)
	}
	headers := map[string]string{}
	for k, val := range v.Headers {
		headers[k] = val
	}
	for k, val := range extra {
		headers[k] = val
	}
	env, err := expr.NewEnv(
		cel.Variable("body", cel.DynType),
		cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("signed", cel.MapType(cel.StringType, cel.StringType)),
	)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]any{"body": body, "headers": headers, "signed": verified.Signed()}
	eval := func(field, src string, allowed []*cel.Type) ref.Val {
		if src == "" {
			return nil
		}
		prg, err := expr.Compile(env, "preset "+field, src, allowed, nil)
		if err != nil {
			t.Fatal(err)
		}
		val, err := prg.Eval(vars)
		if err != nil || expr.IsNull(val) {
			return nil
		}
		return val
	}
	str := []*cel.Type{cel.StringType, cel.IntType, cel.UintType}
	text := func(field, src string, required bool) string {
		val := eval(field, src, str)
		if val == nil {
			if required {
				t.Fatalf("the %s preset does not evaluate on %s", field, name)
			}
			return ""
		}
		s, err := expr.AsString(val)
		if err != nil {
			t.Fatalf("%s: %v", field, err)
		}
		return s
	}
	out := presetValues{
		ID:        text("id", p.Preset.ID, true),
		Type:      text("type", p.Preset.Type, true),
		EntityKey: text("entityKey", p.Preset.EntityKey, false),
	}
	if val := eval("amount", p.Preset.Amount, []*cel.Type{cel.IntType, cel.UintType, cel.DoubleType, cel.StringType}); val != nil {
		if n, err := expr.AsInt(val); err == nil {
			out.Amount = &n
		}
	}
	if val := eval("occurredAt", p.Preset.OccurredAt, []*cel.Type{cel.TimestampType, cel.IntType, cel.UintType, cel.DoubleType, cel.StringType}); val != nil {
		if ts, err := expr.AsTime(val); err == nil {
			out.OccurredAt = &ts
		}
	}
	return out
}

// expectPresetValues compares what the presets read with what the provider's payload says.
func expectPresetValues(t *testing.T, got, want presetValues) {
	t.Helper()
	if got.ID != want.ID || got.Type != want.Type || got.EntityKey != want.EntityKey {
		t.Errorf("id/type/entityKey = %q/%q/%q, want %q/%q/%q", got.ID, got.Type, got.EntityKey, want.ID, want.Type, want.EntityKey)
	}
	if (got.Amount == nil) != (want.Amount == nil) || got.Amount != nil && *got.Amount != *want.Amount {
		t.Errorf("amount = %v, want %v", presetDeref(got.Amount), presetDeref(want.Amount))
	}
	if (got.OccurredAt == nil) != (want.OccurredAt == nil) || got.OccurredAt != nil && !got.OccurredAt.Equal(*want.OccurredAt) {
		t.Errorf("occurredAt = %v, want %v", presetDeref(got.OccurredAt), presetDeref(want.OccurredAt))
	}
}

func presetDeref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func presetPtr[T any](v T) *T { return &v }

// Razorpay signs nothing but the body and its body has no event id: the id is the body
// digest, so a replay under another (unsigned) X-Razorpay-Event-Id is a duplicate.
func TestRazorpayPresets(t *testing.T) {
	v := vectorNamed(t, "razorpay-sdk-python")
	want := presetValues{
		ID:         signature.BodyDigest([]byte(v.Body)),
		Type:       "payment.authorized",
		EntityKey:  "order_100000000order",
		Amount:     presetPtr[int64](1000000),
		OccurredAt: presetPtr(time.Unix(1400826760, 0)),
	}
	expectPresetValues(t, presetsOverSignedVector(t, v.Name, nil), want)
	replayed := presetsOverSignedVector(t, v.Name, map[string]string{"x-razorpay-event-id": "EvReplay0000000001"})
	expectPresetValues(t, replayed, want)
}

// The Netbanking payment.captured sample of Razorpay's docs, as the SDK-checked vector.
func TestRazorpayPresetsOnDocsSample(t *testing.T) {
	v := vectorNamed(t, "razorpay-sdk-go")
	expectPresetValues(t, presetsOverSignedVector(t, v.Name, nil), presetValues{
		ID:         signature.BodyDigest([]byte(v.Body)),
		Type:       "payment.captured",
		EntityKey:  "order_DESlLckIVRkHWj",
		Amount:     presetPtr[int64](100),
		OccurredAt: presetPtr(time.Unix(1567674606, 0)),
	})
}
