package signature

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature/sigtest"
)

var testNow = time.Unix(1767225600, 0)

func hmacVerifier(t *testing.T, scheme Scheme, secrets ...string) *SchemeVerifier {
	t.Helper()
	var ss []Secret
	for _, s := range secrets {
		ss = append(ss, Secret{Value: s})
	}
	keys, err := NewHMACKeyring(sha256.New, v1alpha1.KeyRaw, ss)
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewSchemeVerifier(scheme, keys, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// macHex is hex HMAC-SHA256 of msg under key, computed apart from the verifiers.
func macHex(key, msg string) string {
	return hex.EncodeToString(sigtest.MAC(sha256.New, []byte(key), msg))
}

// A composite header carries its timestamp and several signatures; every malformed
// shape fails closed with the reason a metric can count.
func TestCompositeHeader(t *testing.T) {
	scheme := Scheme{
		HeaderSets: []HeaderSet{{Signature: "Paddle-Signature"}},
		Composite:  &Composite{PairSeparator: ";", KeyValueSeparator: "=", TimestampKey: "ts", SignatureKey: "h1"},
		Encoding:   v1alpha1.EncodingHex,
		Template:   MustTemplate("{timestamp}:{body}"),
	}
	v := hmacVerifier(t, scheme, "key")
	body := `{"event_id":"evt_1"}`
	ts := "1767225600"
	good := macHex("key", ts+":"+body)
	for _, tc := range []struct {
		name, header string
		want         Reason
	}{
		{"one signature", "ts=" + ts + ";h1=" + good, ""},
		{"a roll lists two", "ts=" + ts + ";h1=" + macHex("old", ts+":"+body) + ";h1=" + good, ""},
		{"unknown keys are skipped", "ts=" + ts + ";h2=zz;h1=" + good, ""},
		{"spaces around pairs", " ts=" + ts + " ; h1=" + good + " ", ""},
		{"no timestamp", "h1=" + good, ReasonMalformedHeader},
		{"two timestamps", "ts=" + ts + ";ts=" + ts + ";h1=" + good, ReasonMalformedHeader},
		{"a pair without =", "ts=" + ts + ";h1", ReasonMalformedHeader},
		{"no signature", "ts=" + ts, ReasonMalformedHeader},
		{"signature of the wrong length", "ts=" + ts + ";h1=" + good[:62], ReasonMalformedHeader},
		{"other separators", "ts=" + ts + ",h1=" + good, ReasonMalformedHeader},
		{"stale", "ts=1767225000;h1=" + macHex("key", "1767225000:"+body), ReasonTimestampOutOfTolerance},
		{"wrong MAC", "ts=" + ts + ";h1=" + macHex("key", ts+":"+body+" "), ReasonMismatch},
		{"timestamp not the one signed", "ts=1767225601;h1=" + good, ReasonMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := Request{Header: http.Header{"Paddle-Signature": {tc.header}}, Body: []byte(body), Now: testNow}
			verified, err := v.Open(req)
			if got := ReasonOf(err); got != tc.want {
				t.Fatalf("reason %q, want %q (%v)", got, tc.want, err)
			}
			if err == nil && verified.Signed()[SignedTimestamp] != ts {
				t.Fatalf("signed timestamp %q", verified.Signed()[SignedTimestamp])
			}
		})
	}
}

// A composite header without a timestamp key signs no time: a request verifies on its
// signature alone, and a pair with an empty key is not taken for a signed timestamp.
func TestCompositeHeaderWithoutTimestamp(t *testing.T) {
	scheme := Scheme{
		HeaderSets: []HeaderSet{{Signature: "X-Sig"}},
		Composite:  &Composite{PairSeparator: ",", KeyValueSeparator: "=", SignatureKey: "v1"},
		Encoding:   v1alpha1.EncodingHex,
		Template:   MustTemplate("{body}"),
	}
	v := hmacVerifier(t, scheme, "key")
	body := `{"id":"evt_1"}`
	for _, header := range []string{"v1=" + macHex("key", body), "=12345,v1=" + macHex("key", body)} {
		verified, err := v.Open(Request{Header: http.Header{"X-Sig": {header}}, Body: []byte(body), Now: testNow})
		if err != nil {
			t.Fatalf("%q: %v", header, err)
		}
		if ts, ok := verified.Signed()[SignedTimestamp]; ok {
			t.Fatalf("%q: signed.timestamp %q, but the scheme signs no time", header, ts)
		}
	}
}

// {method} and {url} are signed as configured; the same request to another URL or
// with another method does not verify.
func TestMethodAndURLPlaceholders(t *testing.T) {
	scheme := Scheme{
		HeaderSets: []HeaderSet{{Signature: "X-Sig"}},
		Encoding:   v1alpha1.EncodingHex,
		Template:   MustTemplate("{method}{url}{body}"),
		URL:        "https://hooks.example.com/in?a=1",
	}
	v := hmacVerifier(t, scheme, "key")
	sig := macHex("key", "POSThttps://hooks.example.com/in?a=1{}")
	req := Request{Header: http.Header{"X-Sig": {sig}}, Body: []byte("{}"), Method: http.MethodPost, Now: testNow}
	if err := v.Verify(req); err != nil {
		t.Fatal(err)
	}
	req.Method = http.MethodPut
	if ReasonOf(v.Verify(req)) != ReasonMismatch {
		t.Fatal("another method verified")
	}
	scheme.URL = "https://hooks.example.com/in?a=2"
	if ReasonOf(hmacVerifier(t, scheme, "key").Verify(Request{Header: req.Header, Body: req.Body, Method: http.MethodPost, Now: testNow})) != ReasonMismatch {
		t.Fatal("another URL verified")
	}
	scheme.URL = ""
	if _, err := NewSchemeVerifier(scheme, nil, time.Minute); err == nil {
		t.Fatal("a {url} template without a URL was accepted")
	}
}

func TestTimestampFormats(t *testing.T) {
	for _, tc := range []struct {
		format v1alpha1.TimestampFormat
		value  string
		ok     bool
	}{
		{v1alpha1.TimestampUnix, "1767225600", true},
		{v1alpha1.TimestampUnix, "1767225600000", false}, // ms read as seconds: far future
		{v1alpha1.TimestampUnixMilli, "1767225600123", true},
		{v1alpha1.TimestampUnixMilli, "-1767225600123", false},
		{v1alpha1.TimestampRFC3339, "2026-01-01T00:00:00.123456789Z", true},
		{v1alpha1.TimestampRFC3339, "2026-01-01T01:00:00+01:00", true},
		{v1alpha1.TimestampRFC3339, "2026-01-01 00:00:00", false},
	} {
		unix, err := CheckTimestamp("ts", tc.format, tc.value, testNow, 5*time.Minute)
		if (err == nil) != tc.ok {
			t.Errorf("%s %q: %v", tc.format, tc.value, err)
		}
		if err == nil && unix != "1767225600" {
			t.Errorf("%s %q: signed.timestamp %q, want Unix seconds", tc.format, tc.value, unix)
		}
	}
}

func TestTemplates(t *testing.T) {
	for tmpl, want := range map[string]string{
		"{body}":                  "",
		"{id}.{timestamp}.{body}": "",
		`{"x":{body}} {1}`:        "",
		"{timestamp}":             "must include {body}",
		"{body}{body}":            "may appear once",
		"{verb}{body}":            "unknown placeholder {verb}",
		"{method} {url}\n{body}":  "",
		"{Body}":                  "unknown placeholder {Body}",
	} {
		parsed, err := ParseTemplate(tmpl)
		switch {
		case want == "" && err != nil:
			t.Errorf("%q: %v", tmpl, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%q: error %v, want %q", tmpl, err, want)
		case err == nil && parsed.String() != tmpl:
			t.Errorf("%q round-trips as %q", tmpl, parsed.String())
		}
	}
}

func TestEd25519Keyring(t *testing.T) {
	private := ed25519.NewKeyFromSeed([]byte("hookkeeper ed25519 unit test key"))
	public := private.Public().(ed25519.PublicKey)
	scheme := Scheme{
		HeaderSets: []HeaderSet{{Signature: "X-Signature-Ed25519", Timestamp: "X-Signature-Timestamp"}},
		Encoding:   v1alpha1.EncodingHex,
		Template:   MustTemplate("{timestamp}{body}"),
	}
	for _, enc := range []struct {
		enc   v1alpha1.PublicKeyEncoding
		value string
	}{
		{v1alpha1.PublicKeyHex, hex.EncodeToString(public)},
		{v1alpha1.PublicKeyBase64, base64.StdEncoding.EncodeToString(public)},
		{v1alpha1.PublicKeyWhpk, "whpk_" + base64.StdEncoding.EncodeToString(public)},
	} {
		keys, err := NewEd25519Keyring(enc.enc, []Secret{{Value: enc.value}})
		if err != nil {
			t.Fatalf("%s: %v", enc.enc, err)
		}
		v, err := NewSchemeVerifier(scheme, keys, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		body := []byte(`{"type":1}`)
		sig := ed25519.Sign(private, append([]byte("1767225600"), body...))
		req := Request{Header: http.Header{}, Body: body, Now: testNow}
		req.Header.Set("X-Signature-Ed25519", hex.EncodeToString(sig))
		req.Header.Set("X-Signature-Timestamp", "1767225600")
		verified, err := v.Open(req)
		if err != nil {
			t.Fatalf("%s: %v", enc.enc, err)
		}
		if _, ok := verified.MAC([]byte("x")); ok {
			t.Fatal("an Ed25519 verification offers a MAC")
		}
		req.Body = []byte(`{"type":2}`)
		if ReasonOf(v.Verify(req)) != ReasonMismatch {
			t.Fatalf("%s: a changed body verified", enc.enc)
		}
	}
	for name, value := range map[string]string{
		"short":         hex.EncodeToString(public[:31]),
		"not hex":       "zz" + hex.EncodeToString(public)[2:],
		"a private key": hex.EncodeToString(private),
	} {
		if _, err := NewEd25519Keyring(v1alpha1.PublicKeyHex, []Secret{{Value: value}}); err == nil {
			t.Errorf("%s public key accepted", name)
		} else if strings.Contains(err.Error(), value) {
			t.Errorf("%s: the error leaks the key", name)
		}
	}
}

// AnyOf reports the refusal of the verifier that came furthest.
func TestAnyOfReportsTheFurthestRefusal(t *testing.T) {
	list := Scheme{HeaderSets: []HeaderSet{{Signature: "X-A"}}, Encoding: v1alpha1.EncodingHex, Template: MustTemplate("{body}")}
	other := list
	other.HeaderSets = []HeaderSet{{Signature: "X-B"}}
	v := AnyOf(hmacVerifier(t, list, "k"), hmacVerifier(t, other, "k"))
	req := Request{Header: http.Header{"X-B": {macHex("other", "{}")}}, Body: []byte("{}"), Now: testNow}
	if got := ReasonOf(v.Verify(req)); got != ReasonMismatch {
		t.Fatalf("reason %q, want mismatch (X-A is missing, X-B mismatches)", got)
	}
	req.Header.Set("X-B", macHex("k", "{}"))
	if err := v.Verify(req); err != nil {
		t.Fatal(err)
	}
}

func TestSignStandardWebhooksReproducesTheReference(t *testing.T) {
	// The Standard Webhooks reference vector (see internal/provider/testdata/README.md).
	key, err := DecodeWhsec("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := SignStandardWebhooks(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if got != "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=" {
		t.Fatalf("got %s", got)
	}
}

func TestDocumentIsDecidedByTheBytes(t *testing.T) {
	doc := `{"a":"b&payload=%7B%7D&c"}`
	cases := []struct {
		body, want string
		ok         bool
	}{
		{doc, doc, true},
		{" \n" + doc, " \n" + doc, true},
		{"payload=" + url.QueryEscape(doc), doc, true},
		{"payload=" + url.QueryEscape(" "+doc), " " + doc, true},
		{"payload=" + url.QueryEscape(doc) + "&x=1", "", false},
		{"payload=" + url.QueryEscape(doc) + "&payload=" + url.QueryEscape(doc), "", false},
		{"x=1&payload=" + url.QueryEscape(doc), "", false},
		{"payload=%5B%5D", "", false},
		{"payload=", "", false},
		{"payload=%zz", "", false},
		{"payload=" + url.QueryEscape(doc) + ";x", "", false},
		{"[1]", "", false},
		{"", "", false},
		{"not json", "", false},
	}
	for _, tc := range cases {
		got, err := Document([]byte(tc.body))
		if (err == nil) != tc.ok || string(got) != tc.want {
			t.Errorf("Document(%q) = %q, %v; want %q, ok %v", tc.body, got, err, tc.want, tc.ok)
		}
	}
}

func TestSigningKeyNeverPrints(t *testing.T) {
	const secret = "whsec_c2lnbmluZy1rZXktbmV2ZXItcHJpbnRlZA=="
	key, err := NewHMACSigningKey(sha256.New, v1alpha1.KeyRaw, secret)
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		if out := fmt.Sprintf(format, key); strings.Contains(out, secret) || strings.Contains(out, "c2lnbmluZy") {
			t.Fatalf("%s shows the key: %s", format, out)
		}
	}
	if _, err := NewHMACSigningKey(sha256.New, v1alpha1.KeyHex, "not hex "+secret); err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("a bad key: want an error without the value, got %v", err)
	}
}

// A header may list at most MaxSignatures signatures of our form: each is checked
// against every active key, and an Ed25519 check hashes the whole body again, so a
// forger's header of hundreds of made-up entries would cost the receiver seconds of CPU
// for nothing. Up to the cap the genuine signature verifies wherever it stands; beyond
// it the header is refused as malformed before any key is tried, even when the genuine
// signature is among the entries (a header is never truncated).
func TestHeadersListAtMostMaxSignatures(t *testing.T) {
	private := ed25519.NewKeyFromSeed([]byte("hookkeeper ed25519 unit test key"))
	edKeys, err := NewEd25519Keyring(v1alpha1.PublicKeyWhpk,
		[]Secret{{Value: "whpk_" + base64.StdEncoding.EncodeToString(private.Public().(ed25519.PublicKey))}})
	if err != nil {
		t.Fatal(err)
	}
	edList, err := NewSchemeVerifier(Scheme{
		HeaderSets: []HeaderSet{{Signature: "webhook-signature", Timestamp: "webhook-timestamp"}},
		Separator:  " ", Prefix: "v1a,", Encoding: v1alpha1.EncodingBase64,
		Template: MustTemplate("{timestamp}.{body}"),
	}, edKeys, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	composite := hmacVerifier(t, Scheme{
		HeaderSets: []HeaderSet{{Signature: "Paddle-Signature"}},
		Composite:  &Composite{PairSeparator: ";", KeyValueSeparator: "=", TimestampKey: "ts", SignatureKey: "h1"},
		Encoding:   v1alpha1.EncodingHex,
		Template:   MustTemplate("{timestamp}:{body}"),
	}, "key")

	body := []byte(`{"type":"order.paid"}`)
	ts := "1767225600"
	forgedEd := func(i int) string {
		sig := make([]byte, ed25519.SignatureSize)
		sig[0], sig[63] = byte(i), 0x0f // a canonical s: Verify cannot refuse it early
		return "v1a," + base64.StdEncoding.EncodeToString(sig)
	}
	genuineEd := "v1a," + base64.StdEncoding.EncodeToString(ed25519.Sign(private, []byte(ts+"."+string(body))))
	forgedMAC := func(i int) string { return "h1=" + macHex("not the key", fmt.Sprint(i)) }
	genuineMAC := "h1=" + macHex("key", ts+":"+string(body))

	// entries is n-1 forgeries, then the genuine signature last.
	entries := func(n int, forged func(int) string, genuine string) []string {
		var e []string
		for i := range n - 1 {
			e = append(e, forged(i))
		}
		return append(e, genuine)
	}
	for _, tc := range []struct {
		name string
		n    int
		want Reason
	}{
		{"at the cap, the genuine one last", MaxSignatures, ""},
		{"one over the cap", MaxSignatures + 1, ReasonMalformedHeader},
		{"a forger's flood", 690, ReasonMalformedHeader},
	} {
		t.Run("list "+tc.name, func(t *testing.T) {
			req := Request{Header: http.Header{}, Body: body, Now: testNow}
			req.Header.Set("webhook-timestamp", ts)
			// Entries of another form do not count towards the cap.
			list := append([]string{"v1,bm90IG91cnM=", "v2,x"}, entries(tc.n, forgedEd, genuineEd)...)
			req.Header.Set("webhook-signature", strings.Join(list, " "))
			if got := ReasonOf(edList.Verify(req)); got != tc.want {
				t.Fatalf("reason %q, want %q", got, tc.want)
			}
		})
		t.Run("composite "+tc.name, func(t *testing.T) {
			header := "ts=" + ts + ";h2=zz;" + strings.Join(entries(tc.n, forgedMAC, genuineMAC), ";")
			req := Request{Header: http.Header{"Paddle-Signature": {header}}, Body: body, Now: testNow}
			if got := ReasonOf(composite.Verify(req)); got != tc.want {
				t.Fatalf("reason %q, want %q", got, tc.want)
			}
		})
	}
}
