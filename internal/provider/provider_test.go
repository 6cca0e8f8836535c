package provider

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"flag"
	"fmt"
	"hash"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

var update = flag.Bool("update", false, "rewrite the provider table in docs/providers.md")

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

// customSigners sign for providers whose verifier is their own code; each provider's
// test file adds its own. Providers that are a fixed Scheme are signed by schemeSigner.
var customSigners = map[v1alpha1.ProviderType]testSigner{}

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
		t.Fatalf("provider %s has neither a fixed scheme nor a test signer in its _test.go file", p.Type)
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
	return signature.Request{Header: h, Body: body, Method: http.MethodPost, Now: now}
}

func encodeKey(t testing.TB, enc v1alpha1.KeyEncoding, key []byte) string {
	switch enc {
	case v1alpha1.KeyRaw, "":
		return string(key)
	case v1alpha1.KeyHex:
		return hex.EncodeToString(key)
	case v1alpha1.KeyBase64:
		return base64.StdEncoding.EncodeToString(key)
	case v1alpha1.KeyWhsec:
		return "whsec_" + base64.StdEncoding.EncodeToString(key)
	}
	t.Fatalf("key encoding %q", enc)
	return ""
}

func encodePublicKey(t testing.TB, enc v1alpha1.PublicKeyEncoding, key ed25519.PublicKey) string {
	switch enc {
	case v1alpha1.PublicKeyHex, "":
		return hex.EncodeToString(key)
	case v1alpha1.PublicKeyBase64:
		return base64.StdEncoding.EncodeToString(key)
	case v1alpha1.PublicKeyWhpk:
		return "whpk_" + base64.StdEncoding.EncodeToString(key)
	}
	t.Fatalf("public key encoding %q", enc)
	return ""
}

// FuzzProviders is the round trip every provider passes: a request signed the
// provider's way verifies, its documents are what was signed, and the same request
// with one byte of the body changed does not verify.
//
//	go test -run='^$' -fuzz='^FuzzProviders$' -fuzztime=30s ./internal/provider/
func FuzzProviders(f *testing.F) {
	all := All()
	for i := range all {
		f.Add(uint8(i), []byte(`{"id":"evt_1","type":"payment.captured","data":{"id":"pay_1","amount":1200}}`), uint16(7), uint8(1))
		f.Add(uint8(i), []byte(`{}`), uint16(0), uint8(0x80))
	}
	now := time.Unix(1767225600, 0)
	f.Fuzz(func(t *testing.T, index uint8, body []byte, at uint16, flip uint8) {
		if len(body) == 0 || flip == 0 {
			return
		}
		p := all[int(index)%len(all)]
		s := signerFor(t, p)(t, body, now)
		verifier, err := NewVerifier(s.spec, []signature.Secret{{Value: s.secret}})
		if err != nil {
			t.Fatalf("%s: %v", p.Type, err)
		}
		if _, err := verifier.Open(s.req); err != nil {
			t.Fatalf("%s: a signed request does not verify: %v", p.Type, err)
		}
		changed := slices.Clone(s.req.Body)
		changed[int(at)%len(changed)] ^= flip
		s.req.Body = changed
		if p.BodyUnsigned {
			// Nothing binds the body: the credential alone verifies.
			if _, err := verifier.Open(s.req); err != nil {
				t.Fatalf("%s: the credential no longer verifies with byte %d of the body changed: %v", p.Type, int(at)%len(changed), err)
			}
			return
		}
		if _, err := verifier.Open(s.req); err == nil {
			t.Fatalf("%s: the request verifies with byte %d of the body changed", p.Type, int(at)%len(changed))
		}
	})
}

// TestEveryProviderIsWhole checks that each provider in the CRD enum is registered,
// and has vectors, a test signer, a sample and a row in docs/providers.md.
func TestEveryProviderIsWhole(t *testing.T) {
	src, err := os.ReadFile("../../api/v1alpha1/webhookendpoint_types.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`\+kubebuilder:validation:Enum=(.*)\ntype ProviderType string`).FindSubmatch(src)
	if m == nil {
		t.Fatal("no ProviderType enum marker")
	}
	enum := strings.Split(string(m[1]), ";")
	var registered []string
	for _, p := range All() {
		registered = append(registered, string(p.Type))
	}
	slices.Sort(enum)
	if !slices.Equal(enum, registered) {
		t.Fatalf("the CRD enum %v and the registered providers %v differ", enum, registered)
	}
	vectors := map[string]int{}
	for _, v := range loadVectors(t) {
		vectors[v.Provider]++
	}
	for _, p := range All() {
		if vectors[string(p.Type)] == 0 {
			t.Errorf("%s has no test vector in testdata/providers/", p.Type)
		}
		if _, err := os.Stat("../../" + samplePath(p.Type)); err != nil {
			t.Errorf("%s has no sample: %v", p.Type, err)
		}
		_ = signerFor(t, p)
	}
}

// samplePath is the sample of a provider, relative to the repository root.
func samplePath(t v1alpha1.ProviderType) string {
	old := "config/samples/hookkeeper_v1alpha1_webhookendpoint_" + strings.ToLower(string(t)) + ".yaml"
	if t == v1alpha1.ProviderStripe {
		old = "config/samples/hookkeeper_v1alpha1_webhookendpoint_stripe_orders.yaml"
	}
	if _, err := os.Stat("../../" + old); err == nil {
		return old
	}
	return "config/samples/providers/" + strings.ToLower(string(t)) + ".yaml"
}

const (
	tableBegin = "<!-- provider-table:begin (generated by `make provider-docs`) -->\n"
	tableEnd   = "<!-- provider-table:end -->\n"
)

// renderTable is the provider table of docs/providers.md.
func renderTable() string {
	var b strings.Builder
	b.WriteString("| Provider | Scheme | Signed | Timestamp (within `tolerance`) | Handshake | Key | Presets: id · type · entityKey · amount · occurredAt | Sample |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	dash := func(s string) string {
		if s == "" {
			return "—"
		}
		return s
	}
	code := func(s string) string {
		if s == "" {
			return "—"
		}
		return "`" + strings.ReplaceAll(s, "|", `\|`) + "`"
	}
	for _, p := range All() {
		pr := p.Preset
		sample := samplePath(p.Type)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | [%s](../%s) |\n",
			dash(p.Doc.Source), p.Doc.Scheme, p.Doc.Signed, dash(p.Doc.Timestamp), dash(p.Doc.Handshake), dash(p.Doc.Key),
			strings.Join([]string{code(pr.ID), code(pr.Type), code(pr.EntityKey), code(pr.Amount), code(pr.OccurredAt)}, " · "),
			sample[strings.LastIndexByte(sample, '/')+1:], sample)
	}
	return b.String()
}

// TestProviderTable keeps docs/providers.md's table equal to the registry; run
// `make provider-docs` (this test with -update) after changing a provider.
func TestProviderTable(t *testing.T) {
	const path = "../../docs/providers.md"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	begin, end := strings.Index(doc, tableBegin), strings.Index(doc, tableEnd)
	if begin < 0 || end < begin {
		t.Fatalf("%s has no provider table markers", path)
	}
	want := doc[:begin+len(tableBegin)] + renderTable() + doc[end:]
	if want == doc {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil { //nolint:gosec // a docs file, world-readable like the rest of the tree
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("the provider table in %s is stale; run `make provider-docs`", path)
}
