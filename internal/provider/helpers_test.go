package provider

import (
	"strings"
	"testing"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types/ref"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/expr"
	"github.com/hookkeeper/hookkeeper/internal/signature"
	"github.com/hookkeeper/hookkeeper/internal/signature/sigtest"
)

// Helpers the providers' _test.go files share: opening a vector or a signed request, and
// evaluating a provider's presets over what verified.

// vectorSigned is a vector as a signed request.
func vectorSigned(v vector) signed {
	return signed{spec: v.spec(), secret: v.Secret, req: v.request()}
}

// openSigned verifies s with its secret (and any extra secrets first) and returns what
// verified.
func openSigned(t *testing.T, s signed, extra ...signature.Secret) *signature.Verified {
	t.Helper()
	verified, err := mustNew(t, s.spec, append(extra, signature.Secret{Value: s.secret})...).Open(s.req)
	if err != nil {
		t.Fatalf("the request does not verify: %v", err)
	}
	return verified
}

// openVector verifies a vector with its own secret (and any extra secrets first).
func openVector(t *testing.T, v vector, extra ...signature.Secret) *signature.Verified {
	t.Helper()
	return openSigned(t, vectorSigned(v), extra...)
}

// oneDocument returns the one document of a verified request.
func oneDocument(t *testing.T, verified *signature.Verified) []byte {
	t.Helper()
	docs, err := verified.Documents()
	if err != nil || len(docs) != 1 {
		t.Fatalf("documents: %d, %v", len(docs), err)
	}
	return docs[0]
}

// oracleMAC is the HMAC of the concatenated parts under key, computed with crypto/hmac
// directly, apart from the verifiers: the tests sign requests with it.
var oracleMAC = sigtest.MAC

// presetResult is what one preset expression evaluated to, or why it did not.
type presetResult struct {
	val ref.Val
	err error
}

// presetResults are the results of the presets a provider sets, by field name (id, type,
// entityKey, amount, occurredAt).
type presetResults map[string]presetResult

// evaluatePresets evaluates a provider's preset expressions over one document as the
// extractor does: the variables of config.NewExtractorEnv (which this package cannot
// import): body, headers with lower-case names, and signed; and the result types the
// extractor allows each field. A preset that does not compile fails the test; one that
// does not evaluate keeps its error.
func evaluatePresets(t *testing.T, p *Provider, doc []byte, headers, signed map[string]string) presetResults {
	t.Helper()
	env, err := expr.NewEnv(
		cel.Variable("body", cel.DynType),
		cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("signed", cel.MapType(cel.StringType, cel.StringType)),
	)
	if err != nil {
		t.Fatal(err)
	}
	body, err := expr.DecodeJSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	lower := map[string]string{}
	for name, value := range headers {
		lower[strings.ToLower(name)] = value
	}
	vars := map[string]any{"body": body, "headers": lower, "signed": signed}
	str := []*cel.Type{cel.StringType, cel.IntType, cel.UintType}
	out := presetResults{}
	for _, f := range []struct {
		name, src string
		allowed   []*cel.Type
	}{
		{"id", p.Preset.ID, str},
		{"type", p.Preset.Type, str},
		{"entityKey", p.Preset.EntityKey, str},
		{"amount", p.Preset.Amount, []*cel.Type{cel.IntType, cel.UintType, cel.DoubleType, cel.StringType}},
		{"occurredAt", p.Preset.OccurredAt, []*cel.Type{cel.TimestampType, cel.IntType, cel.UintType, cel.DoubleType, cel.StringType}},
	} {
		if f.src == "" {
			continue
		}
		prg, err := expr.Compile(env, "preset."+f.name, f.src, f.allowed, nil)
		if err != nil {
			t.Fatalf("%s preset %s does not compile: %v", p.Type, f.name, err)
		}
		val, err := prg.Eval(vars)
		out[f.name] = presetResult{val: val, err: err}
	}
	return out
}

// presetsOfSigned verifies s and evaluates its provider's presets over its one document,
// with the request's headers (extra headers set on top of them, to show what an unsigned
// header changes) and the signed values; it returns what verified too.
func presetsOfSigned(t *testing.T, s signed, extra map[string]string) (presetResults, *signature.Verified) {
	t.Helper()
	p, _ := Lookup(s.spec.Type)
	verified := openSigned(t, s)
	headers := map[string]string{}
	for name, values := range s.req.Header {
		headers[strings.ToLower(name)] = values[0]
	}
	for name, value := range extra {
		headers[strings.ToLower(name)] = value
	}
	return evaluatePresets(t, p, oneDocument(t, verified), headers, verified.Signed()), verified
}

// raw is each result as its CEL value, or its error.
func (r presetResults) raw() map[string]any {
	out := map[string]any{}
	for name, res := range r {
		if res.err != nil {
			out[name] = res.err
			continue
		}
		out[name] = res.val.Value()
	}
	return out
}

// presetString and presetTime read an evaluated preset the way the extractor does; it
// must have evaluated.
func presetString(t *testing.T, r presetResults, name string) string {
	t.Helper()
	return presetAs(t, r, name, expr.AsString)
}

