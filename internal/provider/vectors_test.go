package provider

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// vector is one signed request of testdata/vectors.json or testdata/providers/*.json;
// testdata/README.md quotes the source of each.
type vector struct {
	Name      string                `json:"name"`
	Provider  string                `json:"provider"`
	Published bool                  `json:"published"`
	Source    string                `json:"source"`
	HMAC      *v1alpha1.HMACSpec    `json:"hmac"`
	Ed25519   *v1alpha1.Ed25519Spec `json:"ed25519"`
	SignedURL string                `json:"signedURL"`
	Method    string                `json:"method"`
	// WrongSecret is a secret of the provider's key form that is not the vector's;
	// computed from the key encoding when empty.
	WrongSecret     string            `json:"wrongSecret"`
	Secret          string            `json:"secret"`
	PreviousSecret  string            `json:"previousSecret"`
	Body            string            `json:"body"`
	Headers         map[string]string `json:"headers"`
	SignatureHeader string            `json:"signatureHeader"`
	TimestampHeader string            `json:"timestampHeader"`
	IDHeader        string            `json:"idHeader"`
	Now             int64             `json:"now"`
}

func loadVectors(t testing.TB) []vector {
	t.Helper()
	files, err := filepath.Glob("testdata/providers/*.json")
	if err != nil {
		t.Fatal(err)
	}
	var all []vector
	for _, path := range append([]string{"testdata/vectors.json"}, files...) {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("read vectors: %v", err)
		}
		var file struct {
			Vectors []vector `json:"vectors"`
		}
		if err := json.Unmarshal(raw, &file); err != nil {
			t.Fatalf("parse %s: %v", path, err)
		}
		if len(file.Vectors) == 0 {
			t.Fatalf("%s: no vectors", path)
		}
		for _, v := range file.Vectors {
			if v.Source == "" || v.Name == "" {
				t.Fatalf("%s: vector %q has no name or source", path, v.Name)
			}
			if _, ok := Lookup(v1alpha1.ProviderType(v.Provider)); !ok {
				t.Fatalf("%s: vector %s names unknown provider %q", path, v.Name, v.Provider)
			}
		}
		all = append(all, file.Vectors...)
	}
	return all
}

