package provider

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// The fuzz tests share one shape. Arbitrary header (or body) input must never panic and
// must end in nil or an *signature.Error with a known signature.Reason; when it ends in nil, an oracle written
// here with crypto/hmac — not the package's parser — must agree that the input carries the
// right MAC. And for arbitrary bodies, a correctly signed request verifies while the same
// request with one body byte changed does not.
//
// Seed corpora live in testdata/fuzz/FuzzXxx/. Run one with e.g.
//   go test -run='^$' -fuzz='^FuzzStripeHeader$' -fuzztime=10s ./internal/provider/

var knownReasons = map[signature.Reason]bool{
	signature.ReasonMissingHeader: true, signature.ReasonMalformedHeader: true, signature.ReasonTimestampOutOfTolerance: true,
	signature.ReasonNoActiveSecret: true, signature.ReasonMismatch: true,
}

// checkOutcome fails unless err is nil or a *signature.Error with a known signature.Reason; it reports
// whether the request verified.
func checkOutcome(t *testing.T, err error) bool {
	t.Helper()
	if err == nil {
		return true
	}
	var e *signature.Error
	if !errors.As(err, &e) || !knownReasons[e.Reason] {
		t.Fatalf("unexpected error %T %v", err, err)
	}
	return false
}

func flipped(body []byte) []byte {
	out := bytes.Clone(body)
	out[len(out)/2] ^= 0x80
	return out
}

const fuzzNow = 1700000000

func FuzzStripeHeader(f *testing.F) {
	v := vectorNamed(f, "stripe-computed")
	f.Add(v.Headers["Stripe-Signature"], []byte(v.Body), int64(0))
	f.Add("t=1700000000,v1=00,v0=zz,t=1", []byte("{}"), int64(-299))
	key := "whsec_test_hookkeeper_primary"
	verifier, err := NewVerifier(v1alpha1.ProviderSpec{Type: v1alpha1.ProviderStripe}, []signature.Secret{{Value: key}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, header string, body []byte, skew int64) {
		now := time.Unix(fuzzNow, 0)
		req := signature.Request{Header: http.Header{}, Body: body, Now: now}
		req.Header.Set("Stripe-Signature", header)
		if checkOutcome(t, verifier.Verify(req)) {
			var ts string
			var sigs []string
			for _, pair := range strings.Split(strings.TrimSpace(header), ",") {
				k, val, _ := strings.Cut(strings.TrimSpace(pair), "=")
				switch k {
				case "t":
					ts = val
				case "v1":
					sigs = append(sigs, strings.ToLower(val))
				}
			}
			n, err := strconv.ParseInt(ts, 10, 64)
			if err != nil || n < fuzzNow-300 || n > fuzzNow+300 {
				t.Fatalf("verified with timestamp %q outside tolerance", ts)
			}
			want := hex.EncodeToString(oracleMAC(sha256.New, []byte(key), ts, ".", string(body)))
			found := false
			for _, s := range sigs {
				found = found || s == want
			}
			if !found {
				t.Fatalf("verified without the right v1 signature: %q", header)
			}
		}

		// Round trip at any skew inside the tolerance.
		ts := strconv.FormatInt(fuzzNow+skew%300, 10)
		sig := hex.EncodeToString(oracleMAC(sha256.New, []byte(key), ts, ".", string(body)))
		req.Header.Set("Stripe-Signature", "t="+ts+",v1="+sig)
		assertSignedRoundTrip(t, verifier, req, body)
	})
}

