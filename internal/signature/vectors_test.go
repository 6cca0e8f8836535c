package signature

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// vector is one entry of testdata/vectors.json; see testdata/README.md for the sources.
type vector struct {
	Name            string             `json:"name"`
	Provider        string             `json:"provider"`
	Published       bool               `json:"published"`
	Source          string             `json:"source"`
	HMAC            *v1alpha1.HMACSpec `json:"hmac"`
	Secret          string             `json:"secret"`
	PreviousSecret  string             `json:"previousSecret"`
	Body            string             `json:"body"`
	Headers         map[string]string  `json:"headers"`
	SignatureHeader string             `json:"signatureHeader"`
	TimestampHeader string             `json:"timestampHeader"`
	IDHeader        string             `json:"idHeader"`
	Now             int64              `json:"now"`
}

func loadVectors(t testing.TB) []vector {
	t.Helper()
	raw, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatalf("read vectors: %v", err)
	}
	var file struct {
		Vectors []vector `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatalf("parse vectors: %v", err)
	}
	if len(file.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	for _, v := range file.Vectors {
		if v.Source == "" {
			t.Fatalf("vector %s has no source", v.Name)
		}
	}
	return file.Vectors
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
	return v1alpha1.ProviderSpec{Type: v1alpha1.ProviderType(v.Provider), HMAC: v.HMAC}
}

func (v vector) now() time.Time { return time.Unix(v.Now, 0) }

func (v vector) request() Request {
	h := http.Header{}
	for name, value := range v.Headers {
		h.Set(name, value)
	}
	return Request{Header: h, Body: []byte(v.Body), Now: v.now()}
}

// isAdyenItemForm reports whether the vector's signatures live in the body.
func (v vector) isAdyenItemForm() bool {
	return v.Provider == string(v1alpha1.ProviderAdyen) && v.SignatureHeader == ""
}

// wrongSecret returns a secret that decodes under the provider's key encoding but is
// not the vector's.
func (v vector) wrongSecret() string {
	switch {
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

func mustNew(t *testing.T, spec v1alpha1.ProviderSpec, secrets ...Secret) Verifier {
	t.Helper()
	v, err := New(spec, secrets)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return v
}

// expectReason fails unless err is an *Error with the reason (nil for success), and
// checks that the error text carries no secret material or expected signature.
func expectReason(t *testing.T, err error, want Reason, v vector) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("want success, got %v", err)
		}
		return
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("want *Error with reason %s, got %v", want, err)
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

// tamperSignature changes the first symbol of the (first) signature the vector carries.
func (v vector) tamperSignature(req *Request) {
	if v.isAdyenItemForm() {
		const marker = `"hmacSignature":"`
		i := strings.Index(string(req.Body), marker) + len(marker)
		req.Body = []byte(tamper(string(req.Body), i))
		return
	}
	value := req.Header.Get(v.SignatureHeader)
	start := 0
	for _, prefix := range []string{"t=", "v1,", "v0=", "sha256=", "sha1="} {
		if strings.HasPrefix(value, prefix) {
			start = len(prefix)
		}
	}
	if v.Provider == string(v1alpha1.ProviderStripe) {
		start = strings.Index(value, "v1=") + len("v1=")
	}
	req.Header.Set(v.SignatureHeader, tamper(value, start))
}

// tamperBody changes one byte the signature covers.
func (v vector) tamperBody(req *Request) {
	if v.isAdyenItemForm() {
		const marker = `"pspReference":"`
		i := strings.Index(string(req.Body), marker) + len(marker)
		req.Body = []byte(tamper(string(req.Body), i))
		return
	}
	body := []byte(string(req.Body))
	body[len(body)/2] ^= 0x01
	req.Body = body
}

// timestampText returns the signed timestamp of the vector and a setter for it.
func (v vector) timestamp(req Request) (string, func(string)) {
	if v.Provider == string(v1alpha1.ProviderStripe) {
		value := req.Header.Get(HeaderStripeSignature)
		ts, rest, _ := strings.Cut(strings.TrimPrefix(value, "t="), ",")
		return ts, func(s string) { req.Header.Set(HeaderStripeSignature, "t="+s+","+rest) }
	}
	if v.TimestampHeader == "" {
		return "", nil
	}
	return req.Header.Get(v.TimestampHeader), func(s string) { req.Header.Set(v.TimestampHeader, s) }
}

func forEachVector(t *testing.T, fn func(t *testing.T, v vector)) {
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) { fn(t, v) })
	}
}

func TestVectorsVerify(t *testing.T) {
	forEachVector(t, func(t *testing.T, v vector) {
		err := mustNew(t, v.spec(), Secret{Value: v.Secret}).Verify(v.request())
		expectReason(t, err, "", v)
	})
}

func TestVectorsWrongSecretMismatches(t *testing.T) {
	forEachVector(t, func(t *testing.T, v vector) {
		err := mustNew(t, v.spec(), Secret{Value: v.wrongSecret()}).Verify(v.request())
		expectReason(t, err, ReasonMismatch, v)
	})
}

