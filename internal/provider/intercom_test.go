package provider

import (
	"testing"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// Intercom's header is `sha1=<hex>`: the bare hex, or another algorithm's prefix, is not
// an Intercom signature.
func TestIntercomSignaturePrefix(t *testing.T) {
	v := vectorNamed(t, "intercom-computed")
	verifier := mustNew(t, v1alpha1.ProviderSpec{Type: ProviderIntercom}, signature.Secret{Value: v.Secret})
	hexMAC := v.Headers["X-Hub-Signature"][len("sha1="):]
	for value, want := range map[string]signature.Reason{
		"sha1=" + hexMAC:   "",
		hexMAC:             signature.ReasonMalformedHeader,
		"sha256=" + hexMAC: signature.ReasonMalformedHeader,
	} {
		req := v.request()
		req.Header.Set("X-Hub-Signature", value)
		expectReason(t, verifier.Verify(req), want, v)
	}
}
