package provider

import (
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// The presets are configurations of the generic scheme, so a user with a provider that
// hookkeeper has no preset for can write the same thing by hand. This test writes the
// GitHub, Shopify, Slack, Stripe and Standard Webhooks presets as HMACSpecs and checks that both
// verifiers reach the same verdict, with the same signature.Reason, on the published vectors and on
// every tampered variant of them.
func TestHMACSpecExpressesPresets(t *testing.T) {
	sha256Hex := func(s v1alpha1.SchemeSpec) v1alpha1.HMACSpec {
		return v1alpha1.HMACSpec{SchemeSpec: s, Algorithm: v1alpha1.HMACSHA256, KeyEncoding: v1alpha1.KeyRaw}
	}
	whsec := sha256Hex(v1alpha1.SchemeSpec{
		Header: "webhook-signature", Prefix: "v1,", Separator: " ", Encoding: v1alpha1.EncodingBase64,
		SignedContent:   "{id}.{timestamp}.{body}",
		TimestampHeader: "webhook-timestamp", IDHeader: "webhook-id",
	})
	whsec.KeyEncoding = v1alpha1.KeyWhsec
	equivalents := map[string]v1alpha1.HMACSpec{
		"github-docs": sha256Hex(v1alpha1.SchemeSpec{
			Header: "X-Hub-Signature-256", Prefix: "sha256=", Encoding: v1alpha1.EncodingHex, SignedContent: "{body}",
		}),
		"shopify-computed": sha256Hex(v1alpha1.SchemeSpec{Header: "X-Shopify-Hmac-Sha256", Encoding: v1alpha1.EncodingBase64}),
		"slack-docs": sha256Hex(v1alpha1.SchemeSpec{
			Header: "X-Slack-Signature", Prefix: "v0=", Encoding: v1alpha1.EncodingHex,
			SignedContent: "v0:{timestamp}:{body}", TimestampHeader: "X-Slack-Request-Timestamp",
		}),
		"stripe-computed": sha256Hex(v1alpha1.SchemeSpec{
			Header: "Stripe-Signature", Encoding: v1alpha1.EncodingHex, SignedContent: "{timestamp}.{body}",
			Composite: &v1alpha1.CompositeSpec{TimestampKey: "t", SignatureKey: "v1"},
		}),
		"standardwebhooks-reference": whsec,
	}
	for name, hmacSpec := range equivalents {
		t.Run(name, func(t *testing.T) {
			v := vectorNamed(t, name)
			preset := mustNew(t, v.spec(), signature.Secret{Value: v.Secret})
			generic := mustNew(t, v1alpha1.ProviderSpec{Type: v1alpha1.ProviderHMAC, HMAC: &hmacSpec}, signature.Secret{Value: v.Secret})

			variants := map[string]func(*signature.Request){
				"as published":      func(*signature.Request) {},
				"tampered body":     v.tamperBody,
				"tampered sig":      v.tamperSignature,
				"no signature":      func(r *signature.Request) { r.Header.Del(v.SignatureHeader) },
				"empty signature":   func(r *signature.Request) { r.Header.Set(v.SignatureHeader, "") },
				"bad prefix":        func(r *signature.Request) { r.Header.Set(v.SignatureHeader, "x"+r.Header.Get(v.SignatureHeader)) },
				"duplicated header": func(r *signature.Request) { r.Header.Add(v.SignatureHeader, r.Header.Get(v.SignatureHeader)) },
			}
			if v.TimestampHeader != "" {
				variants["an hour later"] = func(r *signature.Request) { r.Now = r.Now.Add(time.Hour) }
				variants["no timestamp"] = func(r *signature.Request) { r.Header.Del(v.TimestampHeader) }
				variants["timestamp +1s"] = func(r *signature.Request) {
					_, set := v.timestamp(r)
					ts := r.Header.Get(v.TimestampHeader)
					set(tamper(ts, len(ts)-1))
				}
			}
			if v.IDHeader != "" {
				variants["no id"] = func(r *signature.Request) { r.Header.Del(v.IDHeader) }
			}
			for variant, mutate := range variants {
				reqPreset, reqGeneric := v.request(), v.request()
				mutate(&reqPreset)
				mutate(&reqGeneric)
				got, want := signature.ReasonOf(generic.Verify(reqGeneric)), signature.ReasonOf(preset.Verify(reqPreset))
				if got != want {
					t.Errorf("%s: generic HMAC says %q, preset says %q", variant, got, want)
				}
				if variant == "as published" && want != "" {
					t.Errorf("the published vector failed: %s", want)
				}
				if variant != "as published" && want == "" {
					t.Errorf("%s: verified but should not have", variant)
				}
			}
		})
	}
}
