package provider

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha1" //nolint:gosec // Twilio signs with HMAC-SHA1.
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// Signing: the tests of Sign, the signer of hookkeeper's own deliveries, and the test
// signers the round trips and the providers' tests sign with.

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

// The test signers: each provider's way of signing, written apart from the verifiers
// (crypto/hmac and crypto/ed25519 directly), for the round trips (FuzzProviders,
// TestSignRoundTrip) and for the providers' own tests.

// signed is one request a test signer made, with the spec and secret that verify it.
type signed struct {
	spec   v1alpha1.ProviderSpec
	secret string
	req    signature.Request
}

// testSigner signs body at now the way the provider does. It is written apart from the
// verifier (crypto/hmac and crypto/ed25519 directly), so a request it signs that
// verifies checks two implementations against each other.
type testSigner func(t testing.TB, body []byte, now time.Time) signed

// customSigners sign for providers whose verifier is their own code. Providers that are
// a fixed Scheme, or a generic spec, are signed by signerFor from the Scheme.
var customSigners = map[v1alpha1.ProviderType]testSigner{
	v1alpha1.ProviderAdyen:            signAdyen,
	v1alpha1.ProviderStandardWebhooks: signStandardWebhooks,
	ProviderClerk:                     svixSigner(ProviderClerk),
	ProviderResend:                    svixSigner(ProviderResend),
	ProviderGitLab:                    signGitLab,
	ProviderHubSpot:                   signHubSpot,
	ProviderLinear:                    signLinear,
	ProviderMailgun:                   signMailgun,
	ProviderTwilio:                    signTwilio,
}

// postRequest is a POST of body with the headers h, received at now.
func postRequest(h http.Header, body []byte, now time.Time) signature.Request {
	return signature.Request{Header: h, Body: body, Method: http.MethodPost, Now: now}
}

const (
	fuzzHMACKey = "hookkeeper fuzz key 0123456789"
	fuzzURL     = "https://hooks.example.com/webhooks/endpoint?tenant=a&x=1"
	fuzzID      = "msg_fuzz_2Qx7"
)

// fuzzSeed is the Ed25519 private key seed of test signers.
var fuzzSeed = []byte("hookkeeper ed25519 fuzz seed 32b")

// genericSpecs are the specs the generic providers are signed under: every placeholder,
// a composite header and a timestamp header between them.
var genericSpecs = map[v1alpha1.ProviderType]v1alpha1.ProviderSpec{
	v1alpha1.ProviderHMAC: {Type: v1alpha1.ProviderHMAC, SignedURL: fuzzURL, HMAC: &v1alpha1.HMACSpec{
		SchemeSpec: v1alpha1.SchemeSpec{
			Header: "X-Fuzz-Signature", Encoding: v1alpha1.EncodingBase64,
			Composite:     &v1alpha1.CompositeSpec{PairSeparator: ";", KeyValueSeparator: "=", TimestampKey: "ts", SignatureKey: "h1"},
			SignedContent: "{method} {url}\n{id}:{timestamp}:{body}", IDHeader: "X-Fuzz-Id",
		},
		Algorithm: v1alpha1.HMACSHA512, KeyEncoding: v1alpha1.KeyBase64,
	}},
	v1alpha1.ProviderEd25519: {Type: v1alpha1.ProviderEd25519, Ed25519: &v1alpha1.Ed25519Spec{
		SchemeSpec: v1alpha1.SchemeSpec{
			Header: "X-Fuzz-Ed25519", Prefix: "ed25519=", Separator: " ", Encoding: v1alpha1.EncodingHex,
			SignedContent: "{timestamp}{body}", TimestampHeader: "X-Fuzz-Timestamp", TimestampFormat: v1alpha1.TimestampUnixMilli,
		},
		KeyEncoding: v1alpha1.PublicKeyBase64,
	}},
}