func vectorNamed(t testing.TB, name string) vector {
	t.Helper()
	for _, v := range loadVectors(t) {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no vector %s", name)
	return vector{}
}

func (v vector) spec() v1alpha1.ProviderSpec {
	return v1alpha1.ProviderSpec{Type: v1alpha1.ProviderType(v.Provider), HMAC: v.HMAC, Ed25519: v.Ed25519, SignedURL: v.SignedURL}
}

// scheme is the vector's signature scheme: the provider's fixed one, or the one its
// generic spec describes (mustNew reports a spec's problems); nil for a provider with
// its own verifier code.
func (v vector) scheme() *signature.Scheme {
	spec := v.spec()
	switch {
	case spec.HMAC != nil:
		s, _ := hmacScheme(spec)
		return &s
	case spec.Ed25519 != nil:
		s, _ := schemeFromSpec("spec.provider.ed25519", spec.Ed25519.SchemeSpec, spec.SignedURL)
		return &s
	}
	p, _ := Lookup(spec.Type)
	return p.Scheme
}

func (v vector) now() time.Time { return time.Unix(v.Now, 0) }

func (v vector) request() signature.Request {
	h := http.Header{}
	for name, value := range v.Headers {
		h.Set(name, value)
	}
	method := v.Method
	if method == "" {
		method = http.MethodPost
	}
	return signature.Request{Header: h, Body: []byte(v.Body), Method: method, Now: v.now()}
}

// isAdyenItemForm reports whether the vector's signatures live in the body.
func (v vector) isAdyenItemForm() bool {
	return v.Provider == string(v1alpha1.ProviderAdyen) && v.SignatureHeader == ""
}

// isMailgun reports whether the vector is Mailgun's: its signature, timestamp and token
// live in the body's signature object, and the body's event-data is not signed.
func (v vector) isMailgun() bool { return v.Provider == string(ProviderMailgun) }

// bodyString returns the span of the JSON string member that follows marker in body.
func bodyString(body []byte, marker string) (start, end int) {
	start = strings.Index(string(body), marker) + len(marker)
	return start, start + strings.IndexByte(string(body[start:]), '"')
}

// wrongSecret returns a secret that decodes under the provider's key encoding but is
// not the vector's.
func (v vector) wrongSecret() string {
	switch {
	case v.WrongSecret != "":
		return v.WrongSecret
	case v.Provider == string(v1alpha1.ProviderAdyen):
		return "00112233445566778899AABBCCDDEEFF00112233445566778899AABBCCDDEEFF"
	case v.Provider == string(v1alpha1.ProviderStandardWebhooks):
		return "whsec_c2VjcmV0LW9mLWEtcm90YXRlZC1lbmRwb2ludA=="
	case v.HMAC != nil && v.HMAC.KeyEncoding == v1alpha1.KeyHex:
		return "ffeeddccbbaa99887766554433221100"
	case v.HMAC != nil && v.HMAC.KeyEncoding == v1alpha1.KeyBase64:
		return "/+7dzLuqmYh3ZlVEMyIRAA=="
	default:
		return "an-entirely-different-secret"
	}
}

func mustNew(t *testing.T, spec v1alpha1.ProviderSpec, secrets ...signature.Secret) signature.Verifier {
	t.Helper()
	v, err := NewVerifier(spec, secrets)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return v
}

// expectReason fails unless err is an *signature.Error with the reason (nil for success), and
// checks that the error text carries no secret material or expected signature.
func expectReason(t *testing.T, err error, want signature.Reason, v vector) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("want success, got %v", err)
		}
		return
	}
	var e *signature.Error
	if !errors.As(err, &e) {
		t.Fatalf("want *signature.Error with reason %s, got %v", want, err)
	}
	if e.Reason != want {
		t.Fatalf("want reason %s, got %s (%v)", want, e.Reason, err)
	}
	assertNoLeak(t, err, v)
}

func assertNoLeak(t *testing.T, err error, v vector) {
	t.Helper()
	text := err.Error()
	for _, s := range []string{v.Secret, v.PreviousSecret, v.wrongSecret()} {
		if s != "" && strings.Contains(text, s) {
			t.Fatalf("error text contains a secret: %q", text)
		}
	}
	for _, value := range v.Headers {
		if len(value) > 16 && strings.Contains(text, value) {
			t.Fatalf("error text contains a header value: %q", text)
		}
	}
}

// tamper returns s with the byte at i replaced by the next symbol of its alphabet, so the
// result is still well-formed hex, base64 or digits but means something else.
func tamper(s string, i int) string {
	const hexDigits = "0123456789abcdef0"
	const b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/A"
	c := s[i]
	var r byte
	switch {
	case c >= '0' && c <= '9' || c >= 'a' && c <= 'f':
		r = hexDigits[strings.IndexByte(hexDigits, c)+1]
	case strings.IndexByte(b64, c) >= 0:
		r = b64[strings.IndexByte(b64, c)+1]
	default:
		r = c ^ 1
	}
	return s[:i] + string(r) + s[i+1:]
}

// inBody returns, for a vector whose signatures are in the body, the markers of the
// body's JSON string members that hold the (first) signature and a value it signs;
// empty for a signature in a header.
func (v vector) inBody() (signatureMarker, signedMarker string) {
	switch {
	case v.isAdyenItemForm():
		return `"hmacSignature":"`, `"pspReference":"`
	case v.isMailgun():
		return `"signature":"`, `"token":"`
	}
	return "", ""
}

// tamperBodyString changes the first symbol of the JSON string member that follows
// marker in the body.
func tamperBodyString(req *signature.Request, marker string) {
	i, _ := bodyString(req.Body, marker)
	req.Body = []byte(tamper(string(req.Body), i))
}

