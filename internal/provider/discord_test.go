package provider

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// discordVectorSeed is the Ed25519 seed the discord-*-computed vectors were signed with
// (with openssl; see their source). This test re-derives their public key with
// crypto/ed25519, so the vectors agree with two implementations.
const discordVectorSeed = "hookkeeper discord vector seed!!"

func TestDiscordVectorKey(t *testing.T) {
	private := ed25519.NewKeyFromSeed([]byte(discordVectorSeed))
	public := hex.EncodeToString(private.Public().(ed25519.PublicKey))
	for _, name := range []string{"discord-event-computed", "discord-ping-computed"} {
		v := vectorNamed(t, name)
		if v.Secret != public {
			t.Fatalf("%s: public key %s, the seed gives %s", name, v.Secret, public)
		}
		sig := hex.EncodeToString(ed25519.Sign(private, []byte(v.Headers["X-Signature-Timestamp"]+v.Body)))
		if sig != v.Headers["X-Signature-Ed25519"] {
			t.Fatalf("%s: crypto/ed25519 signs %s, the vector has %s", name, sig, v.Headers["X-Signature-Ed25519"])
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

// TestDiscordPresets: the other shapes of Discord's events (the signed vector's event is
// a row of TestPresetsOverVectors).
func TestDiscordPresets(t *testing.T) {
	p, _ := Lookup(ProviderDiscord)
	digest := map[string]string{signature.SignedDigest: "sha256:00"}
	entitlement := evaluatePresets(t, p, []byte(`{"version":1,"application_id":"1","type":1,"event":{"type":"ENTITLEMENT_CREATE","timestamp":"2024-10-18T18:41:21.109604+00:00","data":{"id":"1234505980407808808","user_id":"111178765189277770","sku_id":"1"}}}`), nil, digest)
	if got := presetString(t, entitlement, "entityKey"); got != "111178765189277770" {
		t.Errorf("entitlement entityKey %q", got)
	}
	if got := presetTime(t, entitlement, "occurredAt"); !got.Equal(time.Date(2024, 10, 18, 18, 41, 21, 109604000, time.UTC)) {
		t.Errorf("an offset timestamp: %s", got)
	}
	message := evaluatePresets(t, p, []byte(`{"version":1,"application_id":"1","type":1,"event":{"type":"LOBBY_MESSAGE_DELETE","timestamp":"2025-08-05T21:44:09.412957","data":{"id":"1402406637632884857","lobby_id":"1402399883394285659"}}}`), nil, digest)
	if got := presetString(t, message, "entityKey"); got != "1402406637632884857" {
		t.Errorf("message entityKey %q", got)
	}
}