// signerFor returns the test signer of a provider.
func signerFor(t testing.TB, p *Provider) testSigner {
	t.Helper()
	if s, ok := customSigners[p.Type]; ok {
		return s
	}
	spec := v1alpha1.ProviderSpec{Type: p.Type, SignedURL: fuzzURL}
	var (
		scheme  signature.Scheme
		newHash func() hash.Hash
		keyEnc  v1alpha1.KeyEncoding
		pubEnc  v1alpha1.PublicKeyEncoding
	)
	switch {
	case p.Scheme != nil:
		scheme, newHash, keyEnc, pubEnc = *p.Scheme, p.Hash, p.KeyEncoding, p.PublicKeyEncoding
	case genericSpecs[p.Type].HMAC != nil:
		spec = genericSpecs[p.Type]
		var errs []error
		if scheme, errs = hmacScheme(spec); len(errs) > 0 {
			t.Fatal(errs)
		}
		newHash, keyEnc = hashes[spec.HMAC.Algorithm], spec.HMAC.KeyEncoding
	case genericSpecs[p.Type].Ed25519 != nil:
		spec = genericSpecs[p.Type]
		var errs []error
		if scheme, errs = schemeFromSpec("spec.provider.ed25519", spec.Ed25519.SchemeSpec, ""); len(errs) > 0 {
			t.Fatal(errs)
		}
		pubEnc = spec.Ed25519.KeyEncoding
	default:
		t.Fatalf("provider %s has neither a fixed scheme nor a test signer in customSigners", p.Type)
	}
	scheme.URL = spec.SignedURL
	return func(t testing.TB, body []byte, now time.Time) signed {
		var (
			secret string
			sign   func([]byte) []byte
		)
		if newHash != nil {
			secret = encodeKey(t, keyEnc, []byte(fuzzHMACKey))
			sign = func(msg []byte) []byte { return oracleMAC(newHash, []byte(fuzzHMACKey), string(msg)) }
		} else {
			private := ed25519.NewKeyFromSeed(fuzzSeed)
			secret = encodePublicKey(t, pubEnc, private.Public().(ed25519.PublicKey))
			sign = func(msg []byte) []byte { return ed25519.Sign(private, msg) }
		}
		return signed{spec: spec, secret: secret, req: signScheme(scheme, sign, body, now)}
	}
}

// signScheme signs body under scheme from the scheme's description alone.
func signScheme(scheme signature.Scheme, sign func([]byte) []byte, body []byte, now time.Time) signature.Request {
	set := scheme.HeaderSets[0]
	ts := signature.FormatTimestamp(scheme.TimestampFormat, now)
	values := map[string]string{
		signature.PlaceholderBody: string(body), signature.PlaceholderTimestamp: ts, signature.PlaceholderID: fuzzID,
		signature.PlaceholderMethod: http.MethodPost, signature.PlaceholderURL: scheme.URL,
	}
	var msg strings.Builder
	for tmpl := scheme.Template.String(); tmpl != ""; {
		if i := strings.IndexByte(tmpl, '{'); i >= 0 {
			msg.WriteString(tmpl[:i])
			tmpl = tmpl[i:]
			end := strings.IndexByte(tmpl, '}') + 1
			if v, ok := values[tmpl[:end]]; ok {
				msg.WriteString(v)
				tmpl = tmpl[end:]
				continue
			}
			msg.WriteByte('{')
			tmpl = tmpl[1:]
			continue
		}
		msg.WriteString(tmpl)
		break
	}
	mac := sign([]byte(msg.String()))
	encoded := hex.EncodeToString(mac)
	if scheme.Encoding == v1alpha1.EncodingBase64 {
		encoded = base64.StdEncoding.EncodeToString(mac)
	}
	h := http.Header{}
	if c := scheme.Composite; c != nil {
		var pairs []string
		if c.TimestampKey != "" {
			pairs = append(pairs, c.TimestampKey+c.KeyValueSeparator+ts)
		}
		h.Set(set.Signature, strings.Join(append(pairs, c.SignatureKey+c.KeyValueSeparator+encoded), c.PairSeparator))
	} else {
		h.Set(set.Signature, scheme.Prefix+encoded)
		if set.Timestamp != "" {
			h.Set(set.Timestamp, ts)
		}
	}
	if set.ID != "" {
		h.Set(set.ID, fuzzID)
	}
	return postRequest(h, body, now)
}

// keyForms are the ways a Secret holds key bytes, by the name of the encoding; an HMAC
// key's and an Ed25519 public key's encodings share their names.
var keyForms = map[string]func([]byte) string{
	string(v1alpha1.KeyRaw):        func(key []byte) string { return string(key) },
	string(v1alpha1.KeyHex):        hex.EncodeToString,
	string(v1alpha1.KeyBase64):     base64.StdEncoding.EncodeToString,
	string(v1alpha1.KeyWhsec):      func(key []byte) string { return "whsec_" + base64.StdEncoding.EncodeToString(key) },
	string(v1alpha1.PublicKeyWhpk): func(key []byte) string { return "whpk_" + base64.StdEncoding.EncodeToString(key) },
}

func encodeKeyAs(t testing.TB, enc string, key []byte) string {
	form, ok := keyForms[enc]
	if !ok {
		t.Fatalf("key encoding %q", enc)
	}
	return form(key)
}

// encodeKey is an HMAC key as a Secret of encoding enc (raw by default) holds it.
func encodeKey(t testing.TB, enc v1alpha1.KeyEncoding, key []byte) string {
	if enc == "" {
		enc = v1alpha1.KeyRaw
	}
	return encodeKeyAs(t, string(enc), key)
}

