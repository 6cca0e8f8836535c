package provider

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types/ref"

	"github.com/hookkeeper/hookkeeper/internal/expr"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// zoomValidationToken is HMAC-SHA256 of the zoom-url-validation-computed vector's
// plainToken under its secret, hex, computed with openssl:
//
//	printf '%s' qgg8vlvZRS6UYooatFL8Aw | openssl dgst -sha256 -hmac hkZoomSecretToken0123456789 -hex
const zoomValidationToken = "4e5a724d92d71703ede9dcbf84e19a6e4eb1c9388c7a9e578b5cfa7466fe1999"

// evaluatePresets evaluates a provider's preset expressions over one signed document as
// the extractor does (the variables of config.NewExtractorEnv, which this package cannot
// import), and returns the values of the presets that are set.
func evaluatePresets(t *testing.T, p *Provider, doc []byte, signed map[string]string) map[string]ref.Val {
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
	vars := map[string]any{"body": body, "headers": map[string]string{}, "signed": signed}
	out := map[string]ref.Val{}
	for name, src := range map[string]string{
		"id": p.Preset.ID, "type": p.Preset.Type, "entityKey": p.Preset.EntityKey,
		"amount": p.Preset.Amount, "occurredAt": p.Preset.OccurredAt,
	} {
		if src == "" {
			continue
		}
		prg, err := expr.Compile(env, "preset."+name, src, nil, nil)
		if err != nil {
			t.Fatalf("%s preset %s does not compile: %v", p.Type, name, err)
		}
		v, err := prg.Eval(vars)
		if err != nil {
			t.Fatalf("%s preset %s: %v", p.Type, name, err)
		}
		out[name] = v
	}
	return out
}

// presetString and presetTime read evaluated presets the way the extractor does.
func presetString(t *testing.T, vals map[string]ref.Val, name string) string {
	t.Helper()
	s, err := expr.AsString(vals[name])
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return s
}

func presetTime(t *testing.T, vals map[string]ref.Val, name string) time.Time {
	t.Helper()
	ts, err := expr.AsTime(vals[name])
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return ts
}

// openVector verifies a vector with its own secret (and any extra secrets first).
func openVector(t *testing.T, v vector, extra ...signature.Secret) *signature.Verified {
	t.Helper()
	verified, err := mustNew(t, v.spec(), append(extra, signature.Secret{Value: v.Secret})...).Open(v.request())
	if err != nil {
		t.Fatalf("%s: %v", v.Name, err)
	}
	return verified
}