// tamperSignature changes the first symbol of the (first) signature the vector carries.
func (v vector) tamperSignature(req *signature.Request) {
	if marker, _ := v.inBody(); marker != "" {
		tamperBodyString(req, marker)
		return
	}
	value := req.Header.Get(v.SignatureHeader)
	start := 0
	for _, prefix := range []string{"t=", "v1,", "v0=", "sha256=", "sha1="} {
		if strings.HasPrefix(value, prefix) {
			start = len(prefix)
		}
	}
	if scheme := v.scheme(); scheme != nil {
		if c := scheme.Composite; c != nil {
			start = strings.Index(value, c.SignatureKey+c.KeyValueSeparator) + len(c.SignatureKey+c.KeyValueSeparator)
		} else if strings.HasPrefix(value, scheme.Prefix) {
			start = len(scheme.Prefix)
		}
	}
	req.Header.Set(v.SignatureHeader, tamper(value, start))
}

// tamperBody changes one byte the signature covers (for Mailgun, of the token: its
// event-data is not signed).
func (v vector) tamperBody(req *signature.Request) {
	if _, marker := v.inBody(); marker != "" {
		tamperBodyString(req, marker)
		return
	}
	body := []byte(string(req.Body))
	body[len(body)/2] ^= 0x01
	req.Body = body
}

// timestamp returns the signed timestamp of the vector as sent and a setter for it; a
// nil setter when the scheme signs none.
func (v vector) timestamp(req *signature.Request) (string, func(string)) {
	if v.isMailgun() {
		start, end := bodyString(req.Body, `"timestamp":"`)
		return string(req.Body[start:end]), func(s string) {
			start, end := bodyString(req.Body, `"timestamp":"`)
			req.Body = []byte(string(req.Body[:start]) + s + string(req.Body[end:]))
		}
	}
	if scheme := v.scheme(); scheme != nil && scheme.Composite != nil && scheme.Composite.TimestampKey != "" {
		c := scheme.Composite
		value := req.Header.Get(v.SignatureHeader)
		var ts string
		pairs := strings.Split(value, c.PairSeparator)
		at := -1
		for i, pair := range pairs {
			if k, val, _ := strings.Cut(pair, c.KeyValueSeparator); k == c.TimestampKey {
				ts, at = val, i
			}
		}
		return ts, func(s string) {
			pairs[at] = c.TimestampKey + c.KeyValueSeparator + s
			req.Header.Set(v.SignatureHeader, strings.Join(pairs, c.PairSeparator))
		}
	}
	if v.TimestampHeader == "" {
		return "", nil
	}
	return req.Header.Get(v.TimestampHeader), func(s string) { req.Header.Set(v.TimestampHeader, s) }
}

// timestampFormat is the wire format of the vector's signed timestamp.
func (v vector) timestampFormat() v1alpha1.TimestampFormat {
	if s := v.scheme(); s != nil && s.TimestampFormat != "" {
		return s.TimestampFormat
	}
	return v1alpha1.TimestampUnix
}

func forEachVector(t *testing.T, fn func(t *testing.T, v vector)) {
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) { fn(t, v) })
	}
}

// discordVectorSeed is the Ed25519 seed the discord-*-computed vectors were signed with
// (with openssl; see their source). This test re-derives their public key with
// crypto/ed25519, so the vectors agree with two implementations.
const discordVectorSeed = "hookkeeper discord vector seed!!"

func TestDiscordVectorKey(t *testing.T) {
	private := ed25519.NewKeyFromSeed([]byte(discordVectorSeed))
	public := hex.EncodeToString(private.Public().(ed25519.PublicKey))
	for _, name := range []string{"discord-event-computed", "discord-ping-computed"} {
		v := vectorNamed(t, name)
		if v.Secret != public {
			t.Fatalf("%s: public key %s, the seed gives %s", name, v.Secret, public)
		}
		sig := hex.EncodeToString(ed25519.Sign(private, []byte(v.Headers["X-Signature-Timestamp"]+v.Body)))
		if sig != v.Headers["X-Signature-Ed25519"] {
			t.Fatalf("%s: crypto/ed25519 signs %s, the vector has %s", name, sig, v.Headers["X-Signature-Ed25519"])
		}
	}
}

