package provider

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

const (
	hubspotTestSecret = "6f1c3b9e-2d4a-4b8c-9e7f-0a1b2c3d4e5f"
	hubspotTestURL    = "https://hooks.example.com/webhooks/hubspot"
)

func hubspotVerifierFor(t *testing.T) signature.Verifier {
	t.Helper()
	return mustNew(t, v1alpha1.ProviderSpec{Type: ProviderHubSpot, SignedURL: hubspotTestURL}, signature.Secret{Value: hubspotTestSecret})
}

func TestHubSpotBatch(t *testing.T) {
	p, _ := Lookup(ProviderHubSpot)
	if !p.Batch || !p.NeedsURL {
		t.Fatal("HubSpot must be a batch provider that signs the URL")
	}
	v := vectorNamed(t, "hubspot-batch-computed")
	verified := openVector(t, v)
	docs, err := verified.Documents()
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 2 {
		t.Fatalf("%d documents, want one per array element", len(docs))
	}
	for i, doc := range docs {
		if !strings.Contains(v.Body, string(doc)) || doc[0] != '{' || doc[len(doc)-1] != '}' {
			t.Fatalf("document %d is not an element of the body byte for byte: %s", i, doc)
		}
	}
	signedValues := verified.Signed()
	if signedValues[signature.SignedDigest] != signature.BodyDigest([]byte(v.Body)) || signedValues[signature.SignedTimestamp] != "1767225600" {
		t.Fatalf("signed values %v", signedValues)
	}

	want := []struct{ id, typ, entity string }{
		{"62515:2881778:1852740153:1767225598741", "deal.creation", "deal:18436011927"},
		{"62515:2881779:1852740154:1767225599112", "deal.propertyChange", "deal:18436011927"},
	}
	for i, doc := range docs {
		vals := evaluatePresets(t, p, doc, nil, signedValues)
		if got := presetString(t, vals, "id"); got != want[i].id {
			t.Errorf("event %d: id %q, want %q", i, got, want[i].id)
		}
		if got := presetString(t, vals, "type"); got != want[i].typ {
			t.Errorf("event %d: type %q", i, got)
		}
		if got := presetString(t, vals, "entityKey"); got != want[i].entity {
			t.Errorf("event %d: entityKey %q", i, got)
		}
		if got := presetTime(t, vals, "occurredAt"); got.Unix() != 1767225598 && got.Unix() != 1767225599 {
			t.Errorf("event %d: occurredAt %s", i, got)
		}
	}

	// A retry (attemptNumber 1, a new timestamp) has another body digest, but each event
	// keeps its id.
	retry := []byte(strings.ReplaceAll(v.Body, `"attemptNumber":0`, `"attemptNumber":1`))
	req := hubspotSign(hubspotTestSecret, http.MethodPost, hubspotTestURL, retry, time.Unix(1767225900, 0))
	retried, err := hubspotVerifierFor(t).Open(req)
	if err != nil {
		t.Fatal(err)
	}
	retryDocs, _ := retried.Documents()
	if got := presetString(t, evaluatePresets(t, p, retryDocs[0], nil, retried.Signed()), "id"); got != want[0].id {
		t.Errorf("the retried event's id %q, want %q", got, want[0].id)
	}
	// Generic (object.*) subscriptions name the object type in objectTypeId.
	generic := evaluatePresets(t, p, []byte(`{"eventId":1,"subscriptionId":2,"portalId":3,"occurredAt":1767225598741,"subscriptionType":"object.creation","objectTypeId":"0-3","objectId":4}`), nil, signedValues)
	if got := presetString(t, generic, "entityKey"); got != "0-3:4" {
		t.Errorf("generic entityKey %q", got)
	}
}

func TestHubSpotBodiesThatAreNotBatches(t *testing.T) {
	verifier := hubspotVerifierFor(t)
	now := time.Unix(1767225600, 0)
	for _, body := range []string{
		`[]`, ` [ ] `, `{"eventId":1}`, `[1]`, `[{"eventId":1},"x"]`, `[{"eventId":1}] [{}]`,
		`[{"eventId":1}`, `[{"eventId":1},]`, `not json`, ``, `null`, `[null]`,
	} {
		verified, err := verifier.Open(hubspotSign(hubspotTestSecret, http.MethodPost, hubspotTestURL, []byte(body), now))
		if err != nil {
			t.Fatalf("%q: a correctly signed body must verify, got %v", body, err)
		}
		if docs, err := verified.Documents(); err == nil {
			t.Fatalf("%q: want an unreadable body (400), got %d documents", body, len(docs))
		}
		if verified.Signed()[signature.SignedDigest] == "" {
			t.Fatalf("%q: the digest of the signed body is missing", body)
		}
	}
	verified, err := verifier.Open(hubspotSign(hubspotTestSecret, http.MethodPost, hubspotTestURL, []byte(" [ {\"a\":1} ,\n{\"b\":[2]} ]\n"), now))
	if err != nil {
		t.Fatal(err)
	}
	docs, err := verified.Documents()
	if err != nil || len(docs) != 2 || string(docs[0]) != `{"a":1}` || string(docs[1]) != `{"b":[2]}` {
		t.Fatalf("whitespace around elements: %q %v", docs, err)
	}
}

func TestHubSpotSignsMethodAndURL(t *testing.T) {
	verifier := hubspotVerifierFor(t)
	now := time.Unix(1767225600, 0)
	body := []byte(`[{"eventId":1}]`)
	if _, err := verifier.Open(hubspotSign(hubspotTestSecret, http.MethodPost, hubspotTestURL, body, now)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, secret, signedMethod, uri, receivedMethod string
	}{
		{"another URL", hubspotTestSecret, http.MethodPost, "https://hooks.example.com/webhooks/other", http.MethodPost},
		{"the URL percent-encoded", hubspotTestSecret, http.MethodPost, strings.Replace(hubspotTestURL, "://", "%3A%2F%2F", 1), http.MethodPost},
		{"signed as PUT, received as POST", hubspotTestSecret, http.MethodPut, hubspotTestURL, http.MethodPost},
		{"signed as POST, received as PUT", hubspotTestSecret, http.MethodPost, hubspotTestURL, http.MethodPut},
		{"another secret", "an attacker's client secret", http.MethodPost, hubspotTestURL, http.MethodPost},
	} {
		req := hubspotSign(tc.secret, tc.signedMethod, tc.uri, body, now)
		req.Method = tc.receivedMethod
		verified, err := verifier.Open(req)
		if got := signature.ReasonOf(err); got != signature.ReasonMismatch {
			t.Fatalf("%s: want mismatch, got %q", tc.name, got)
		}
		if verified != nil {
			t.Fatalf("%s: a Verified came back with the error", tc.name)
		}
	}
	if _, err := NewVerifier(v1alpha1.ProviderSpec{Type: ProviderHubSpot}, []signature.Secret{{Value: hubspotTestSecret}}); err == nil ||
		!strings.Contains(err.Error(), "spec.provider.signedURL") {
		t.Fatalf("a HubSpot endpoint without signedURL: %v", err)
	}
}
