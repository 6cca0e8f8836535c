package signature

import (
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// The presets are configurations of the generic scheme, so a user with a provider that
// hookkeeper has no preset for can write the same thing by hand. This test writes the
// GitHub, Shopify, Slack and Standard Webhooks presets as HMACSpecs and checks that both
// verifiers reach the same verdict, with the same Reason, on the published vectors and on
// every tampered variant of them.
func TestHMACSpecExpressesPresets(t *testing.T) {
	equivalents := map[string]v1alpha1.HMACSpec{
		"github-docs": {
			Header: "X-Hub-Signature-256", Prefix: "sha256=",
			Algorithm: v1alpha1.HMACSHA256, Encoding: v1alpha1.EncodingHex, KeyEncoding: v1alpha1.KeyRaw,
			SignedContent: "{body}",
		},
		"shopify-computed": {
			Header:    "X-Shopify-Hmac-Sha256",
			Algorithm: v1alpha1.HMACSHA256, Encoding: v1alpha1.EncodingBase64, KeyEncoding: v1alpha1.KeyRaw,
		},
		"slack-docs": {
			Header: "X-Slack-Signature", Prefix: "v0=",
			Algorithm: v1alpha1.HMACSHA256, Encoding: v1alpha1.EncodingHex, KeyEncoding: v1alpha1.KeyRaw,
			SignedContent: "v0:{timestamp}:{body}", TimestampHeader: "X-Slack-Request-Timestamp",
		},
		"standardwebhooks-reference": {
			Header: "webhook-signature", Prefix: "v1,", Separator: " ",
			Algorithm: v1alpha1.HMACSHA256, Encoding: v1alpha1.EncodingBase64, KeyEncoding: v1alpha1.KeyWhsec,
			SignedContent:   "{id}.{timestamp}.{body}",
			TimestampHeader: "webhook-timestamp", IDHeader: "webhook-id",
		},
	}
	for name, hmacSpec := range equivalents {
		t.Run(name, func(t *testing.T) {
			v := vectorNamed(t, name)
			preset := mustNew(t, v.spec(), Secret{Value: v.Secret})
			generic := mustNew(t, v1alpha1.ProviderSpec{Type: v1alpha1.ProviderHMAC, HMAC: &hmacSpec}, Secret{Value: v.Secret})

			variants := map[string]func(*Request){
				"as published":      func(*Request) {},
				"tampered body":     v.tamperBody,
				"tampered sig":      v.tamperSignature,
				"no signature":      func(r *Request) { r.Header.Del(v.SignatureHeader) },
				"empty signature":   func(r *Request) { r.Header.Set(v.SignatureHeader, "") },
				"bad prefix":        func(r *Request) { r.Header.Set(v.SignatureHeader, "x"+r.Header.Get(v.SignatureHeader)) },
				"duplicated header": func(r *Request) { r.Header.Add(v.SignatureHeader, r.Header.Get(v.SignatureHeader)) },
			}
			if v.TimestampHeader != "" {
				variants["an hour later"] = func(r *Request) { r.Now = r.Now.Add(time.Hour) }
				variants["no timestamp"] = func(r *Request) { r.Header.Del(v.TimestampHeader) }
				variants["timestamp +1s"] = func(r *Request) {
					_, set := v.timestamp(*r)
					ts := r.Header.Get(v.TimestampHeader)
					set(tamper(ts, len(ts)-1))
				}
			}
			if v.IDHeader != "" {
				variants["no id"] = func(r *Request) { r.Header.Del(v.IDHeader) }
			}
			for variant, mutate := range variants {
				reqPreset, reqGeneric := v.request(), v.request()
				mutate(&reqPreset)
				mutate(&reqGeneric)
				got, want := ReasonOf(generic.Verify(reqGeneric)), ReasonOf(preset.Verify(reqPreset))
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