func TestVectorsVerify(t *testing.T) {
	forEachVector(t, func(t *testing.T, v vector) {
		err := mustNew(t, v.spec(), signature.Secret{Value: v.Secret}).Verify(v.request())
		expectReason(t, err, "", v)
	})
}

func TestVectorsWrongSecretMismatches(t *testing.T) {
	forEachVector(t, func(t *testing.T, v vector) {
		err := mustNew(t, v.spec(), signature.Secret{Value: v.wrongSecret()}).Verify(v.request())
		expectReason(t, err, signature.ReasonMismatch, v)
	})
}

func TestVectorsOneByteChanges(t *testing.T) {
	forEachVector(t, func(t *testing.T, v vector) {
		verifier := mustNew(t, v.spec(), signature.Secret{Value: v.Secret})

		t.Run("body", func(t *testing.T) {
			if p, _ := Lookup(v1alpha1.ProviderType(v.Provider)); p.BodyUnsigned {
				t.Skip("the provider's credential does not bind the body")
			}
			req := v.request()
			v.tamperBody(&req)
			expectReason(t, verifier.Verify(req), signature.ReasonMismatch, v)
		})
		t.Run("signature", func(t *testing.T) {
			req := v.request()
			v.tamperSignature(&req)
			expectReason(t, verifier.Verify(req), signature.ReasonMismatch, v)
		})
		t.Run("id", func(t *testing.T) {
			if v.IDHeader == "" {
				t.Skip("the scheme signs no id")
			}
			req := v.request()
			req.Header.Set(v.IDHeader, tamper(req.Header.Get(v.IDHeader), 0))
			expectReason(t, verifier.Verify(req), signature.ReasonMismatch, v)
		})
		t.Run("timestamp", func(t *testing.T) {
			req := v.request()
			at, set := v.signedAt(t, &req)
			// One second later is still inside the tolerance, so only the MAC catches it.
			set(signature.FormatTimestamp(v.timestampFormat(), at.Add(time.Second)))
			expectReason(t, verifier.Verify(req), signature.ReasonMismatch, v)
		})
	})
}

// signedAt is the time the vector's request (req) signs, and the setter of its
// timestamp; the test is skipped when the scheme signs none.
func (v vector) signedAt(t *testing.T, req *signature.Request) (time.Time, func(string)) {
	t.Helper()
	ts, set := v.timestamp(req)
	if set == nil {
		t.Skip("the scheme signs no timestamp")
	}
	format := v.timestampFormat()
	at, ok := signature.ParseTimestamp(format, ts)
	if !ok {
		t.Fatalf("the vector's timestamp %q is not %s", ts, format)
	}
	return at, set
}

func TestVectorsTimestampTolerance(t *testing.T) {
	forEachVector(t, func(t *testing.T, v vector) {
		req := v.request()
		signed, _ := v.signedAt(t, &req)
		verifier := mustNew(t, v.spec(), signature.Secret{Value: v.Secret})

		expectDefaultTolerance(t, verifier, v, signed, time.Second)

		t.Run("spec tolerance is honoured", func(t *testing.T) {
			expectSpecTolerance(t, v, signed, 10*time.Second)
		})

		for _, bad := range []string{"", "-1", "+1700000000", "1.5", "0x10", "１２", "99999999999999999999999"} {
			t.Run("timestamp "+strconv.Quote(bad), func(t *testing.T) {
				req := v.request()
				_, set := v.timestamp(&req)
				set(bad)
				err := verifier.Verify(req)
				want := signature.ReasonMalformedHeader
				if scheme := v.scheme(); bad == "" && (scheme == nil || scheme.Composite == nil) {
					want = signature.ReasonMissingHeader
				}
				expectReason(t, err, want, v)
			})
		}
		t.Run("far past timestamp, correctly signed", func(t *testing.T) {
			// A correctly formed but ancient timestamp must fail on tolerance, not slip
			// through an overflow in the age arithmetic.
			req := v.request()
			_, set := v.timestamp(&req)
			set(signature.FormatTimestamp(v.timestampFormat(), time.Unix(0, 0)))
			expectReason(t, verifier.Verify(req), signature.ReasonTimestampOutOfTolerance, v)
			set(signature.FormatTimestamp(v.timestampFormat(), time.Unix(99999999999, 0)))
			expectReason(t, verifier.Verify(req), signature.ReasonTimestampOutOfTolerance, v)
		})
	})
}

