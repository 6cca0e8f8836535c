package provider

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// zoomValidationToken is HMAC-SHA256 of the zoom-url-validation-computed vector's
// plainToken under its secret, hex, computed with openssl:
//
//	printf '%s' qgg8vlvZRS6UYooatFL8Aw | openssl dgst -sha256 -hmac hkZoomSecretToken0123456789 -hex
const zoomValidationToken = "4e5a724d92d71703ede9dcbf84e19a6e4eb1c9388c7a9e578b5cfa7466fe1999"

func TestZoomURLValidation(t *testing.T) {
	p, _ := Lookup(ProviderZoom)
	v := vectorNamed(t, "zoom-url-validation-computed")

	check := func(t *testing.T, verified *signature.Verified) {
		t.Helper()
		res := expectAnswered(t, p, verified, "endpoint.url_validation")
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
		expectForgeriesUnanswered(t, p, v, "validation request", map[string]func(*signature.Request){
			"unsigned":        func(r *signature.Request) { r.Header.Del("x-zm-signature") },
			"bad signature":   v.tamperSignature,
			"changed token":   v.tamperBody,
			"stale timestamp": func(r *signature.Request) { r.Now = r.Now.Add(time.Hour) },
		})
		verifier := mustNew(t, v.spec(), signature.Secret{Value: v.Secret})
		// A body signed with another secret: the attacker's own Zoom app.
		req := v.request()
		req.Header.Set("x-zm-signature", "v0="+hex.EncodeToString(oracleMAC(sha256.New, []byte("an attacker's secret token"), "v0:1767225600:"+v.Body)))
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

// TestZoomPresets: the signed timestamp reaches the presets, and a user event's entity
// (the signed vector's event is a row of TestPresetsOverVectors).
func TestZoomPresets(t *testing.T) {
	p, _ := Lookup(ProviderZoom)
	_, verified := presetsOfSigned(t, vectorSigned(vectorNamed(t, "zoom-computed")), nil)
	if _, ok := verified.Signed()[signature.SignedTimestamp]; !ok {
		t.Error("the signed timestamp is not in signed")
	}

	// A user event has no uuid: the entity is the object id.
	user := evaluatePresets(t, p, []byte(`{"event":"user.updated","event_ts":1767225599000,"payload":{"account_id":"A","object":{"id":"KDcuGIm1QgePTO8WbOqwIQ"}}}`), nil,
		map[string]string{signature.SignedDigest: "sha256:00"})
	if got := presetString(t, user, "entityKey"); got != "KDcuGIm1QgePTO8WbOqwIQ" {
		t.Errorf("user entityKey %q", got)
	}
}