func presetTime(t *testing.T, r presetResults, name string) time.Time {
	t.Helper()
	return presetAs(t, r, name, expr.AsTime)
}

func presetAs[T any](t *testing.T, r presetResults, name string, as func(ref.Val) (T, error)) T {
	t.Helper()
	res := r[name]
	if res.err != nil {
		t.Fatalf("preset %s: %v", name, res.err)
	}
	v, err := as(res.val)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return v
}

// presetValues is what a provider's presets read from one verified request.
type presetValues struct {
	ID, Type, EntityKey string
	Amount              *int64
	OccurredAt          *time.Time
}

// values reads the results as the extractor does: id and type must evaluate, the others
// may be absent (unset, an error or null).
func (r presetResults) values(t *testing.T) presetValues {
	t.Helper()
	get := func(name string) ref.Val {
		if res, ok := r[name]; ok && res.err == nil && !expr.IsNull(res.val) {
			return res.val
		}
		return nil
	}
	text := func(name string, required bool) string {
		val := get(name)
		if val == nil {
			if required {
				t.Fatalf("the %s preset does not evaluate: %v", name, r[name].err)
			}
			return ""
		}
		s, err := expr.AsString(val)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return s
	}
	out := presetValues{ID: text("id", true), Type: text("type", true), EntityKey: text("entityKey", false)}
	if val := get("amount"); val != nil {
		if n, err := expr.AsInt(val); err == nil {
			out.Amount = &n
		}
	}
	if val := get("occurredAt"); val != nil {
		if ts, err := expr.AsTime(val); err == nil {
			out.OccurredAt = &ts
		}
	}
	return out
}

// presetValuesOf verifies s and reads its presets over the signed document; extra
// headers are set on top of the request's.
func presetValuesOf(t *testing.T, s signed, extra map[string]string) presetValues {
	t.Helper()
	r, _ := presetsOfSigned(t, s, extra)
	return r.values(t)
}

// presetsOverSignedVector verifies the named vector with its provider and reads its
// presets over the signed document; extra headers are set on top of the vector's.
func presetsOverSignedVector(t *testing.T, name string, extra map[string]string) presetValues {
	t.Helper()
	return presetValuesOf(t, vectorSigned(vectorNamed(t, name)), extra)
}

// expectPresetValues compares what the presets read with what the provider's payload
// says; a nil Amount or OccurredAt means none.
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

// headerCase is a value of one of a vector's headers, and the reason the request fails
// with (empty for success).
type headerCase struct {
	name, value string
	want        signature.Reason
}

// expectHeaderValues receives the vector's request with header set to each case's value.
func expectHeaderValues(t *testing.T, verifier signature.Verifier, v vector, header string, cases []headerCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := v.request()
			req.Header.Set(header, tc.value)
			expectReason(t, verifier.Verify(req), tc.want, v)
		})
	}
}

// toleranceCase is a request of a vector received at now, and the reason it fails with
// (empty for success).
type toleranceCase struct {
	name string
	now  time.Time
	want signature.Reason
}

// expectTolerance receives the vector's request at each case's time.
func expectTolerance(t *testing.T, verifier signature.Verifier, v vector, cases []toleranceCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := v.request()
			req.Now = tc.now
			expectReason(t, verifier.Verify(req), tc.want, v)
		})
	}
}

// expectDefaultTolerance receives the vector's request, signed at signed, around the
// edges of the default tolerance; step is the smallest step of the scheme's timestamp.
func expectDefaultTolerance(t *testing.T, verifier signature.Verifier, v vector, signed time.Time, step time.Duration) {
	t.Helper()
	expectTolerance(t, verifier, v, []toleranceCase{
		{"at the signed time", signed, ""},
		{"at the edge of the default tolerance", signed.Add(v1alpha1.DefaultTolerance), ""},
		{"just past the tolerance", signed.Add(v1alpha1.DefaultTolerance + step), signature.ReasonTimestampOutOfTolerance},
		{"just before a future timestamp's tolerance", signed.Add(-v1alpha1.DefaultTolerance - step), signature.ReasonTimestampOutOfTolerance},
		{"a day later (replay)", signed.Add(24 * time.Hour), signature.ReasonTimestampOutOfTolerance},
	})
}

// expectSpecTolerance checks that a spec.provider.tolerance of d is honoured: the vector's
// request, signed at signedAt, verifies d later and is out of tolerance a second after.
func expectSpecTolerance(t *testing.T, v vector, signedAt time.Time, d time.Duration) {
	t.Helper()
	spec := v.spec()
	spec.Tolerance = &metav1.Duration{Duration: d}
	narrow := mustNew(t, spec, signature.Secret{Value: v.Secret})
	req := v.request()
	req.Now = signedAt.Add(d + time.Second)
	expectReason(t, narrow.Verify(req), signature.ReasonTimestampOutOfTolerance, v)
	req.Now = signedAt.Add(d)
	expectReason(t, narrow.Verify(req), "", v)
}
