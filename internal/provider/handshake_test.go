package provider

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// The providers that answer a handshake instead of recording it (Discord's PING, Zoom's
// endpoint.url_validation, Twitch EventSub's challenge): a verified handshake is answered
// as the provider asks, a forged one never is, and an event is not a handshake.

// expectAnswered returns the provider's answer to a verified handshake request; what
// names the request.
func expectAnswered(t *testing.T, p *Provider, verified *signature.Verified, what string) Response {
	t.Helper()
	res, ok := p.Handshake(verified, http.Header{})
	if !ok {
		t.Fatalf("a verified %s was not answered", what)
	}
	return res
}

// expectForgeriesUnanswered changes the vector's handshake request with each forgery and
// checks that it does not verify, and that Handshake would not answer what Open returned
// (the receiver answers 401 on the error); what names the handshake request.
func expectForgeriesUnanswered(t *testing.T, p *Provider, v vector, what string, forgeries map[string]func(*signature.Request)) {
	t.Helper()
	verifier := mustNew(t, v.spec(), signature.Secret{Value: v.Secret})
	for name, forge := range forgeries {
		req := v.request()
		forge(&req)
		verified, err := verifier.Open(req)
		if err == nil {
			t.Fatalf("%s: the %s verified", name, what)
		}
		if _, ok := p.Handshake(verified, http.Header{}); ok {
			t.Fatalf("%s: Handshake answered an unverified %s", name, what)
		}
	}
}

func TestDiscordPing(t *testing.T) {
	p, _ := Lookup(ProviderDiscord)
	v := vectorNamed(t, "discord-ping-computed")

	res := expectAnswered(t, p, openVector(t, v), "PING")
	if res.Status != http.StatusNoContent || len(res.Body) != 0 {
		t.Fatalf("answer %d %q, want 204 with no body", res.Status, res.Body)
	}

	attacker := ed25519.NewKeyFromSeed([]byte("an attacker's discord key seed!!"))
	expectForgeriesUnanswered(t, p, v, "PING", map[string]func(*signature.Request){
		"unsigned":      func(r *signature.Request) { r.Header.Del("X-Signature-Ed25519") },
		"bad signature": v.tamperSignature,
		"another key": func(r *signature.Request) {
			r.Header.Set("X-Signature-Ed25519", hex.EncodeToString(ed25519.Sign(attacker, []byte(r.Header.Get("X-Signature-Timestamp")+string(r.Body)))))
		},
		"replayed later": func(r *signature.Request) { r.Now = r.Now.Add(time.Hour) },
	})

	if _, ok := p.Handshake(openVector(t, vectorNamed(t, "discord-event-computed")), http.Header{}); ok {
		t.Fatal("an event was answered as a PING")
	}
	for _, body := range []string{`{"type":1}`, `{"type":"0"}`, `{"Type":0}`, `{"version":1}`, `{"type":0.5}`} {
		doc := signature.NewVerified(time.Unix(1767225600, 0), []json.RawMessage{json.RawMessage(body)}, nil)
		if _, ok := p.Handshake(doc, http.Header{}); ok {
			t.Fatalf("%s was answered as a PING", body)
		}
	}
	if p.Ack.Status != http.StatusNoContent {
		t.Fatalf("Discord asks for 204 on events, the ack is %d", p.Ack.Status)
	}
}

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

func TestTwitchEventSubChallenge(t *testing.T) {
	p, _ := Lookup(ProviderTwitchEventSub)
	v := vectorNamed(t, "twitcheventsub-verification-computed")

	res := expectAnswered(t, p, openVector(t, v), "webhook_callback_verification")
	if res.Status != http.StatusOK || res.ContentType != "text/plain" || string(res.Body) != "pogchamp-kappa-360noscope-vohiyo" {
		t.Fatalf("answer %d %q %q", res.Status, res.ContentType, res.Body)
	}

	expectForgeriesUnanswered(t, p, v, "challenge", map[string]func(*signature.Request){
		"unsigned":      func(r *signature.Request) { r.Header.Del(twitchSignatureHeader) },
		"bad signature": v.tamperSignature,
		"other secret": func(r *signature.Request) {
			r.Header.Set(twitchSignatureHeader, twitchSign("an attacker's eventsub secret", r.Header.Get(twitchIDHeader), r.Header.Get(twitchTimestampHeader), r.Body))
		},
		"changed challenge": v.tamperBody,
		"replayed later":    func(r *signature.Request) { r.Now = r.Now.Add(time.Hour) },
	})

	// Notifications and revocations are events, whatever the unsigned message type says.
	for _, name := range []string{"twitcheventsub-notification-computed", "twitcheventsub-revocation-computed"} {
		verified := openVector(t, vectorNamed(t, name))
		if _, ok := p.Handshake(verified, http.Header{"Twitch-Eventsub-Message-Type": {"webhook_callback_verification"}}); ok {
			t.Fatalf("%s was answered as a challenge", name)
		}
	}
}
