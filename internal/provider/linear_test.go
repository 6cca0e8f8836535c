package provider

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/cel-go/cel"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/expr"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

func init() {
	// Linear's bodies always carry webhookTimestamp, and the verifier demands it, so the
	// fuzz body travels inside a Linear-shaped envelope; any changed byte of that body
	// must still fail the MAC.
	customSigners[ProviderLinear] = func(t testing.TB, body []byte, now time.Time) signed {
		inner, err := json.Marshal(string(body))
		if err != nil {
			t.Fatal(err)
		}
		envelope := []byte(`{"action":"create","type":"Issue","data":{"id":"fuzz","body":` + string(inner) +
			`},"webhookTimestamp":` + strconv.FormatInt(now.UnixMilli(), 10) + `}`)
		return signed{
			spec:   v1alpha1.ProviderSpec{Type: ProviderLinear},
			secret: fuzzHMACKey,
			req:    linearRequest(fuzzHMACKey, envelope, now),
		}
	}
}

// linearRequest signs body as Linear does, with crypto/hmac apart from the verifier.
func linearRequest(secret string, body []byte, now time.Time) signature.Request {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	h := http.Header{}
	h.Set(HeaderLinearSignature, hex.EncodeToString(m.Sum(nil)))
	h.Set("Linear-Delivery", "234d1a4e-b617-4388-90fe-adc3633d6b72")
	h.Set("Linear-Event", "Issue")
	return signature.Request{Header: h, Body: body, Method: http.MethodPost, Now: now}
}

func TestLinearPresets(t *testing.T) {
	v := vectorNamed(t, "linear-sdk")
	want := evaluatedPresets{
		ID:         "Comment:create:2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9:2020-01-23T12:53:18.084Z",
		Type:       "Comment.create",
		EntityKey:  "2174add1-f7c8-44e3-bbf3-2d60b5ea8bc9",
		OccurredAt: time.Date(2020, 1, 23, 12, 53, 18, 84e6, time.UTC),
	}
	expectPresets(t, evalPresets(t, vectorSigned(v), nil), want)
	// Linear-Delivery is not signed: another value changes nothing.
	expectPresets(t, evalPresets(t, vectorSigned(v), map[string]string{"linear-delivery": "other"}), want)

	t.Run("a retry sent later keeps the id", func(t *testing.T) {
		now := time.Unix(v.Now, 0).Add(time.Hour)
		retry := strings.Replace(v.Body, `"webhookTimestamp":1677611643000`, `"webhookTimestamp":`+strconv.FormatInt(now.UnixMilli(), 10), 1)
		s := signed{spec: v.spec(), secret: v.Secret, req: linearRequest(v.Secret, []byte(retry), now)}
		expectPresets(t, evalPresets(t, s, nil), want)
	})
	t.Run("a payload without data.id falls back to the body digest", func(t *testing.T) {
		now := time.Unix(1772366400, 0)
		body := []byte(`{"action":"revoked","type":"OAuthApp","createdAt":"2026-03-01T12:00:00.000Z","oauthClientId":"c1",` +
			`"organizationId":"o1","webhookId":"w1","webhookTimestamp":` + strconv.FormatInt(now.UnixMilli(), 10) + `}`)
		s := signed{spec: v.spec(), secret: v.Secret, req: linearRequest(v.Secret, body, now)}
		expectPresets(t, evalPresets(t, s, nil), evaluatedPresets{
			ID: signature.BodyDigest(body), Type: "OAuthApp.revoked", OccurredAt: now,
		})
	})
}

