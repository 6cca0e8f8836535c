package provider

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// signKeyEncodings are the key encodings of the providers whose signer is their own
// code (the others read theirs from the Scheme or the generic spec).
var signKeyEncodings = map[v1alpha1.ProviderType]v1alpha1.KeyEncoding{
	v1alpha1.ProviderAdyen:            v1alpha1.KeyHex,
	v1alpha1.ProviderStandardWebhooks: v1alpha1.KeyWhsec,
	ProviderClerk:                     v1alpha1.KeyWhsec,
	ProviderResend:                    v1alpha1.KeyWhsec,
}

// signTestSpec is the spec and the secret (as its Secret stores it) a provider's
// signer is tested with.
func signTestSpec(t *testing.T, p *Provider) (v1alpha1.ProviderSpec, string) {
	t.Helper()
	spec := v1alpha1.ProviderSpec{Type: p.Type}
	if p.NeedsURL {
		spec.SignedURL = fuzzURL
	}
	enc := signKeyEncodings[p.Type]
	switch {
	case genericSpecs[p.Type].HMAC != nil || genericSpecs[p.Type].Ed25519 != nil:
		spec = genericSpecs[p.Type]
		if spec.HMAC != nil {
			enc = spec.HMAC.KeyEncoding
		}
	case p.Scheme != nil:
		enc = p.KeyEncoding
	}
	return spec, encodeKey(t, enc, []byte(fuzzHMACKey))
}

func sampleEvent(id string, at time.Time) SampleEvent {
	return SampleEvent{ID: id, Type: "hookkeeper.test", EntityKey: "hookkeeper-test", Time: at}
}

// sampleEventFor is sampleEvent in the form the provider's events take (a Linear type
// is type.action, a HubSpot entity objectType:objectId).
func sampleEventFor(p *Provider, id string, at time.Time) SampleEvent {
	e := sampleEvent(id, at)
	if p.Type == ProviderHubSpot {
		e.EntityKey = "deal:hookkeeper-test"
	}
	return e
}

func deliveryRequest(d Delivery, now time.Time) signature.Request {
	return signature.Request{Header: d.Header.Clone(), Body: bytes.Clone(d.Body), Method: d.Method, Now: now}
}

// TestSignRoundTrip: every provider's signer signs its sample so that the provider's
// verifier accepts it, with the same secret only, and not once the signed content
// changes. A provider without a signer says why, and Sign returns ErrCannotSign.
func TestSignRoundTrip(t *testing.T) {
	now := time.Now()
	for _, p := range All() {
		t.Run(string(p.Type), func(t *testing.T) {
			spec, secret := signTestSpec(t, p)
			d, err := Sample(spec, sampleEventFor(p, "evt_roundtrip_1", now))
			if err != nil {
				t.Fatal(err)
			}
			if p.Sign == nil {
				if p.CannotSign == "" {
					t.Fatal("no signer and no reason")
				}
				if _, err := Sign(spec, secret, d); !errors.Is(err, ErrCannotSign) || !strings.Contains(err.Error(), p.CannotSign) {
					t.Fatalf("Sign: want ErrCannotSign with the reason, got %v", err)
				}
				roundTripEd25519(t, p, spec, d)
				return
			}
			signed, err := Sign(spec, secret, d)
			if err != nil {
				t.Fatal(err)
			}
			if err := mustNew(t, spec, signature.Secret{Value: secret}).Verify(deliveryRequest(signed, now)); err != nil {
				t.Fatalf("the signed sample does not verify: %v", err)
			}
			wrong := mustNew(t, spec, signature.Secret{Value: encodeKey(t, keyEncodingOf(spec, secret), []byte("another key entirely"))})
			if err := wrong.Verify(deliveryRequest(signed, now)); signature.ReasonOf(err) != signature.ReasonMismatch {
				t.Fatalf("another secret: want a mismatch, got %v", err)
			}
			again, err := Sign(spec, encodeKey(t, keyEncodingOf(spec, secret), []byte("another key entirely")), d)
			if err != nil {
				t.Fatal(err)
			}
			if err := mustNew(t, spec, signature.Secret{Value: secret}).Verify(deliveryRequest(again, now)); signature.ReasonOf(err) != signature.ReasonMismatch {
				t.Fatalf("signed with another secret: want a mismatch, got %v", err)
			}
			if p.BodyUnsigned {
				return
			}
			req := deliveryRequest(signed, now)
			mutateSigned(t, p, &req)
			if err := mustNew(t, spec, signature.Secret{Value: secret}).Verify(req); signature.ReasonOf(err) != signature.ReasonMismatch {
				t.Fatalf("a changed body: want a mismatch, got %v", err)
			}
		})
	}
}

// keyEncodingOf guesses the encoding of a test secret from its form.
func keyEncodingOf(spec v1alpha1.ProviderSpec, secret string) v1alpha1.KeyEncoding {
	switch {
	case strings.HasPrefix(secret, "whsec_"):
		return v1alpha1.KeyWhsec
	case spec.HMAC != nil:
		return spec.HMAC.KeyEncoding
	case spec.Type == v1alpha1.ProviderAdyen:
		return v1alpha1.KeyHex
	}
	p, _ := Lookup(spec.Type)
	return p.KeyEncoding
}

// mutateSigned changes one byte the signature covers: for Mailgun, of the signed
// token (its event-data is not signed).
func mutateSigned(t *testing.T, p *Provider, req *signature.Request) {
	t.Helper()
	if p.Type == ProviderMailgun {
		i := bytes.Index(req.Body, []byte(`"token":"`))
		if i < 0 {
			t.Fatal("no token in the signed Mailgun body")
		}
		req.Body[i+len(`"token":"`)] ^= 0x01
		return
	}
	// A byte inside a JSON string of the sample (or a form value), so the body still
	// parses and only the MAC can tell.
	i := bytes.Index(req.Body, []byte("hookkeeper-test"))
	if i < 0 {
		t.Fatal("the sample does not carry its entity key")
	}
	req.Body[i] = 'H'
}

