package provider

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

func init() {
	// Bodies of odd length are signed asymmetrically (v1a, Ed25519, a whpk_ key), the
	// others symmetrically (v1, HMAC-SHA256, a whsec_ key).
	customSigners[v1alpha1.ProviderStandardWebhooks] = func(t testing.TB, body []byte, now time.Time) signed {
		ts := strconv.FormatInt(now.Unix(), 10)
		msg := []byte(fuzzID + "." + ts + "." + string(body))
		req := signature.Request{Header: http.Header{}, Body: body, Method: http.MethodPost, Now: now}
		req.Header.Set(HeaderWebhookID, fuzzID)
		req.Header.Set(HeaderWebhookTimestamp, ts)
		spec := v1alpha1.ProviderSpec{Type: v1alpha1.ProviderStandardWebhooks}
		if len(body)%2 == 1 {
			private := ed25519.NewKeyFromSeed(fuzzSeed)
			req.Header.Set(HeaderWebhookSignature, "v1,bm90IHRoaXMgb25l v1a,"+base64.StdEncoding.EncodeToString(ed25519.Sign(private, msg)))
			return signed{spec: spec, secret: encodePublicKey(t, v1alpha1.PublicKeyWhpk, private.Public().(ed25519.PublicKey)), req: req}
		}
		req.Header.Set(HeaderWebhookSignature, "v1a,bm90IHRoaXMgb25l v1,"+base64.StdEncoding.EncodeToString(oracleMAC(sha256.New, []byte(fuzzHMACKey), string(msg))))
		return signed{spec: spec, secret: encodeKey(t, v1alpha1.KeyWhsec, []byte(fuzzHMACKey)), req: req}
	}
}

// TestStandardWebhooksKeysOfBothKinds verifies v1 and v1a signatures with an endpoint
// that holds a whsec_ secret and a whpk_ public key, as during a move from symmetric to
// asymmetric signing, and a v1a signature never verifies under the HMAC key.
func TestStandardWebhooksKeysOfBothKinds(t *testing.T) {
	now := time.Unix(1767225600, 0)
	signer := customSigners[v1alpha1.ProviderStandardWebhooks]
	// Even-length bodies are signed with the whsec_ key, odd-length ones with Ed25519.
	symmetric, asymmetric := signer(t, []byte(`{"a":12}`), now), signer(t, []byte(`{"a":1}`), now)
	if !strings.HasPrefix(symmetric.secret, "whsec_") || !strings.HasPrefix(asymmetric.secret, "whpk_") {
		t.Fatalf("the signer's key kinds: %q, %q", symmetric.secret[:6], asymmetric.secret[:5])
	}
	both, err := NewVerifier(symmetric.spec, []signature.Secret{{Value: symmetric.secret}, {Value: asymmetric.secret}})
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]signed{"v1": symmetric, "v1a": asymmetric} {
		if _, err := both.Open(s.req); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	onlyHMAC, err := NewVerifier(symmetric.spec, []signature.Secret{{Value: symmetric.secret}})
	if err != nil {
		t.Fatal(err)
	}
	if err := onlyHMAC.Verify(asymmetric.req); signature.ReasonOf(err) != signature.ReasonMismatch && signature.ReasonOf(err) != signature.ReasonMalformedHeader {
		t.Fatalf("a v1a request under a whsec_ key only: %v", err)
	}
	if _, err := NewVerifier(symmetric.spec, []signature.Secret{{Value: "whpk_AAAA"}}); err == nil {
		t.Fatal("a whpk_ key of the wrong length was accepted")
	}
}