// encodePublicKey is an Ed25519 public key as a Secret of encoding enc (hex by default)
// holds it.
func encodePublicKey(t testing.TB, enc v1alpha1.PublicKeyEncoding, key ed25519.PublicKey) string {
	if enc == "" {
		enc = v1alpha1.PublicKeyHex
	}
	return encodeKeyAs(t, string(enc), key)
}

// signAdyen signs the whole body with the HmacSignature header, for the round trip; the
// item form is covered by adyen_test.go.
func signAdyen(t testing.TB, body []byte, now time.Time) signed {
	key, err := hex.DecodeString(adyenKeyA)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set(HeaderAdyenHmacSignature, base64.StdEncoding.EncodeToString(oracleMAC(sha256.New, key, string(body))))
	return signed{spec: v1alpha1.ProviderSpec{Type: v1alpha1.ProviderAdyen}, secret: adyenKeyA, req: postRequest(h, body, now)}
}

// signStandardWebhooks signs bodies of odd length asymmetrically (v1a, Ed25519, a whpk_
// key), the others symmetrically (v1, HMAC-SHA256, a whsec_ key).
func signStandardWebhooks(t testing.TB, body []byte, now time.Time) signed {
	ts := strconv.FormatInt(now.Unix(), 10)
	msg := []byte(fuzzID + "." + ts + "." + string(body))
	req := postRequest(http.Header{}, body, now)
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

// svixSigner signs the way Svix delivers for Clerk and Resend: HMAC-SHA256 of
// `{svix-id}.{svix-timestamp}.{body}` under the bytes of a whsec_ key, base64 in a `v1,`
// entry of svix-signature.
func svixSigner(typ v1alpha1.ProviderType) testSigner {
	return func(t testing.TB, body []byte, now time.Time) signed {
		ts := strconv.FormatInt(now.Unix(), 10)
		mac := oracleMAC(sha256.New, []byte(fuzzHMACKey), fuzzID+"."+ts+".", string(body))
		h := http.Header{}
		h.Set("svix-id", fuzzID)
		h.Set("svix-timestamp", ts)
		h.Set("svix-signature", "v1,"+base64.StdEncoding.EncodeToString(mac))
		return signed{
			spec:   v1alpha1.ProviderSpec{Type: typ},
			secret: encodeKey(t, v1alpha1.KeyWhsec, []byte(fuzzHMACKey)),
			req:    postRequest(h, body, now),
		}
	}
}

// signGitLab "signs" as GitLab does: by sending the token itself.
func signGitLab(_ testing.TB, body []byte, now time.Time) signed {
	h := http.Header{}
	h.Set(HeaderGitLabToken, fuzzHMACKey)
	h.Set("X-Gitlab-Event", "Merge Request Hook")
	return signed{spec: v1alpha1.ProviderSpec{Type: ProviderGitLab}, secret: fuzzHMACKey, req: postRequest(h, body, now)}
}

// hubspotSign signs a request the way HubSpot's v3 signature does: method + URI + body +
// millisecond timestamp.
func hubspotSign(secret, method, uri string, body []byte, now time.Time) signature.Request {
	ts := strconv.FormatInt(now.UnixMilli(), 10)
	mac := oracleMAC(sha256.New, []byte(secret), method+uri, string(body), ts)
	req := signature.Request{Header: http.Header{}, Body: body, Method: method, Now: now}
	req.Header.Set("X-HubSpot-Signature-v3", base64.StdEncoding.EncodeToString(mac))
	req.Header.Set("X-HubSpot-Request-Timestamp", ts)
	return req
}

func signHubSpot(_ testing.TB, body []byte, now time.Time) signed {
	return signed{
		spec:   v1alpha1.ProviderSpec{Type: ProviderHubSpot, SignedURL: fuzzURL},
		secret: fuzzHMACKey,
		req:    hubspotSign(fuzzHMACKey, http.MethodPost, fuzzURL, body, now),
	}
}

// signLinear: Linear's bodies always carry webhookTimestamp, and the verifier demands
// it, so the fuzz body travels inside a Linear-shaped envelope; any changed byte of that
// body must still fail the MAC.
func signLinear(t testing.TB, body []byte, now time.Time) signed {
	inner, err := json.Marshal(string(body))
	if err != nil {
		t.Fatal(err)
	}
	envelope := []byte(`{"action":"create","type":"Issue","data":{"id":"fuzz","body":` + string(inner) +
		`},"webhookTimestamp":` + strconv.FormatInt(now.UnixMilli(), 10) + `}`)
	return signed{spec: v1alpha1.ProviderSpec{Type: ProviderLinear}, secret: fuzzHMACKey, req: linearRequest(fuzzHMACKey, envelope, now)}
}

// linearRequest signs body as Linear does.
func linearRequest(secret string, body []byte, now time.Time) signature.Request {
	h := http.Header{}
	h.Set(HeaderLinearSignature, hex.EncodeToString(oracleMAC(sha256.New, []byte(secret), string(body))))
	h.Set("Linear-Delivery", "234d1a4e-b617-4388-90fe-adc3633d6b72")
	h.Set("Linear-Event", "Issue")
	return postRequest(h, body, now)
}

// mailgunSign is Mailgun's signature: hex HMAC-SHA256 of timestamp and token
// concatenated.
func mailgunSign(key, timestamp, token string) string {
	return hex.EncodeToString(oracleMAC(sha256.New, []byte(key), timestamp, token))
}

// mailgunBody writes a webhook body around a signature object.
func mailgunBody(timestamp, token, sig, eventData string) string {
	return `{"signature":{"timestamp":"` + timestamp + `","token":"` + token + `","signature":"` + sig + `"},"event-data":` + eventData + `}`
}

// signMailgun: Mailgun signs the timestamp and the token, not event-data, so a fuzz body
// placed in event-data would not be covered and changing it could not fail. The fuzz
// bytes are made the token instead, hex-encoded (a JSON escape could spell one token two
// ways); every other byte of the body is JSON structure, the signed timestamp, the
// signature, or the key of a required member, so changing any byte must fail.
func signMailgun(_ testing.TB, body []byte, now time.Time) signed {
	ts := strconv.FormatInt(now.Unix(), 10)
	token := hex.EncodeToString(body)
	req := postRequest(http.Header{}, []byte(mailgunBody(ts, token, mailgunSign(fuzzHMACKey, ts, token), `{}`)), now)
	return signed{spec: v1alpha1.ProviderSpec{Type: ProviderMailgun}, secret: fuzzHMACKey, req: req}
}

// twilioSignForm signs a form body the way Twilio's "Webhooks Security" page describes:
// the URL, then each parameter sorted by name, name then value; a repeated name
// contributes each distinct value, sorted (twilio-node and twilio-python sign repeated
// parameters so).
func twilioSignForm(token, u string, form url.Values) string {
	names := make([]string, 0, len(form))
	for name := range form {
		names = append(names, name)
	}
	sort.Strings(names)
	parts := []string{u}
	for _, name := range names {
		values := append([]string(nil), form[name]...)
		sort.Strings(values)
		for i, value := range values {
			if i > 0 && value == values[i-1] {
				continue
			}
			parts = append(parts, name+value)
		}
	}
	return base64.StdEncoding.EncodeToString(oracleMAC(sha1.New, []byte(token), parts...))
}

// twilioSignJSON signs a JSON body: the URL with bodySHA256 appended, alone.
func twilioSignJSON(token, u string, body []byte) string {
	sum := sha256.Sum256(body)
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return base64.StdEncoding.EncodeToString(oracleMAC(sha1.New, []byte(token), u+sep+"bodySHA256="+hex.EncodeToString(sum[:])))
}

// signTwilio signs a body whose first non-space byte is '{' as JSON, as is; any other
// fuzz body becomes the hex value of a form field next to a status callback's fields, so
// every byte of the body is signed content (hex has no escapes that two spellings could
// share, as %2B and %2b would).
func signTwilio(_ testing.TB, body []byte, now time.Time) signed {
	spec := v1alpha1.ProviderSpec{Type: ProviderTwilio, SignedURL: fuzzURL}
	var sig string
	if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '{' {
		sig = twilioSignJSON(fuzzHMACKey, fuzzURL, body)
	} else {
		form := url.Values{"Body": {hex.EncodeToString(body)}, "MessageSid": {"SMfuzz"}, "MessageStatus": {"delivered"}}
		body = []byte(form.Encode())
		sig = twilioSignForm(fuzzHMACKey, fuzzURL, form)
	}
	h := http.Header{}
	h.Set(HeaderTwilioSignature, sig)
	return signed{spec: spec, secret: fuzzHMACKey, req: postRequest(h, body, now)}
}

const (
	twitchIDHeader        = "Twitch-Eventsub-Message-Id"
	twitchTimestampHeader = "Twitch-Eventsub-Message-Timestamp"
	twitchSignatureHeader = "Twitch-Eventsub-Message-Signature"
)

// twitchSign signs id + timestamp + body the way Twitch does.
func twitchSign(secret, id, timestamp string, body []byte) string {
	return "sha256=" + hex.EncodeToString(oracleMAC(sha256.New, []byte(secret), id+timestamp, string(body)))
}