// roundTripEd25519 signs an Ed25519 provider's sample with a private key (which no
// Secret holds) through its Scheme, so the scheme's signer is checked for these
// providers too.
func roundTripEd25519(t *testing.T, p *Provider, spec v1alpha1.ProviderSpec, d Delivery) {
	t.Helper()
	scheme := p.Scheme
	pubEnc := p.PublicKeyEncoding
	if spec.Ed25519 != nil {
		s, errs := schemeFromSpec("spec.provider.ed25519", spec.Ed25519.SchemeSpec, spec.SignedURL)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		scheme, pubEnc = &s, spec.Ed25519.KeyEncoding
	}
	if scheme == nil {
		t.Fatalf("%s cannot sign and has no Ed25519 scheme to check", p.Type)
	}
	private := ed25519.NewKeyFromSeed(fuzzSeed)
	key, err := signature.NewEd25519SigningKey(private)
	if err != nil {
		t.Fatal(err)
	}
	h, err := scheme.Sign(key, signature.Message{Body: d.Body, Time: d.Time, ID: "msg_ed25519"})
	if err != nil {
		t.Fatal(err)
	}
	public := encodePublicKey(t, pubEnc, private.Public().(ed25519.PublicKey))
	req := signature.Request{Header: h, Body: d.Body, Method: http.MethodPost, Now: d.Time}
	if err := mustNew(t, spec, signature.Secret{Value: public}).Verify(req); err != nil {
		t.Fatalf("the Ed25519-signed sample does not verify: %v", err)
	}
	req.Body = bytes.Replace(bytes.Clone(d.Body), []byte("hookkeeper-test"), []byte("Hookkeeper-test"), 1)
	if err := mustNew(t, spec, signature.Secret{Value: public}).Verify(req); signature.ReasonOf(err) != signature.ReasonMismatch {
		t.Fatalf("a changed body: want a mismatch, got %v", err)
	}
}

// TestSignReproducesVectors: signing a vector's body with its secret, time and id gives
// the signature the vector carries, for every vector of a provider that can sign but
// the Adyen item form (the signer writes the HmacSignature header form).
func TestSignReproducesVectors(t *testing.T) {
	forEachVector(t, func(t *testing.T, v vector) {
		p, _ := Lookup(v1alpha1.ProviderType(v.Provider))
		switch {
		case p.Sign == nil:
			t.Skipf("%s cannot sign: %s", p.Type, p.CannotSign)
		case v.isAdyenItemForm():
			t.Skip("the Adyen signer writes the HmacSignature header, not per-item signatures")
		}
		req := v.request()
		d := Delivery{Method: req.Method, Header: http.Header{}, Body: []byte(v.Body), Time: v.now()}
		if ts, set := v.timestamp(&req); set != nil {
			at, ok := signature.ParseTimestamp(v.timestampFormat(), ts)
			if !ok {
				t.Fatalf("timestamp %q", ts)
			}
			d.Time = at
		}
		switch {
		case v.IDHeader != "":
			d.ID = req.Header.Get(v.IDHeader)
		case v.isMailgun():
			start, end := bodyString(req.Body, `"token":"`)
			d.ID = string(req.Body[start:end])
		}
		signed, err := Sign(v.spec(), v.Secret, d)
		if err != nil {
			t.Fatal(err)
		}
		if v.isMailgun() {
			want, got := mailgunSignatureOf(t, req.Body), mailgunSignatureOf(t, signed.Body)
			if want != got {
				t.Fatalf("signature.signature: got %s, the vector has %s", got, want)
			}
			return
		}
		checked := 0
		for name, want := range v.Headers {
			got := signed.Header.Get(name)
			if rest, ok := strings.CutPrefix(strings.ToLower(name), "svix-"); ok && got == "" {
				// Standard Webhooks signs under its own names what Svix sends as svix-*.
				got = signed.Header.Get("webhook-" + rest)
			}
			if got == "" {
				continue
			}
			// A vector may carry more signatures than one (a roll); the signer writes one.
			if got != want && !strings.Contains(want, got) {
				t.Errorf("%s: got %q, the vector has %q", name, got, want)
			}
			checked++
		}
		if checked == 0 {
			t.Fatalf("the signer wrote none of the vector's headers: %v", signed.Header)
		}
		if err := mustNew(t, v.spec(), signature.Secret{Value: v.Secret}).Verify(deliveryRequest(signed, v.now())); err != nil {
			t.Fatalf("the re-signed vector does not verify: %v", err)
		}
	})
}

func mailgunSignatureOf(t *testing.T, body []byte) string {
	t.Helper()
	var b struct {
		Signature struct {
			Signature string `json:"signature"`
		} `json:"signature"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatal(err)
	}
	return b.Signature.Signature
}

// TestProvidersCanSignOrSayWhy: the providers that cannot sign from their Secret are
// exactly the ones whose Secret holds an Ed25519 public key.
func TestProvidersCanSignOrSayWhy(t *testing.T) {
	var cannot []string
	for _, p := range All() {
		if p.Sign == nil {
			cannot = append(cannot, string(p.Type))
		}
	}
	if got, want := strings.Join(cannot, ","), "Discord,Ed25519"; got != want {
		t.Fatalf("providers without a signer: %s, want %s", got, want)
	}
}
