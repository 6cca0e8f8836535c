package provider

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// mailgunVectors are the SDK-checked vectors of testdata/providers/mailgun.json.
func mailgunVectors(t *testing.T) []vector {
	t.Helper()
	var out []vector
	for _, v := range loadVectors(t) {
		if v.isMailgun() {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		t.Fatal("no Mailgun vectors")
	}
	return out
}

// mailgunEdit returns the body with its signature object's member replaced.
func mailgunEdit(t *testing.T, body, member, value string) []byte {
	t.Helper()
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	var sig map[string]string
	if err := json.Unmarshal(doc["signature"], &sig); err != nil {
		t.Fatal(err)
	}
	old := `"` + member + `":"` + sig[member] + `"`
	if !strings.Contains(body, old) {
		t.Fatalf("no %s in the body", old)
	}
	return []byte(strings.Replace(body, old, `"`+member+`":"`+value+`"`, 1))
}

func mailgunField(t *testing.T, body, member string) string {
	t.Helper()
	var doc struct {
		Signature map[string]string `json:"signature"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Signature[member]
}

// TestMailgunVectors checks what is Mailgun's own on its vectors: the body is the one
// document, and the signed values are the token and timestamp. The generic vector suite
// (vectors_test.go) runs on them too: wrong secret, one changed byte of the token, the
// timestamp or the signature, tolerance, malformed timestamps, secret lifecycle and no
// headers at all.
func TestMailgunVectors(t *testing.T) {
	for _, v := range mailgunVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			verifier := mustNew(t, v.spec(), signature.Secret{Value: v.Secret})
			ts, token := mailgunField(t, v.Body, "timestamp"), mailgunField(t, v.Body, "token")

			t.Run("verifies, with the body as its document", func(t *testing.T) {
				verified, err := verifier.Open(v.request())
				if err != nil {
					t.Fatal(err)
				}
				docs, err := verified.Documents()
				if err != nil || len(docs) != 1 || string(docs[0]) != v.Body {
					t.Fatalf("documents %v %d", err, len(docs))
				}
				want := map[string]string{signature.SignedID: token, signature.SignedTimestamp: ts}
				if got := verified.Signed(); len(got) != 2 || got[signature.SignedID] != want[signature.SignedID] || got[signature.SignedTimestamp] != ts {
					t.Fatalf("signed %v, want %v (and no digest: the body is not signed)", got, want)
				}
			})
			t.Run("one byte of the token's last char", func(t *testing.T) {
				req := v.request()
				req.Body = mailgunEdit(t, v.Body, "token", tamper(token, len(token)-1))
				expectReason(t, verifier.Verify(req), signature.ReasonMismatch, v)
			})
		})
	}
}

// TestMailgunEventDataIsNotSigned pins down the limitation of Mailgun's scheme rather
// than hiding it: event-data can be replaced under a genuine signature. What holds is
// that the copy carries the same signed token, the id preset, so whichever copy is
// recorded second is a duplicate.
func TestMailgunEventDataIsNotSigned(t *testing.T) {
	v := mailgunVectors(t)[0]
	verifier := mustNew(t, v.spec(), signature.Secret{Value: v.Secret})
	req := v.request()
	req.Body = []byte(strings.Replace(v.Body, `"event":"delivered"`, `"event":"complained"`, 1))
	verified, err := verifier.Open(req)
	if err != nil {
		t.Fatalf("Mailgun does not sign event-data, so a changed event-data verifies; got %v", err)
	}
	original, err := verifier.Open(v.request())
	if err != nil {
		t.Fatal(err)
	}
	if verified.Signed()[signature.SignedID] != original.Signed()[signature.SignedID] {
		t.Fatal("the copy with forged event-data has another signed id, so it would not be a duplicate")
	}
	p, _ := Lookup(ProviderMailgun)
	if p.Preset.ID != "signed.id" {
		t.Fatalf("the id preset %q is not the signed token", p.Preset.ID)
	}
}

func TestMailgunStrictBody(t *testing.T) {
	const key = "mailgun test key"
	now := time.Unix(1767225600, 0)
	ts := strconv.FormatInt(now.Unix(), 10)
	token := "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"
	sig := mailgunSign(key, ts, token)
	sigObject := `{"timestamp":"` + ts + `","token":"` + token + `","signature":"` + sig + `"}`
	verifier := mustNew(t, v1alpha1.ProviderSpec{Type: ProviderMailgun}, signature.Secret{Value: key})
	for _, tc := range []struct {
		name, body string
		want       signature.Reason
	}{
		{"well formed", mailgunBody(ts, token, sig, `{"event":"delivered"}`), ""},
		{"signature after event-data", `{"event-data":{},"signature":` + sigObject + `}`, ""},
		{"a second signature object", `{"signature":` + sigObject + `,"event-data":{},"signature":` + sigObject + `}`, signature.ReasonMalformedHeader},
		{"a Signature next to signature", `{"signature":` + sigObject + `,"Signature":{},"event-data":{}}`, signature.ReasonMalformedHeader},
		{"a second token", `{"signature":{"timestamp":"` + ts + `","token":"x","token":"` + token + `","signature":"` + sig + `"},"event-data":{}}`, signature.ReasonMalformedHeader},
		{"a Token next to token", `{"signature":{"timestamp":"` + ts + `","Token":"x","token":"` + token + `","signature":"` + sig + `"},"event-data":{}}`, signature.ReasonMalformedHeader},
		{"a second event-data", `{"signature":` + sigObject + `,"event-data":{},"event-data":{"event":"failed"}}`, signature.ReasonMalformedHeader},
		{"duplicate keys in event-data", `{"signature":` + sigObject + `,"event-data":{"event":"delivered","event":"failed"}}`, signature.ReasonMalformedHeader},
		{"trailing data", mailgunBody(ts, token, sig, `{}`) + `{}`, signature.ReasonMalformedHeader},
		{"no event-data", `{"signature":` + sigObject + `}`, signature.ReasonMalformedHeader},
		{"event-data not an object", `{"signature":` + sigObject + `,"event-data":"x"}`, signature.ReasonMalformedHeader},
		{"no signature", `{"event-data":{}}`, signature.ReasonMissingHeader},
		{"signature not an object", `{"signature":"` + sig + `","event-data":{}}`, signature.ReasonMalformedHeader},
		{"no token", `{"signature":{"timestamp":"` + ts + `","signature":"` + sig + `"},"event-data":{}}`, signature.ReasonMissingHeader},
		{"empty token", mailgunBody(ts, "", sig, `{}`), signature.ReasonMissingHeader},
		{"timestamp as a number", `{"signature":{"timestamp":` + ts + `,"token":"` + token + `","signature":"` + sig + `"},"event-data":{}}`, signature.ReasonMalformedHeader},
		{"signature not hex", mailgunBody(ts, token, "zz"+sig[2:], `{}`), signature.ReasonMalformedHeader},
		{"signature too short", mailgunBody(ts, token, sig[:62], `{}`), signature.ReasonMalformedHeader},
		// Mailgun writes lower-case hex and its docs compare it as a string; an upper-case
		// spelling would be a second body for one signature (found by FuzzProviders).
		{"upper-case hex signature", mailgunBody(ts, token, strings.ToUpper(sig), `{}`), signature.ReasonMalformedHeader},
		{"form body (Mailgun's legacy webhooks)", "timestamp=" + ts + "&token=" + token + "&signature=" + sig, signature.ReasonMalformedHeader},
		{"empty body", "", signature.ReasonMalformedHeader},
		{"a JSON array", "[" + mailgunBody(ts, token, sig, `{}`) + "]", signature.ReasonMalformedHeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := verifier.Verify(signature.Request{Header: http.Header{}, Body: []byte(tc.body), Now: now})
			if got := signature.ReasonOf(err); got != tc.want {
				t.Fatalf("want %q, got %q (%v)", tc.want, got, err)
			}
		})
	}
}

func TestMailgunParentSignature(t *testing.T) {
	const subKey, parentKey = "subaccount signing key", "primary account signing key"
	now := time.Unix(1767225600, 0)
	ts := strconv.FormatInt(now.Unix(), 10)
	token := "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMN"
	body := func(sig, parent string) []byte {
		return []byte(`{"signature":{"timestamp":"` + ts + `","token":"` + token + `","signature":"` + sig +
			`","parent-signature":"` + parent + `"},"event-data":{"event":"delivered"}}`)
	}
	verify := func(key string, b []byte) signature.Reason {
		v := mustNew(t, v1alpha1.ProviderSpec{Type: ProviderMailgun}, signature.Secret{Value: key})
		return signature.ReasonOf(v.Verify(signature.Request{Body: b, Now: now}))
	}
	both := body(mailgunSign(subKey, ts, token), mailgunSign(parentKey, ts, token))
	if got := verify(subKey, both); got != "" {
		t.Fatalf("the subaccount key: %q", got)
	}
	if got := verify(parentKey, both); got != "" {
		t.Fatalf("the primary account key: %q", got)
	}
	if got := verify("another key", both); got != signature.ReasonMismatch {
		t.Fatalf("another key: %q", got)
	}
	// The parent signature signs the same timestamp and token, nothing else.
	otherToken := body(mailgunSign(subKey, ts, token), mailgunSign(parentKey, ts, token+"x"))
	if got := verify(parentKey, otherToken); got != signature.ReasonMismatch {
		t.Fatalf("a parent signature over another token: %q", got)
	}
	if got := verify(parentKey, body("not hex", mailgunSign(parentKey, ts, token))); got != "" {
		t.Fatalf("a valid parent signature next to a malformed one: %q", got)
	}
}

func TestMailgunPresets(t *testing.T) {
	want := map[string]map[string]any{
		"mailgun-sdk-delivered": {"id": "e0b5477167110d68991efc6b9f89f0a11066af27834600e123", "type": "delivered",
			"entityKey": "20260212180610.000be97f99f8cea1@sample.mailgun.com", "occurredAt": 1770920770.6585283},
		"mailgun-sdk-failed-permanent": {"id": "5d3f0c9a1b7e4f2a8c6d0e1f3a5b7c9d2e4f6a8b0c1d3e5f7a", "type": "failed.permanent",
			"entityKey": "20260212181205.000be97f99f8cea2@sample.mailgun.com", "occurredAt": 1770921129.25},
	}
	for _, v := range mailgunVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			vals, _ := presetsOfSigned(t, vectorSigned(v), nil)
			got := vals.raw()
			if _, ok := want[v.Name]; !ok {
				t.Fatalf("no expected presets for vector %s", v.Name)
			}
			for field, w := range want[v.Name] {
				if got[field] != w {
					t.Errorf("%s = %v, want %v", field, got[field], w)
				}
			}
		})
	}
}

// FuzzMailgunRoundTrip is the round trip of FuzzProviders for Mailgun alone.
//
//	go test -run='^$' -fuzz='^FuzzMailgunRoundTrip$' -fuzztime=20s ./internal/provider/
func FuzzMailgunRoundTrip(f *testing.F) {
	providerRoundTrip(f, ProviderMailgun, []byte(`{"event":"delivered"}`), []byte("7"), []byte{0xff, '\\', '"'})
}