func TestVectorsSecretLifecycle(t *testing.T) {
	forEachVector(t, func(t *testing.T, v vector) {
		now := v.now()
		t.Run("expired secret is ignored", func(t *testing.T) {
			verifier := mustNew(t, v.spec(),
				signature.Secret{Value: v.Secret, ExpiresAt: now.Add(-time.Second)},
				signature.Secret{Value: v.wrongSecret()})
			expectReason(t, verifier.Verify(v.request()), signature.ReasonMismatch, v)
		})
		t.Run("a secret expires exactly at ExpiresAt", func(t *testing.T) {
			verifier := mustNew(t, v.spec(), signature.Secret{Value: v.Secret, ExpiresAt: now})
			expectReason(t, verifier.Verify(v.request()), signature.ReasonNoActiveSecret, v)
		})
		t.Run("only expired secrets", func(t *testing.T) {
			verifier := mustNew(t, v.spec(), signature.Secret{Value: v.Secret, ExpiresAt: now.Add(-time.Hour)})
			expectReason(t, verifier.Verify(v.request()), signature.ReasonNoActiveSecret, v)
		})
		t.Run("secret before its expiry verifies", func(t *testing.T) {
			verifier := mustNew(t, v.spec(), signature.Secret{Value: v.Secret, ExpiresAt: now.Add(time.Second)})
			expectReason(t, verifier.Verify(v.request()), "", v)
		})
		t.Run("second secret of a rotation verifies", func(t *testing.T) {
			verifier := mustNew(t, v.spec(),
				signature.Secret{Value: v.wrongSecret()},
				signature.Secret{Value: v.Secret, ExpiresAt: now.Add(24 * time.Hour)})
			expectReason(t, verifier.Verify(v.request()), "", v)
		})
		t.Run("zero request time verifies nothing", func(t *testing.T) {
			verifier := mustNew(t, v.spec(), signature.Secret{Value: v.Secret})
			req := v.request()
			req.Now = time.Time{}
			expectReason(t, verifier.Verify(req), signature.ReasonNoActiveSecret, v)
		})
	})
}

func TestVectorsMissingAndDuplicateHeaders(t *testing.T) {
	forEachVector(t, func(t *testing.T, v vector) {
		verifier := mustNew(t, v.spec(), signature.Secret{Value: v.Secret})
		for name := range v.Headers {
			for _, absent := range []struct {
				how  string
				edit func(http.Header)
			}{
				{"without", func(h http.Header) { h.Del(name) }},
				{"empty", func(h http.Header) { h.Set(name, "") }},
			} {
				t.Run(absent.how+" "+name, func(t *testing.T) {
					req := v.request()
					absent.edit(req.Header)
					want := signature.ReasonMissingHeader
					if name == HeaderAdyenHmacSignature {
						// Without the header (or with it empty), Adyen falls back to per-item
						// signatures, and this body is not a notification batch.
						want = signature.ReasonMalformedHeader
					}
					expectReason(t, verifier.Verify(req), want, v)
				})
			}
			t.Run("twice "+name, func(t *testing.T) {
				req := v.request()
				req.Header.Add(name, req.Header.Get(name))
				expectReason(t, verifier.Verify(req), signature.ReasonMalformedHeader, v)
			})
		}
		t.Run("no headers at all", func(t *testing.T) {
			req := v.request()
			req.Header = http.Header{}
			err := verifier.Verify(req)
			if v.isAdyenItemForm() || v.isMailgun() {
				expectReason(t, err, "", v) // the signatures are in the body
				return
			}
			if err == nil {
				t.Fatal("a request without headers verified")
			}
		})
		t.Run("nil header map", func(t *testing.T) {
			req := v.request()
			req.Header = nil
			if v.isAdyenItemForm() || v.isMailgun() {
				expectReason(t, verifier.Verify(req), "", v)
				return
			}
			if verifier.Verify(req) == nil {
				t.Fatal("a request with a nil header map verified")
			}
		})
	})
}

