package provider

import (
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

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
