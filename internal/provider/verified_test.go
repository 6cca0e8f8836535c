package provider

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// TestAdyenOpenReturnsOnlyVerifiedItems: the documents of an item-signed Adyen body are
// the items whose signatures were checked, byte for byte, and nothing else in the body
// (a form-looking string member) becomes a document.
func TestAdyenOpenReturnsOnlyVerifiedItems(t *testing.T) {
	a := adyenTestItem{PSP: "A", Merchant: "M", Reference: "o1", Value: 1, Currency: "EUR", EventCode: "AUTHORISATION", Success: "true"}
	b := adyenTestItem{PSP: "B", Merchant: "M", Reference: "o2", Value: 2, Currency: "EUR", EventCode: "CAPTURE", Success: "true"}
	forged := adyenBatch(t, adyenTestItem{PSP: "F", EventCode: "AUTHORISATION", Success: "true"}.json("AAAA"))
	body := adyenBatch(t, a.json(a.sign(t, adyenKeyA)), b.json(b.sign(t, adyenKeyA)))
	// Splice a smuggled form field into the envelope, with a literal '&'.
	body = []byte(strings.Replace(string(body), "{", `{"note":"&payload=`+url.QueryEscape(string(forged))+`&",`, 1))
	req := adyenRequest(body)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	verified, err := adyenVerifierWith(t, adyenKeyA).Open(req)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	docs, err := verified.Documents()
	if err != nil || len(docs) != 2 {
		t.Fatalf("documents = %q, %v; want the two items", docs, err)
	}
	for i, want := range []string{"A", "B"} {
		var item map[string]any
		if err := json.Unmarshal(docs[i], &item); err != nil || item["pspReference"] != want {
			t.Errorf("document %d = %s, want item %s", i, docs[i], want)
		}
		if !strings.Contains(string(body), string(docs[i])) {
			t.Errorf("document %d is not the item's bytes in the body", i)
		}
	}
	if _, ok := verified.Signed()[signature.SignedDigest]; ok {
		t.Errorf("item signatures do not cover the body, yet a digest is offered as signed")
	}
	if verified.Now() != req.Now {
		t.Errorf("Now = %v, want %v", verified.Now(), req.Now)
	}
}

// TestSignedValues: each scheme reports the id and timestamp it signs, from the header
// set that verified, and the body digest where it signs the body.
func TestSignedValues(t *testing.T) {
	for _, name := range []string{"standardwebhooks-reference", "svix-headers-reference", "stripe-computed", "slack-docs", "github-docs", "shopify-computed"} {
		v := vectorNamed(t, name)
		req := v.request()
		if strings.HasPrefix(name, "svix") {
			// A made-up webhook-id next to the svix set that verifies: not signed.
			req.Header.Set(HeaderWebhookID, "msg_attacker")
		}
		verified, err := mustNew(t, v.spec(), signature.Secret{Value: v.Secret}).Open(req)
		if err != nil {
			t.Fatalf("%s: Open: %v", name, err)
		}
		signed := verified.Signed()
		if signed[signature.SignedDigest] != signature.BodyDigest([]byte(v.Body)) {
			t.Errorf("%s: digest = %q", name, signed[signature.SignedDigest])
		}
		switch name {
		case "standardwebhooks-reference":
			if signed[signature.SignedID] != v.Headers[HeaderWebhookID] || signed[signature.SignedTimestamp] != v.Headers[HeaderWebhookTimestamp] {
				t.Errorf("%s: signed = %v", name, signed)
			}
		case "svix-headers-reference":
			if signed[signature.SignedID] != v.Headers["svix-id"] {
				t.Errorf("%s: signed id = %q, want the svix-id that was signed", name, signed[signature.SignedID])
			}
		case "github-docs", "shopify-computed":
			if _, ok := signed[signature.SignedID]; ok {
				t.Errorf("%s: an id is reported signed, but the scheme signs none", name)
			}
			if _, ok := signed[signature.SignedTimestamp]; ok {
				t.Errorf("%s: a timestamp is reported signed, but the scheme signs none", name)
			}
		default:
			if signed[signature.SignedTimestamp] == "" {
				t.Errorf("%s: no signed timestamp", name)
			}
		}
	}
	var zero signature.Verified
	if _, err := zero.Documents(); err == nil {
		t.Errorf("a zero signature.Verified returns documents")
	}
	if _, err := (*signature.Verified)(nil).Documents(); err == nil {
		t.Errorf("a nil signature.Verified returns documents")
	}
}