// TestLinearTimestamp covers the signed body timestamp: it bounds replays like a signed
// timestamp header, is read only after the MAC verified, and must be present.
func TestLinearTimestamp(t *testing.T) {
	v := vectorNamed(t, "linear-sdk")
	sent := time.UnixMilli(1677611643000)
	verifier := mustNew(t, v.spec(), signature.Secret{Value: v.Secret})

	t.Run("tolerance", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			now  time.Time
			want signature.Reason
		}{
			{"at the sent time", sent, ""},
			{"at the edge of the default tolerance", sent.Add(v1alpha1.DefaultTolerance), ""},
			{"just past it", sent.Add(v1alpha1.DefaultTolerance + time.Millisecond), signature.ReasonTimestampOutOfTolerance},
			{"a future timestamp", sent.Add(-v1alpha1.DefaultTolerance - time.Second), signature.ReasonTimestampOutOfTolerance},
			{"a day later (replay)", sent.Add(24 * time.Hour), signature.ReasonTimestampOutOfTolerance},
		} {
			t.Run(tc.name, func(t *testing.T) {
				req := v.request()
				req.Now = tc.now
				expectReason(t, verifier.Verify(req), tc.want, v)
			})
		}
	})
	t.Run("Linear's one minute", func(t *testing.T) {
		spec := v.spec()
		spec.Tolerance = &metav1.Duration{Duration: time.Minute}
		narrow := mustNew(t, spec, signature.Secret{Value: v.Secret})
		req := v.request()
		req.Now = sent.Add(61 * time.Second)
		expectReason(t, narrow.Verify(req), signature.ReasonTimestampOutOfTolerance, v)
		req.Now = sent.Add(time.Minute)
		expectReason(t, narrow.Verify(req), "", v)
	})
	t.Run("signed.timestamp is the body's time in seconds", func(t *testing.T) {
		verified, err := verifier.Open(v.request())
		if err != nil {
			t.Fatal(err)
		}
		if got := verified.Signed()[signature.SignedTimestamp]; got != "1677611643" {
			t.Fatalf("signed.timestamp = %q", got)
		}
	})
	t.Run("an unsigned change to the timestamp is a mismatch, not a fresh delivery", func(t *testing.T) {
		req := v.request()
		req.Now = sent.Add(24 * time.Hour)
		req.Body = []byte(strings.Replace(v.Body, "1677611643000", strconv.FormatInt(req.Now.UnixMilli(), 10), 1))
		expectReason(t, verifier.Verify(req), signature.ReasonMismatch, v)
	})

	now := time.Unix(v.Now, 0)
	ms := strconv.FormatInt(sent.UnixMilli(), 10)
	for _, tc := range []struct {
		name, body string
		want       signature.Reason
	}{
		{"no webhookTimestamp", `{"action":"create","type":"Issue","data":{"id":"i1"}}`, signature.ReasonMissingHeader},
		{"null webhookTimestamp", `{"type":"Issue","webhookTimestamp":null}`, signature.ReasonMissingHeader},
		{"a string", `{"type":"Issue","webhookTimestamp":"` + ms + `"}`, signature.ReasonMalformedHeader},
		{"an exponent", `{"type":"Issue","webhookTimestamp":1.677611643e12}`, signature.ReasonMalformedHeader},
		{"a fraction", `{"type":"Issue","webhookTimestamp":` + ms + `.5}`, signature.ReasonMalformedHeader},
		{"negative", `{"type":"Issue","webhookTimestamp":-` + ms + `}`, signature.ReasonMalformedHeader},
		{"in seconds, not ms", `{"type":"Issue","webhookTimestamp":1677611643}`, signature.ReasonTimestampOutOfTolerance},
		{"twice", `{"webhookTimestamp":` + ms + `,"type":"Issue","webhookTimestamp":` + ms + `}`, signature.ReasonMalformedHeader},
		{"not JSON", `webhookTimestamp=` + ms, signature.ReasonMalformedHeader},
		{"an array", `[{"webhookTimestamp":` + ms + `}]`, signature.ReasonMalformedHeader},
		{"trailing data", `{"webhookTimestamp":` + ms + `} {}`, signature.ReasonMalformedHeader},
		{"well formed", `{"type":"Issue","webhookTimestamp":` + ms + `}`, ""},
	} {
		t.Run("correctly signed, "+tc.name, func(t *testing.T) {
			expectReason(t, verifier.Verify(linearRequest(v.Secret, []byte(tc.body), now)), tc.want, v)
		})
	}
}

// evaluatedPresets is what a provider's presets read from one verified request; used by
// the Bitbucket, Clerk, GitLab, Linear and Resend tests.
type evaluatedPresets struct {
	ID, Type, EntityKey string
	OccurredAt          time.Time // zero when absent
}

// vectorSigned is a vector as a signed request.
func vectorSigned(v vector) signed {
	return signed{spec: v.spec(), secret: v.Secret, req: v.request()}
}

// evalPresets verifies s and evaluates its provider's presets over the verified document
// as the extractor does (variables body, headers with lower-case names, signed). extra
// headers are set on top of the request's, to show what an unsigned header changes.
func evalPresets(t *testing.T, s signed, extra map[string]string) evaluatedPresets {
	t.Helper()
	p, _ := Lookup(s.spec.Type)
	verified, err := mustNew(t, s.spec, signature.Secret{Value: s.secret}).Open(s.req)
	if err != nil {
		t.Fatalf("the request does not verify: %v", err)
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
	for name, values := range s.req.Header {
		headers[strings.ToLower(name)] = values[0]
	}
	for name, value := range extra {
		headers[strings.ToLower(name)] = value
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
	text := func(field, src string, required bool) string {
		if src == "" {
			return ""
		}
		prg, err := expr.Compile(env, field, src, []*cel.Type{cel.StringType, cel.IntType, cel.UintType}, nil)
		if err != nil {
			t.Fatal(err)
		}
		val, err := prg.Eval(vars)
		if err == nil && !expr.IsNull(val) {
			if s, err := expr.AsString(val); err == nil {
				return s
			}
		}
		if required {
			t.Fatalf("the %s preset does not evaluate: %v", field, err)
		}
		return ""
	}
	out := evaluatedPresets{
		ID:        text("id", p.Preset.ID, true),
		Type:      text("type", p.Preset.Type, true),
		EntityKey: text("entityKey", p.Preset.EntityKey, false),
	}
	if p.Preset.OccurredAt != "" {
		prg, err := expr.Compile(env, "occurredAt", p.Preset.OccurredAt,
			[]*cel.Type{cel.TimestampType, cel.IntType, cel.UintType, cel.DoubleType, cel.StringType}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if val, err := prg.Eval(vars); err == nil && !expr.IsNull(val) {
			if ts, err := expr.AsTime(val); err == nil {
				out.OccurredAt = ts
			}
		}
	}
	return out
}

func expectPresets(t *testing.T, got, want evaluatedPresets) {
	t.Helper()
	if got.ID != want.ID || got.Type != want.Type || got.EntityKey != want.EntityKey || !got.OccurredAt.Equal(want.OccurredAt) {
		t.Errorf("presets = %+v\nwant      %+v", got, want)
	}
}