func FuzzStandardWebhooksList(f *testing.F) {
	v := vectorNamed(f, "standardwebhooks-reference")
	f.Add(v.Headers[HeaderWebhookSignature], v.Headers[HeaderWebhookID], []byte(v.Body))
	f.Add("v1a,AAAA v2,BBBB v1,", "msg_1", []byte(""))
	key, err := signature.DecodeWhsec(v.Secret)
	if err != nil {
		f.Fatal(err)
	}
	verifier, err := NewVerifier(v1alpha1.ProviderSpec{Type: v1alpha1.ProviderStandardWebhooks}, []signature.Secret{{Value: v.Secret}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, signatures, id string, body []byte) {
		ts := time.Unix(fuzzNow, 0)
		req := signature.Request{Header: http.Header{}, Body: body, Now: ts}
		req.Header.Set(HeaderWebhookID, id)
		req.Header.Set(HeaderWebhookTimestamp, strconv.FormatInt(fuzzNow, 10))
		req.Header.Set(HeaderWebhookSignature, signatures)
		trimmedID := strings.TrimSpace(id)
		if checkOutcome(t, verifier.Verify(req)) {
			want := "v1," + base64.StdEncoding.EncodeToString(oracleMAC(sha256.New, key, trimmedID, ".", strconv.FormatInt(fuzzNow, 10), ".", string(body)))
			assertListed(t, signatures, " ", want)
		}

		req.Header.Set(HeaderWebhookSignature, signatures+" "+signature.SignStandardWebhooks(key, trimmedID, ts, body))
		err := verifier.Verify(req)
		if trimmedID == "" {
			if signature.ReasonOf(err) != signature.ReasonMissingHeader {
				t.Fatalf("empty id: want missing_header, got %v", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("correctly signed request failed: %v", err)
		}
		assertBodyChangeFails(t, verifier, req, body)
	})
}

func FuzzSlackHeaders(f *testing.F) {
	v := vectorNamed(f, "slack-docs")
	f.Add(v.Headers["X-Slack-Signature"], v.Headers["X-Slack-Request-Timestamp"], []byte(v.Body))
	f.Add("v0=", "-1", []byte("payload=%7B%7D"))
	verifier, err := NewVerifier(v1alpha1.ProviderSpec{Type: v1alpha1.ProviderSlack}, []signature.Secret{{Value: v.Secret}})
	if err != nil {
		f.Fatal(err)
	}
	now := time.Unix(1531420618, 0)
	f.Fuzz(func(t *testing.T, sig, timestamp string, body []byte) {
		req := signature.Request{Header: http.Header{}, Body: body, Now: now}
		req.Header.Set("X-Slack-Signature", sig)
		req.Header.Set("X-Slack-Request-Timestamp", timestamp)
		if checkOutcome(t, verifier.Verify(req)) {
			ts := strings.TrimSpace(timestamp)
			n, err := strconv.ParseInt(ts, 10, 64)
			if err != nil || n < now.Unix()-300 || n > now.Unix()+300 {
				t.Fatalf("verified with timestamp %q outside tolerance", timestamp)
			}
			want := "v0=" + hex.EncodeToString(oracleMAC(sha256.New, []byte(v.Secret), "v0:", ts, ":", string(body)))
			if strings.ToLower(strings.TrimSpace(sig)) != want {
				t.Fatalf("verified without the right signature: %q", sig)
			}
		}

		ts := strconv.FormatInt(now.Unix(), 10)
		req.Header.Set("X-Slack-Request-Timestamp", ts)
		req.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(oracleMAC(sha256.New, []byte(v.Secret), "v0:", ts, ":", string(body))))
		assertSignedRoundTrip(t, verifier, req, body)
	})
}

func FuzzGitHubSignature(f *testing.F) {
	v := vectorNamed(f, "github-docs")
	f.Add(v.Headers["X-Hub-Signature-256"], []byte(v.Body))
	f.Add("sha256=", []byte(""))
	f.Add("sha1=0123", []byte("{}"))
	verifier, err := NewVerifier(v1alpha1.ProviderSpec{Type: v1alpha1.ProviderGitHub}, []signature.Secret{{Value: v.Secret}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, sig string, body []byte) {
		req := signature.Request{Header: http.Header{}, Body: body, Now: time.Unix(fuzzNow, 0)}
		req.Header.Set("X-Hub-Signature-256", sig)
		want := "sha256=" + hex.EncodeToString(oracleMAC(sha256.New, []byte(v.Secret), string(body)))
		if checkOutcome(t, verifier.Verify(req)) && strings.ToLower(strings.TrimSpace(sig)) != want {
			t.Fatalf("verified without the right signature: %q", sig)
		}
		req.Header.Set("X-Hub-Signature-256", want)
		assertSignedRoundTrip(t, verifier, req, body)
	})
}

func FuzzHMACSignatureList(f *testing.F) {
	spec := v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: "X-Signature", Prefix: "sha512=", Separator: ",", Encoding: v1alpha1.EncodingBase64,
		SignedContent: "{id}:{body}", IDHeader: "X-Id"}, Algorithm: v1alpha1.HMACSHA512, KeyEncoding: v1alpha1.KeyRaw}
	const key = "generic-fuzz-key"
	f.Add("sha512=AAAA,sha512=", "del_1", []byte(`{"event":"ping"}`))
	f.Add(",,,", "", []byte(""))
	verifier, err := NewVerifier(v1alpha1.ProviderSpec{Type: v1alpha1.ProviderHMAC, HMAC: &spec}, []signature.Secret{{Value: key}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, signatures, id string, body []byte) {
		req := signature.Request{Header: http.Header{}, Body: body, Now: time.Unix(fuzzNow, 0)}
		req.Header.Set("X-Signature", signatures)
		req.Header.Set("X-Id", id)
		trimmedID := strings.TrimSpace(id)
		want := "sha512=" + base64.StdEncoding.EncodeToString(oracleMAC(sha512.New, []byte(key), trimmedID, ":", string(body)))
		if checkOutcome(t, verifier.Verify(req)) {
			assertListed(t, signatures, ",", want)
		}
		if trimmedID == "" {
			return
		}
		req.Header.Set("X-Signature", signatures+","+want)
		assertSignedRoundTrip(t, verifier, req, body)
	})
}

