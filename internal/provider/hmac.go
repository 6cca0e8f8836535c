package provider

import (
	"hash"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// HMAC is any provider whose scheme spec.provider.hmac describes field by field.
func init() {
	register(Provider{
		Type: v1alpha1.ProviderHMAC,
		Verifier: func(spec v1alpha1.ProviderSpec, secrets []signature.Secret, tolerance time.Duration) (signature.Verifier, error) {
			scheme, _ := hmacScheme(spec)
			newHash, keyEncoding := hmacKey(spec.HMAC)
			return newSchemeVerifier(scheme, newHash, keyEncoding, secrets, tolerance)
		},
		Preset: Preset{ID: `body.id`, Type: `body.type`},
		Sign: func(spec v1alpha1.ProviderSpec, secret string, d Delivery) (Delivery, error) {
			scheme, _ := hmacScheme(spec)
			newHash, keyEncoding := hmacKey(spec.HMAC)
			return signWithScheme(scheme, newHash, keyEncoding, secret, d)
		},
		Sample: genericSample,
		Doc: Doc{
			Scheme:    "HMAC (SHA1, SHA256, SHA512; hex or base64) as `spec.provider.hmac` describes it",
			Signed:    "what `signedContent` names: the body, and the `{timestamp}`, `{id}`, `{method}`, `{url}` it uses",
			Timestamp: "the `{timestamp}` (a header, or a key of a composite header), when used",
			Key:       "`keyEncoding`: Raw, Base64, Hex or Whsec",
			Source:    "[HMAC](#hmac-any-other-provider)",
		},
	})
}

// hmacKey is the hash and key encoding spec.provider.hmac names, with the defaults for
// those it leaves out; it verifies and signs alike.
func hmacKey(h *v1alpha1.HMACSpec) (func() hash.Hash, v1alpha1.KeyEncoding) {
	algorithm, keyEncoding := h.Algorithm, h.KeyEncoding
	if algorithm == "" {
		algorithm = v1alpha1.DefaultHMACAlgorithm
	}
	if keyEncoding == "" {
		keyEncoding = v1alpha1.DefaultHMACKeyEncoding
	}
	return hashes[algorithm], keyEncoding
}

// genericSample is the sample of the generic schemes (HMAC, Ed25519): their presets
// read body.id and body.type; an entity key expression of the endpoint's own reads
// data.id only if it was written for it (send-test says so, and takes --body).
func genericSample(e SampleEvent) (Delivery, error) {
	return jsonDelivery(map[string]any{
		"id": e.ID, "type": e.Type, "created": e.Time.Unix(), "data": map[string]any{"id": e.EntityKey},
	})
}