func TestNewFailsClosedOnBadSecrets(t *testing.T) {
	forEachVector(t, func(t *testing.T, v vector) {
		t.Run("no secrets", func(t *testing.T) {
			_, err := NewVerifier(v.spec(), nil)
			if !errors.Is(err, signature.ErrNoSecrets) {
				t.Fatalf("want signature.ErrNoSecrets, got %v", err)
			}
		})
		t.Run("empty secret names its index", func(t *testing.T) {
			_, err := NewVerifier(v.spec(), []signature.Secret{{Value: v.Secret}, {Value: ""}})
			if err == nil || !strings.Contains(err.Error(), "signing secret 1") {
				t.Fatalf("want an error naming secret 1, got %v", err)
			}
		})
		t.Run("whitespace around a secret", func(t *testing.T) {
			_, err := NewVerifier(v.spec(), []signature.Secret{{Value: v.Secret + "\n"}})
			if err == nil || !strings.Contains(err.Error(), "signing secret 0") {
				t.Fatalf("want an error naming secret 0, got %v", err)
			}
			assertNoLeak(t, err, v)
		})
	})
}

func TestNewRejectsUndecodableKeys(t *testing.T) {
	cases := []struct {
		name   string
		spec   v1alpha1.ProviderSpec
		secret string
	}{
		{"adyen odd hex", v1alpha1.ProviderSpec{Type: v1alpha1.ProviderAdyen}, "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA05"},
		{"adyen not hex", v1alpha1.ProviderSpec{Type: v1alpha1.ProviderAdyen}, "not-hex-at-all-secret-value"},
		{"standard webhooks not base64", v1alpha1.ProviderSpec{Type: v1alpha1.ProviderStandardWebhooks}, "whsec_not*base64*secret"},
		{"standard webhooks bare prefix", v1alpha1.ProviderSpec{Type: v1alpha1.ProviderStandardWebhooks}, "whsec_"},
		{"hmac base64", v1alpha1.ProviderSpec{Type: v1alpha1.ProviderHMAC, HMAC: &v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Sig"}, KeyEncoding: v1alpha1.KeyBase64}}, "%%%secret%%%"},
		{"hmac hex", v1alpha1.ProviderSpec{Type: v1alpha1.ProviderHMAC, HMAC: &v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Sig"}, KeyEncoding: v1alpha1.KeyHex}}, "zzsecretzz"},
		{"hmac whsec", v1alpha1.ProviderSpec{Type: v1alpha1.ProviderHMAC, HMAC: &v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Sig"}, KeyEncoding: v1alpha1.KeyWhsec}}, "whsec_@@secret@@"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			good := map[v1alpha1.ProviderType]string{
				v1alpha1.ProviderAdyen:            "00",
				v1alpha1.ProviderStandardWebhooks: "whsec_AA==",
				v1alpha1.ProviderHMAC:             "",
			}[tc.spec.Type]
			secrets := []signature.Secret{{Value: tc.secret}}
			index := "signing secret 0"
			if good != "" {
				secrets = []signature.Secret{{Value: good}, {Value: tc.secret}}
				index = "signing secret 1"
			}
			_, err := NewVerifier(tc.spec, secrets)
			if err == nil {
				t.Fatal("an undecodable key was accepted")
			}
			if !strings.Contains(err.Error(), index) {
				t.Fatalf("error does not name the index: %v", err)
			}
			if strings.Contains(err.Error(), tc.secret) {
				t.Fatalf("error contains the secret: %v", err)
			}
		})
	}
}
