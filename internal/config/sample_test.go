package config

import (
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/provider"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// sampleSpec is a spec each provider's sample is signed and read under, with its
// secret in the form the provider's Secret stores it.
func sampleSpec(p *provider.Provider) (spec v1alpha1.ProviderSpec, secret string) {
	spec = v1alpha1.ProviderSpec{Type: p.Type}
	if p.NeedsURL {
		spec.SignedURL = "https://hooks.example.com/shop"
	}
	key := []byte("config sample test key")
	secret = string(key)
	switch p.Type {
	case v1alpha1.ProviderHMAC:
		spec.HMAC = &v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Signature", Prefix: "sha256="}}
	case v1alpha1.ProviderEd25519:
		spec.Ed25519 = &v1alpha1.Ed25519Spec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Signature"}}
	case v1alpha1.ProviderAdyen:
		secret = hex.EncodeToString(key)
	case v1alpha1.ProviderStandardWebhooks, provider.ProviderClerk, provider.ProviderResend:
		secret = "whsec_" + base64.StdEncoding.EncodeToString(key)
	}
	return spec, secret
}

// idEmbedsEventID reports whether the provider's id preset reads the sample's event id
// (or joins it with other signed fields), as opposed to a digest of what was signed
// (Linear's joins its type, action, entity and time, and falls back to the digest).
func idEmbedsEventID(p *provider.Provider) bool {
	return !strings.Contains(p.Preset.ID, "signed.digest")
}

// TestProviderSamplesExtract: for every provider, the presets read from its signed
// sample (through the verifier and this package's extraction, as the receiver does)
// the type and entity key the sample was made for, and an id unique to the sample.
func TestProviderSamplesExtract(t *testing.T) {
	now := time.Now()
	for _, p := range provider.All() {
		t.Run(string(p.Type), func(t *testing.T) {
			spec, secret := sampleSpec(p)
			x, err := NewExtractor(v1alpha1.WebhookEndpointSpec{Provider: spec})
			if err != nil {
				t.Fatal(err)
			}
			entity := "hookkeeper-test"
			if p.Type == provider.ProviderHubSpot {
				entity = "deal:hookkeeper-test"
			}
			ids := map[string]bool{}
			for i, id := range []string{"evt_sample_one", "evt_sample_two"} {
				at := now.Add(time.Duration(i) * time.Millisecond)
				e := provider.SampleEvent{ID: id, Type: "hookkeeper.test", EntityKey: entity, Time: at}
				d, err := provider.Sample(spec, e)
				if err != nil {
					t.Fatal(err)
				}
				var verified *signature.Verified
				if p.Sign == nil {
					// What a verifier of the whole body vouches for; no Secret of this
					// provider can sign (provider tests sign its scheme with a private key).
					verified = signature.WholeBody(signature.Request{Header: d.Header, Body: d.Body, Now: at}, nil)
				} else {
					if d, err = provider.Sign(spec, secret, d); err != nil {
						t.Fatal(err)
					}
					v, err := provider.NewVerifier(spec, []signature.Secret{{Value: secret}})
					if err != nil {
						t.Fatal(err)
					}
					if verified, err = v.Open(signature.Request{Header: d.Header, Body: d.Body, Method: d.Method, Now: at}); err != nil {
						t.Fatalf("the signed sample does not verify: %v", err)
					}
				}
				evs, err := x.Extract(verified, d.Header)
				if err != nil {
					t.Fatalf("extract: %v", err)
				}
				if len(evs) != 1 {
					t.Fatalf("%d events, want 1", len(evs))
				}
				ev := evs[0]
				if ev.Type != e.Type {
					t.Errorf("type %q, want %q", ev.Type, e.Type)
				}
				if p.Preset.EntityKey != "" && ev.EntityKey != e.EntityKey {
					t.Errorf("entity key %q, want %q", ev.EntityKey, e.EntityKey)
				}
				if ev.ID == "" || ids[ev.ID] {
					t.Errorf("id %q is empty or not unique to the sample", ev.ID)
				}
				ids[ev.ID] = true
				if idEmbedsEventID(p) && !strings.Contains(ev.ID, e.ID) {
					t.Errorf("id %q does not carry the event id %q", ev.ID, e.ID)
				}
			}
		})
	}
}