// adyenOracle recomputes, with a generic JSON decode, whether every item of body carries
// the right signature under key.
func adyenOracle(body []byte, key []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var envelope struct {
		NotificationItems []struct {
			NotificationRequestItem map[string]any
		}
	}
	if err := dec.Decode(&envelope); err != nil {
		return err
	}
	if len(envelope.NotificationItems) == 0 {
		return errors.New("no items")
	}
	text := func(v any) string {
		switch x := v.(type) {
		case nil:
			return ""
		case string:
			return x
		case bool:
			return strconv.FormatBool(x)
		case json.Number:
			return x.String()
		}
		return fmt.Sprint(v)
	}
	for i, wrapper := range envelope.NotificationItems {
		item := wrapper.NotificationRequestItem
		amount, _ := item["amount"].(map[string]any)
		additional, _ := item["additionalData"].(map[string]any)
		signing := strings.Join([]string{
			text(item["pspReference"]), text(item["originalReference"]), text(item["merchantAccountCode"]),
			text(item["merchantReference"]), text(amount["value"]), text(amount["currency"]),
			text(item["eventCode"]), text(item["success"]),
		}, ":")
		want := base64.StdEncoding.EncodeToString(oracleMAC(sha256.New, key, signing))
		if text(additional["hmacSignature"]) != want {
			return fmt.Errorf("item %d carries the wrong signature", i)
		}
	}
	return nil
}

func FuzzAdyenBody(f *testing.F) {
	for _, name := range []string{"adyen-item-docs", "adyen-item-go-library"} {
		v := vectorNamed(f, name)
		f.Add([]byte(v.Body), "8815000000000001", "order-1", int64(1130), true)
	}
	f.Add([]byte(`{"notificationItems":[{"NotificationRequestItem":{"amount":{"value":-0},"success":false,"additionalData":null}}]}`), "", "", int64(0), false)
	f.Add([]byte(`{"notificationItems":[]}`), "a:b", "\\:", int64(-1), false)
	keyHex := adyenKeyA
	key, _ := hex.DecodeString(keyHex)
	verifier, err := NewVerifier(v1alpha1.ProviderSpec{Type: v1alpha1.ProviderAdyen}, []signature.Secret{{Value: keyHex}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, psp, reference string, value int64, success bool) {
		req := signature.Request{Header: http.Header{}, Body: body, Now: time.Unix(fuzzNow, 0)}
		if checkOutcome(t, verifier.Verify(req)) {
			if err := adyenOracle(body, key); err != nil {
				t.Fatalf("verified, but the oracle disagrees: %v", err)
			}
		}

		if !utf8.ValidString(psp) || !utf8.ValidString(reference) {
			return // json.Marshal would rewrite the strings the test signs
		}
		item := adyenTestItem{psp, "", "FuzzECOM", reference, value, "EUR", "AUTHORISATION", strconv.FormatBool(success)}
		req.Body = adyenBatch(t, item.json(item.sign(t, keyHex)))
		if strings.Contains(psp, ":") {
			// Only merchantReference may hold ':' (TestAdyenSignedTextHasOneReading).
			if got := signature.ReasonOf(verifier.Verify(req)); got != signature.ReasonMalformedHeader {
				t.Fatalf("a pspReference holding ':': %q, want malformed_header", got)
			}
			return
		}
		if err := verifier.Verify(req); err != nil {
			t.Fatalf("correctly signed item failed: %v", err)
		}
		item.Value++
		changed := adyenBatch(t, item.json(adyenTestItem{psp, "", "FuzzECOM", reference, value, "EUR", "AUTHORISATION", strconv.FormatBool(success)}.sign(t, keyHex)))
		req.Body = changed
		if signature.ReasonOf(verifier.Verify(req)) != signature.ReasonMismatch {
			t.Fatal("an item with a changed amount verified")
		}
	})
}

// assertListed fails unless want is an entry of the sep-separated list that verified
// (entries trimmed of spaces).
func assertListed(t *testing.T, list, sep, want string) {
	t.Helper()
	for _, entry := range strings.Split(strings.TrimSpace(list), sep) {
		if strings.TrimSpace(entry) == want {
			return
		}
	}
	t.Fatalf("verified without the right entry: %q", list)
}

// assertSignedRoundTrip: a correctly signed request verifies, and the same request with
// one body byte changed fails as a mismatch.
func assertSignedRoundTrip(t *testing.T, verifier signature.Verifier, req signature.Request, body []byte) {
	t.Helper()
	if err := verifier.Verify(req); err != nil {
		t.Fatalf("correctly signed request failed: %v", err)
	}
	assertBodyChangeFails(t, verifier, req, body)
}

func assertBodyChangeFails(t *testing.T, verifier signature.Verifier, req signature.Request, body []byte) {
	t.Helper()
	if len(body) == 0 {
		return
	}
	req.Body = flipped(body)
	if signature.ReasonOf(verifier.Verify(req)) != signature.ReasonMismatch {
		t.Fatal("a changed body verified")
	}
}