func TestZoomURLValidation(t *testing.T) {
	p, _ := Lookup(ProviderZoom)
	v := vectorNamed(t, "zoom-url-validation-computed")

	check := func(t *testing.T, verified *signature.Verified) {
		t.Helper()
		res, ok := p.Handshake(verified, http.Header{})
		if !ok {
			t.Fatal("a verified endpoint.url_validation was not answered")
		}
		if res.Status != http.StatusOK || res.ContentType != "application/json" {
			t.Fatalf("answer %d %q", res.Status, res.ContentType)
		}
		var got map[string]string
		if err := json.Unmarshal(res.Body, &got); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"plainToken": "qgg8vlvZRS6UYooatFL8Aw", "encryptedToken": zoomValidationToken}
		if len(got) != 2 || got["plainToken"] != want["plainToken"] || got["encryptedToken"] != want["encryptedToken"] {
			t.Fatalf("answer %s, want %v", res.Body, want)
		}
	}
	t.Run("verified", func(t *testing.T) { check(t, openVector(t, v)) })
	t.Run("the key that verified answers, during a rotation", func(t *testing.T) {
		check(t, openVector(t, v, signature.Secret{Value: "the-new-zoom-secret-token"}))
	})

	t.Run("forged validations are never answered", func(t *testing.T) {
		verifier := mustNew(t, v.spec(), signature.Secret{Value: v.Secret})
		forgeries := map[string]func(*signature.Request){
			"unsigned":        func(r *signature.Request) { r.Header.Del("x-zm-signature") },
			"bad signature":   v.tamperSignature,
			"changed token":   v.tamperBody,
			"stale timestamp": func(r *signature.Request) { r.Now = r.Now.Add(time.Hour) },
		}
		for name, forge := range forgeries {
			req := v.request()
			forge(&req)
			verified, err := verifier.Open(req)
			if err == nil {
				t.Fatalf("%s: the validation request verified", name)
			}
			// The receiver answers 401 on the error; even were Handshake called on what
			// Open returned, it would not answer.
			if _, ok := p.Handshake(verified, http.Header{}); ok {
				t.Fatalf("%s: Handshake answered an unverified request", name)
			}
		}
		// A body signed with another secret: the attacker's own Zoom app.
		m := hmac.New(sha256.New, []byte("an attacker's secret token"))
		m.Write([]byte("v0:1767225600:" + v.Body))
		req := v.request()
		req.Header.Set("x-zm-signature", "v0="+hex.EncodeToString(m.Sum(nil)))
		if got := signature.ReasonOf(verifier.Verify(req)); got != signature.ReasonMismatch {
			t.Fatalf("a validation signed with another secret: %q", got)
		}
	})

	t.Run("only a url_validation body is answered", func(t *testing.T) {
		if _, ok := p.Handshake(openVector(t, vectorNamed(t, "zoom-computed")), http.Header{}); ok {
			t.Fatal("a meeting.started event was answered as a validation")
		}
		if _, ok := p.Handshake(&signature.Verified{}, http.Header{}); ok {
			t.Fatal("the zero Verified was answered")
		}
		for _, body := range []string{
			`{"event":"endpoint.url_validation","payload":{}}`,
			`{"event":"endpoint.url_validation","payload":{"plainToken":""}}`,
			`{"event":"meeting.started","payload":{"plainToken":"abc"}}`,
		} {
			// A verified document without an HMAC key behind it (as a custom
			// verifier would return) cannot answer either: MAC has no key.
			doc := signature.NewVerified(time.Unix(1767225600, 0), []json.RawMessage{json.RawMessage(body)}, nil)
			if _, ok := p.Handshake(doc, http.Header{}); ok {
				t.Fatalf("%s was answered", body)
			}
		}
		noKey := signature.NewVerified(time.Unix(1767225600, 0), []json.RawMessage{json.RawMessage(v.Body)}, nil)
		if _, ok := p.Handshake(noKey, http.Header{}); ok {
			t.Fatal("a validation verified by no HMAC key was answered")
		}
	})
}

func TestZoomPresets(t *testing.T) {
	p, _ := Lookup(ProviderZoom)
	v := vectorNamed(t, "zoom-computed")
	verified := openVector(t, v)
	docs, err := verified.Documents()
	if err != nil || len(docs) != 1 {
		t.Fatalf("documents: %v", err)
	}
	vals := evaluatePresets(t, p, docs[0], verified.Signed())
	if got, want := presetString(t, vals, "id"), signature.BodyDigest([]byte(v.Body)); got != want {
		t.Errorf("id %q, want the body digest %q", got, want)
	}
	if got := presetString(t, vals, "type"); got != "meeting.started" {
		t.Errorf("type %q", got)
	}
	if got := presetString(t, vals, "entityKey"); got != "4444AAAiAAAAAiAiAiiAii==" {
		t.Errorf("entityKey %q", got)
	}
	if got := presetTime(t, vals, "occurredAt"); !got.Equal(time.Unix(1767225599, 0)) {
		t.Errorf("occurredAt %s", got)
	}
	if _, ok := verified.Signed()[signature.SignedTimestamp]; !ok {
		t.Error("the signed timestamp is not in signed")
	}

	// A user event has no uuid: the entity is the object id.
	user := evaluatePresets(t, p, []byte(`{"event":"user.updated","event_ts":1767225599000,"payload":{"account_id":"A","object":{"id":"KDcuGIm1QgePTO8WbOqwIQ"}}}`),
		map[string]string{signature.SignedDigest: "sha256:00"})
	if got := presetString(t, user, "entityKey"); got != "KDcuGIm1QgePTO8WbOqwIQ" {
		t.Errorf("user entityKey %q", got)
	}
}
