package provider

import (
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// Ed25519 is any provider that signs with an Ed25519 private key, described field by
// field in spec.provider.ed25519; each signing secret holds a public key.
func init() {
	register(Provider{
		Type: v1alpha1.ProviderEd25519,
		Verifier: func(spec v1alpha1.ProviderSpec, secrets []signature.Secret, tolerance time.Duration) (signature.Verifier, error) {
			scheme, _ := schemeFromSpec("spec.provider.ed25519", spec.Ed25519.SchemeSpec, spec.SignedURL)
			encoding := spec.Ed25519.KeyEncoding
			if encoding == "" {
				encoding = v1alpha1.DefaultPublicKeyEncoding
			}
			keys, err := signature.NewEd25519Keyring(encoding, secrets)
			if err != nil {
				return nil, err
			}
			return signature.NewSchemeVerifier(scheme, keys, tolerance)
		},
		Preset:     Preset{ID: `body.id`, Type: `body.type`},
		CannotSign: "type Ed25519 endpoints hold the sender's public key, which verifies but cannot sign",
		Sample:     genericSample,
		Doc: Doc{
			Scheme:    "Ed25519 (hex or base64) as `spec.provider.ed25519` describes it",
			Signed:    "what `signedContent` names, as for HMAC",
			Timestamp: "the `{timestamp}`, when used",
			Key:       "the provider's public key: `keyEncoding` Hex, Base64 or Whpk (`whpk_` + base64)",
			Source:    "[Ed25519](#ed25519-any-other-provider)",
		},
	})
}