func TestVectorsOneByteChanges(t *testing.T) {
	forEachVector(t, func(t *testing.T, v vector) {
		verifier := mustNew(t, v.spec(), Secret{Value: v.Secret})

		t.Run("body", func(t *testing.T) {
			req := v.request()
			v.tamperBody(&req)
			expectReason(t, verifier.Verify(req), ReasonMismatch, v)
		})
		t.Run("signature", func(t *testing.T) {
			req := v.request()
			v.tamperSignature(&req)
			expectReason(t, verifier.Verify(req), ReasonMismatch, v)
		})
		t.Run("id", func(t *testing.T) {
			if v.IDHeader == "" {
				t.Skip("the scheme signs no id")
			}
			req := v.request()
			req.Header.Set(v.IDHeader, tamper(req.Header.Get(v.IDHeader), 0))
			expectReason(t, verifier.Verify(req), ReasonMismatch, v)
		})
		t.Run("timestamp", func(t *testing.T) {
			req := v.request()
			ts, set := v.timestamp(req)
			if set == nil {
				t.Skip("the scheme signs no timestamp")
			}
			// One second later is still inside the tolerance, so only the MAC catches it.
			n, err := strconv.ParseInt(ts, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			set(strconv.FormatInt(n+1, 10))
			expectReason(t, verifier.Verify(req), ReasonMismatch, v)
		})
	})
}

func TestVectorsTimestampTolerance(t *testing.T) {
	forEachVector(t, func(t *testing.T, v vector) {
		req := v.request()
		ts, set := v.timestamp(req)
		if set == nil {
			t.Skip("the scheme signs no timestamp")
		}
		signedAt, err := strconv.ParseInt(ts, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		signed := time.Unix(signedAt, 0)
		verifier := mustNew(t, v.spec(), Secret{Value: v.Secret})

		for _, tc := range []struct {
			name string
			now  time.Time
			want Reason
		}{
			{"at the signed time", signed, ""},
			{"at the edge of the default tolerance", signed.Add(v1alpha1.DefaultTolerance), ""},
			{"just past the tolerance", signed.Add(v1alpha1.DefaultTolerance + time.Second), ReasonTimestampOutOfTolerance},
			{"just before a future timestamp's tolerance", signed.Add(-v1alpha1.DefaultTolerance - time.Second), ReasonTimestampOutOfTolerance},
			{"a day later (replay)", signed.Add(24 * time.Hour), ReasonTimestampOutOfTolerance},
		} {
			t.Run(tc.name, func(t *testing.T) {
				req := v.request()
				req.Now = tc.now
				expectReason(t, verifier.Verify(req), tc.want, v)
			})
		}

		t.Run("spec tolerance is honoured", func(t *testing.T) {
			spec := v.spec()
			spec.Tolerance = &metav1.Duration{Duration: 10 * time.Second}
			narrow := mustNew(t, spec, Secret{Value: v.Secret})
			req := v.request()
			req.Now = signed.Add(11 * time.Second)
			expectReason(t, narrow.Verify(req), ReasonTimestampOutOfTolerance, v)
			req.Now = signed.Add(10 * time.Second)
			expectReason(t, narrow.Verify(req), "", v)
		})

		for _, bad := range []string{"", "-1", "+1700000000", "1.5", "0x10", "１２", "99999999999999999999999"} {
			t.Run("timestamp "+strconv.Quote(bad), func(t *testing.T) {
				req := v.request()
				_, set := v.timestamp(req)
				set(bad)
				err := verifier.Verify(req)
				want := ReasonMalformedHeader
				if bad == "" && v.Provider != string(v1alpha1.ProviderStripe) {
					want = ReasonMissingHeader
				}
				expectReason(t, err, want, v)
			})
		}
		t.Run("far past timestamp, correctly signed", func(t *testing.T) {
			// A correctly formed but ancient timestamp must fail on tolerance, not slip
			// through an overflow in the age arithmetic.
			req := v.request()
			_, set := v.timestamp(req)
			set("0")
			expectReason(t, verifier.Verify(req), ReasonTimestampOutOfTolerance, v)
			set("999999999999999999")
			expectReason(t, verifier.Verify(req), ReasonTimestampOutOfTolerance, v)
		})
	})
}

func TestVectorsSecretLifecycle(t *testing.T) {
	forEachVector(t, func(t *testing.T, v vector) {
		now := v.now()
		t.Run("expired secret is ignored", func(t *testing.T) {
			verifier := mustNew(t, v.spec(),
				Secret{Value: v.Secret, ExpiresAt: now.Add(-time.Second)},
				Secret{Value: v.wrongSecret()})
			expectReason(t, verifier.Verify(v.request()), ReasonMismatch, v)
		})
		t.Run("a secret expires exactly at ExpiresAt", func(t *testing.T) {
			verifier := mustNew(t, v.spec(), Secret{Value: v.Secret, ExpiresAt: now})
			expectReason(t, verifier.Verify(v.request()), ReasonNoActiveSecret, v)
		})
		t.Run("only expired secrets", func(t *testing.T) {
			verifier := mustNew(t, v.spec(), Secret{Value: v.Secret, ExpiresAt: now.Add(-time.Hour)})
			expectReason(t, verifier.Verify(v.request()), ReasonNoActiveSecret, v)
		})
		t.Run("secret before its expiry verifies", func(t *testing.T) {
			verifier := mustNew(t, v.spec(), Secret{Value: v.Secret, ExpiresAt: now.Add(time.Second)})
			expectReason(t, verifier.Verify(v.request()), "", v)
		})
		t.Run("second secret of a rotation verifies", func(t *testing.T) {
			verifier := mustNew(t, v.spec(),
				Secret{Value: v.wrongSecret()},
				Secret{Value: v.Secret, ExpiresAt: now.Add(24 * time.Hour)})
			expectReason(t, verifier.Verify(v.request()), "", v)
		})
		t.Run("zero request time verifies nothing", func(t *testing.T) {
			verifier := mustNew(t, v.spec(), Secret{Value: v.Secret})
			req := v.request()
			req.Now = time.Time{}
			expectReason(t, verifier.Verify(req), ReasonNoActiveSecret, v)
		})
	})
}

func TestVectorsMissingAndDuplicateHeaders(t *testing.T) {
	forEachVector(t, func(t *testing.T, v vector) {
		verifier := mustNew(t, v.spec(), Secret{Value: v.Secret})
		for name := range v.Headers {
			t.Run("without "+name, func(t *testing.T) {
				req := v.request()
				req.Header.Del(name)
				want := ReasonMissingHeader
				if name == HeaderAdyenHmacSignature {
					// Without the header, Adyen falls back to per-item signatures, and this
					// body is not a notification batch.
					want = ReasonMalformedHeader
				}
				expectReason(t, verifier.Verify(req), want, v)
			})
			t.Run("empty "+name, func(t *testing.T) {
				req := v.request()
				req.Header.Set(name, "")
				want := ReasonMissingHeader
				if name == HeaderAdyenHmacSignature {
					want = ReasonMalformedHeader
				}
				expectReason(t, verifier.Verify(req), want, v)
			})
			t.Run("twice "+name, func(t *testing.T) {
				req := v.request()
				req.Header.Add(name, req.Header.Get(name))
				expectReason(t, verifier.Verify(req), ReasonMalformedHeader, v)
			})
		}
		t.Run("no headers at all", func(t *testing.T) {
			req := v.request()
			req.Header = http.Header{}
			err := verifier.Verify(req)
			if v.isAdyenItemForm() {
				expectReason(t, err, "", v) // the item form carries its signatures in the body
				return
			}
			if err == nil {
				t.Fatal("a request without headers verified")
			}
		})
		t.Run("nil header map", func(t *testing.T) {
			req := v.request()
			req.Header = nil
			if v.isAdyenItemForm() {
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
			_, err := New(v.spec(), nil)
			if !errors.Is(err, ErrNoSecrets) {
				t.Fatalf("want ErrNoSecrets, got %v", err)
			}
		})
		t.Run("empty secret names its index", func(t *testing.T) {
			_, err := New(v.spec(), []Secret{{Value: v.Secret}, {Value: ""}})
			if err == nil || !strings.Contains(err.Error(), "signing secret 1") {
				t.Fatalf("want an error naming secret 1, got %v", err)
			}
		})
		t.Run("whitespace around a secret", func(t *testing.T) {
			_, err := New(v.spec(), []Secret{{Value: v.Secret + "\n"}})
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
		{"hmac base64", v1alpha1.ProviderSpec{Type: v1alpha1.ProviderHMAC, HMAC: &v1alpha1.HMACSpec{Header: "X-Sig", KeyEncoding: v1alpha1.KeyBase64}}, "%%%secret%%%"},
		{"hmac hex", v1alpha1.ProviderSpec{Type: v1alpha1.ProviderHMAC, HMAC: &v1alpha1.HMACSpec{Header: "X-Sig", KeyEncoding: v1alpha1.KeyHex}}, "zzsecretzz"},
		{"hmac whsec", v1alpha1.ProviderSpec{Type: v1alpha1.ProviderHMAC, HMAC: &v1alpha1.HMACSpec{Header: "X-Sig", KeyEncoding: v1alpha1.KeyWhsec}}, "whsec_@@secret@@"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			good := map[v1alpha1.ProviderType]string{
				v1alpha1.ProviderAdyen:            "00",
				v1alpha1.ProviderStandardWebhooks: "whsec_AA==",
				v1alpha1.ProviderHMAC:             "",
			}[tc.spec.Type]
			secrets := []Secret{{Value: tc.secret}}
			index := "signing secret 0"
			if good != "" {
				secrets = []Secret{{Value: good}, {Value: tc.secret}}
				index = "signing secret 1"
			}
			_, err := New(tc.spec, secrets)
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
