package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/event"
	"github.com/hookkeeper/hookkeeper/internal/provider"
	"github.com/hookkeeper/hookkeeper/internal/signature"
	"github.com/hookkeeper/hookkeeper/internal/signature/sigtest"
)

// testNow is the request time of the extraction tests: a minute after the events'
// occurredAt of 2026-03-01T12:00:00Z.
var testNow = time.Date(2026, 3, 1, 12, 1, 0, 0, time.UTC)

func extractorFor(t testing.TB, provider v1alpha1.ProviderType, ev v1alpha1.EventSpec) *Extractor {
	t.Helper()
	x, err := NewExtractor(v1alpha1.WebhookEndpointSpec{Provider: sigtest.Spec(provider), Event: ev})
	if err != nil {
		t.Fatalf("NewExtractor(%s): %v", provider, err)
	}
	return x
}

func verifierFor(t testing.TB, typ v1alpha1.ProviderType) signature.Verifier {
	t.Helper()
	v, err := provider.NewVerifier(sigtest.Spec(typ), []signature.Secret{{Value: sigtest.Secret(typ)}})
	if err != nil {
		t.Fatalf("provider.NewVerifier(%s): %v", typ, err)
	}
	return v
}

// open verifies a request through the provider's real verifier; the test fails when it
// does not verify.
func open(t testing.TB, provider v1alpha1.ProviderType, body []byte, header http.Header, now time.Time) *signature.Verified {
	t.Helper()
	verified, err := verifierFor(t, provider).Open(signature.Request{Header: header, Body: body, Now: now})
	if err != nil {
		t.Fatalf("%s: the signed request does not verify: %v", provider, err)
	}
	return verified
}

// signedExtract signs body as the provider does (Adyen with its HmacSignature header),
// verifies it and extracts its events.
func signedExtract(t testing.TB, x *Extractor, provider v1alpha1.ProviderType, body []byte, header http.Header, now time.Time) ([]event.Event, error) {
	t.Helper()
	h := sigtest.Headers(t, provider, body, now, header)
	return x.Extract(open(t, provider, body, h, now), h)
}

func digestOf(body []byte) string {
	sum := sha256.Sum256(body)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// forgedAdyen is the notification an attacker wants recorded: a capture for an order
// they did not pay, with no valid signature.
func forgedAdyen(t testing.TB) []byte {
	forged := sigtest.AdyenItem{PSP: "FORGED", Merchant: "M", Reference: "order-victim", Value: 999999, Currency: "EUR",
		EventCode: "AUTHORISATION", Success: "true"}
	return sigtest.AdyenBody(t, nil, forged.JSON(t, "AAAA", nil))
}

// TestAdyenFormSmuggledPayloadIsNotExtracted is the attack of issue 13 item 1: an Adyen
// JSON body with one authentic item and a string member holding
// "&payload=<url-encoded forged notification>&", sent as a form. Before the fix the
// verifier checked the JSON item and the extractor read the form field: the forged
// item was recorded. Now the events are exactly the verified items, whatever the
// Content-Type.
func TestAdyenFormSmuggledPayloadIsNotExtracted(t *testing.T) {
	authentic := sigtest.AdyenItem{PSP: "REAL1", Merchant: "M", Reference: "order-1", Value: 100, Currency: "EUR",
		EventCode: "AUTHORISATION", Success: "true"}
	smuggle := "&payload=" + url.QueryEscape(string(forgedAdyen(t))) + "&"
	body := sigtest.AdyenBody(t, map[string]any{"note": smuggle}, authentic.JSON(t, "", nil))
	x := extractorFor(t, v1alpha1.ProviderAdyen, v1alpha1.EventSpec{})
	for _, ct := range []string{"application/x-www-form-urlencoded", "application/x-www-form-urlencoded; charset=UTF-8", "application/json", ""} {
		h := http.Header{}
		if ct != "" {
			h.Set("Content-Type", ct)
		}
		evs, err := x.Extract(open(t, v1alpha1.ProviderAdyen, body, h, testNow), h)
		if err != nil {
			t.Fatalf("Content-Type %q: Extract: %v", ct, err)
		}
		if len(evs) != 1 || evs[0].ID != "REAL1:AUTHORISATION:true" || evs[0].EntityKey != "order-1" {
			t.Fatalf("Content-Type %q: events = %+v, want only the authentic item REAL1", ct, evs)
		}
	}
}

// smuggledDocument is a JSON member value that, read as a form, carries a forged
// document: a provider body can hold strings a third party wrote (a customer name, an
// issue comment), so a signed body can contain it.
func smuggledDocument(forged string) string {
	return "x&payload=" + url.QueryEscape(forged) + "&y=1"
}

// differentialBody returns, per provider, a signed-able body whose document is known
// and that carries a smuggled forged document in a string member.
func differentialBody(t testing.TB, provider v1alpha1.ProviderType) (body []byte, header http.Header, wantIDs []string) {
	t.Helper()
	forged := `{"id":"evt_forged","type":"forged","event_id":"EvForged","event":{"type":"forged"},"data":{"id":"forged"}}`
	note := smuggledDocument(forged)
	header = http.Header{}
	doc := map[string]any{"note": note}
	switch provider {
	case v1alpha1.ProviderAdyen:
		items := []sigtest.AdyenItem{
			{PSP: "P1", Merchant: "M", Reference: "o1", Value: 10, Currency: "EUR", EventCode: "AUTHORISATION", Success: "true"},
			{PSP: "P2", Merchant: "M", Reference: "o2", Value: 20, Currency: "EUR", EventCode: "CAPTURE", Success: "false"},
		}
		body = sigtest.AdyenBody(t, map[string]any{"note": note},
			items[0].JSON(t, "", map[string]any{"reason": note}), items[1].JSON(t, "", nil))
		return body, header, []string{"P1:AUTHORISATION:true", "P2:CAPTURE:false"}
	case v1alpha1.ProviderStripe, v1alpha1.ProviderHMAC:
		doc["id"], doc["type"] = "evt_real", "real.type"
	case v1alpha1.ProviderSlack:
		doc["event_id"], doc["event"] = "EvReal", map[string]any{"type": "message"}
	case v1alpha1.ProviderStandardWebhooks:
		doc["type"] = "real.type"
		header.Set("webhook-id", "msg_real")
	case v1alpha1.ProviderGitHub:
		header.Set("X-GitHub-Event", "issues")
		header.Set("X-GitHub-Delivery", "d-real")
	case v1alpha1.ProviderShopify:
		header.Set("X-Shopify-Topic", "orders/paid")
		header.Set("X-Shopify-Webhook-Id", "w-real")
	}
	body = sigtest.Marshal(t, doc)
	switch provider {
	case v1alpha1.ProviderStripe, v1alpha1.ProviderHMAC:
		wantIDs = []string{"evt_real"}
	case v1alpha1.ProviderSlack:
		wantIDs = []string{"EvReal"}
	case v1alpha1.ProviderStandardWebhooks:
		wantIDs = []string{"msg_real"}
	case v1alpha1.ProviderGitHub:
		wantIDs = []string{digestOf(body)}
	case v1alpha1.ProviderShopify:
		wantIDs = []string{"orders/paid:" + digestOf(body)}
	}
	return body, header, wantIDs
}

var contentTypes = []string{
	"", "application/json", "application/json; charset=utf-8", "application/x-www-form-urlencoded",
	"Application/X-WWW-Form-Urlencoded; charset=utf-8", "multipart/form-data; boundary=x", "text/plain", "%%garbage",
}

// TestExtractedEventsAreTheVerifiedDocuments is the differential test of issue 13 item
// 1, for every provider: whatever the Content-Type, the events extracted are exactly
// the events whose signatures were checked. Each body smuggles a forged document in a
// form-looking string; the events must be the verified documents, byte for byte.
func TestExtractedEventsAreTheVerifiedDocuments(t *testing.T) {
	for _, provider := range sigtest.Providers {
		t.Run(string(provider), func(t *testing.T) {
			body, base, wantIDs := differentialBody(t, provider)
			x := extractorFor(t, provider, v1alpha1.EventSpec{})
			for _, ct := range contentTypes {
				h := base.Clone()
				if ct != "" {
					h.Set("Content-Type", ct)
				}
				if provider != v1alpha1.ProviderAdyen {
					h = sigtest.Headers(t, provider, body, testNow, h)
				}
				verified := open(t, provider, body, h, testNow)
				docs, err := verified.Documents()
				if err != nil {
					t.Fatalf("Content-Type %q: Documents: %v", ct, err)
				}
				evs, err := x.Extract(verified, h)
				if err != nil {
					t.Fatalf("Content-Type %q: Extract: %v", ct, err)
				}
				var ids []string
				for i, ev := range evs {
					ids = append(ids, ev.ID)
					if i >= len(docs) || string(ev.Payload) != string(docs[i]) {
						t.Errorf("Content-Type %q: event %d payload %s is not verified document %d", ct, i, ev.Payload, i)
					}
				}
				if !slices.Equal(ids, wantIDs) {
					t.Errorf("Content-Type %q: ids = %q, want %q", ct, ids, wantIDs)
				}
				if provider != v1alpha1.ProviderAdyen && (len(docs) != 1 || string(docs[0]) != string(body)) {
					t.Errorf("Content-Type %q: documents = %q, want the signed body", ct, docs)
				}
			}
		})
	}
}

// TestFormBodyIsReadByItsBytes: a genuine form body (GitHub's form content type) is
// read as its payload field whatever the Content-Type says; a form with anything
// besides one payload field is no document.
func TestFormBodyIsReadByItsBytes(t *testing.T) {
	x := extractorFor(t, v1alpha1.ProviderGitHub, v1alpha1.EventSpec{})
	doc := `{"zen":"hi","repository":{"full_name":"o/r"}}`
	form := []byte("payload=" + url.QueryEscape(doc))
	for _, ct := range contentTypes {
		h := http.Header{"X-Github-Event": {"ping"}}
		if ct != "" {
			h.Set("Content-Type", ct)
		}
		evs, err := signedExtract(t, x, v1alpha1.ProviderGitHub, form, h, testNow)
		if err != nil || len(evs) != 1 || string(evs[0].Payload) != doc || evs[0].ID != digestOf(form) {
			t.Fatalf("Content-Type %q: events %+v, err %v", ct, evs, err)
		}
	}
	for _, bad := range []string{
		"payload=" + url.QueryEscape(doc) + "&payload=" + url.QueryEscape(doc),
		"payload=" + url.QueryEscape(doc) + "&other=1",
		"other=1&payload=" + url.QueryEscape(doc),
		"payload=%5B1%5D",
		"payload=",
		"payload=%zz",
	} {
		h := http.Header{"X-Github-Event": {"ping"}, "Content-Type": {"application/x-www-form-urlencoded"}}
		if _, err := signedExtract(t, x, v1alpha1.ProviderGitHub, []byte(bad), h, testNow); !errors.Is(err, ErrBadPayload) {
			t.Errorf("form %q: err = %v, want ErrBadPayload", bad, err)
		}
	}
}

// TestUnsignedHeadersDoNotMakeANewEvent is issue 13 item 2: a signed request replayed
// with changed unsigned headers yields the same event id (a duplicate), for every
// provider whose preset used to read an unsigned header.
func TestUnsignedHeadersDoNotMakeANewEvent(t *testing.T) {
	cases := []struct {
		name     string
		provider v1alpha1.ProviderType
		body     string
		original http.Header
		replayed http.Header
	}{
		{"github delivery id", v1alpha1.ProviderGitHub, `{"action":"opened","issue":{"html_url":"u"}}`,
			http.Header{"X-Github-Event": {"issues"}, "X-Github-Delivery": {"d-1"}},
			http.Header{"X-Github-Event": {"issues"}, "X-Github-Delivery": {"d-2"}}},
		{"github event header", v1alpha1.ProviderGitHub, `{"action":"closed","pull_request":{"html_url":"u","merged":false}}`,
			http.Header{"X-Github-Event": {"pull_request"}, "X-Github-Delivery": {"d-1"}},
			http.Header{"X-Github-Event": {"issues"}, "X-Github-Delivery": {"d-9"}}},
		{"shopify webhook id and time", v1alpha1.ProviderShopify, `{"id":1,"updated_at":"2026-03-01T12:00:00Z"}`,
			http.Header{"X-Shopify-Topic": {"orders/paid"}, "X-Shopify-Webhook-Id": {"w-1"}, "X-Shopify-Triggered-At": {"2026-03-01T12:00:00Z"}},
			http.Header{"X-Shopify-Topic": {"orders/paid"}, "X-Shopify-Webhook-Id": {"w-2"}, "X-Shopify-Triggered-At": {"2099-01-01T00:00:00Z"}}},
		{"standard webhooks svix set with a made-up webhook-id", v1alpha1.ProviderStandardWebhooks, `{"type":"invoice.paid","data":{"id":"inv"}}`,
			http.Header{"Svix-Id": {"msg_1"}},
			http.Header{"Svix-Id": {"msg_1"}, "Webhook-Id": {"msg_new"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			x := extractorFor(t, tc.provider, v1alpha1.EventSpec{})
			orig, err := signedExtract(t, x, tc.provider, []byte(tc.body), tc.original, testNow)
			if err != nil {
				t.Fatal(err)
			}
			// The replay: the captured signature headers, new unsigned headers.
			signedHeaders := sigtest.Headers(t, tc.provider, []byte(tc.body), testNow, tc.original)
			replayHeader := signedHeaders.Clone()
			for k, v := range tc.replayed {
				replayHeader[k] = v
			}
			replay, err := x.Extract(open(t, tc.provider, []byte(tc.body), replayHeader, testNow), replayHeader)
			if err != nil {
				t.Fatal(err)
			}
			if replay[0].ID != orig[0].ID {
				t.Fatalf("replay id %q != original id %q: the replay would be a new event", replay[0].ID, orig[0].ID)
			}
			if tc.provider == v1alpha1.ProviderShopify && replay[0].OccurredAt != nil && replay[0].OccurredAt.Year() == 2099 {
				t.Fatalf("the unsigned Triggered-At drove occurredAt")
			}
		})
	}
	t.Run("shopify topic is bound into the id", func(t *testing.T) {
		x := extractorFor(t, v1alpha1.ProviderShopify, v1alpha1.EventSpec{})
		body := []byte(`{"id":1}`)
		paid, err := signedExtract(t, x, v1alpha1.ProviderShopify, body, http.Header{"X-Shopify-Topic": {"orders/paid"}}, testNow)
		if err != nil {
			t.Fatal(err)
		}
		updated, err := signedExtract(t, x, v1alpha1.ProviderShopify, body, http.Header{"X-Shopify-Topic": {"orders/updated"}}, testNow)
		if err != nil {
			t.Fatal(err)
		}
		// Shopify renders the same order for both topics: both are genuine events.
		if paid[0].ID == updated[0].ID {
			t.Fatalf("two topics over one body share id %q: the second genuine event would be lost as a duplicate", paid[0].ID)
		}
	})
}

// TestFutureOccurredAtIsDiscarded: an occurredAt beyond the request time plus the
// tolerance is not believed (the event records without a time, so no entity clock
// moves); within the tolerance it is kept.
func TestFutureOccurredAtIsDiscarded(t *testing.T) {
	stripe := extractorFor(t, v1alpha1.ProviderStripe, v1alpha1.EventSpec{})
	for _, tc := range []struct {
		ahead time.Duration
		kept  bool
	}{{0, true}, {-time.Hour, true}, {4 * time.Minute, true}, {5 * time.Minute, true}, {5*time.Minute + time.Second, false}, {75 * 365 * 24 * time.Hour, false}} {
		created := testNow.Add(tc.ahead).Unix()
		body := []byte(`{"id":"evt_t","type":"x","created":` + strconv.FormatInt(created, 10) + `}`)
		evs, err := signedExtract(t, stripe, v1alpha1.ProviderStripe, body, nil, testNow)
		if err != nil {
			t.Fatal(err)
		}
		if got := evs[0].OccurredAt != nil; got != tc.kept {
			t.Errorf("occurredAt %s ahead: kept = %v, want %v", tc.ahead, got, tc.kept)
		}
	}
	// A custom expression over an unsigned header is bounded the same way.
	shopify := extractorFor(t, v1alpha1.ProviderShopify, v1alpha1.EventSpec{OccurredAt: `headers["x-shopify-triggered-at"]`})
	evs, err := signedExtract(t, shopify, v1alpha1.ProviderShopify, []byte(`{"id":1}`),
		http.Header{"X-Shopify-Topic": {"orders/paid"}, "X-Shopify-Triggered-At": {"2099-01-01T00:00:00Z"}}, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if evs[0].OccurredAt != nil {
		t.Fatalf("occurredAt = %v, want none for a Triggered-At in 2099", evs[0].OccurredAt)
	}
}

// TestUnstorableEventsAreRefused is issue 13 item 9 at extraction: what PostgreSQL's
// jsonb or text would refuse is an ErrUnstorable (and ErrBadPayload), never passed on to
// fail the transaction.
func TestUnstorableEventsAreRefused(t *testing.T) {
	x := extractorFor(t, v1alpha1.ProviderStripe, v1alpha1.EventSpec{})
	unstorable := []string{
		`{"id":"evt_1","type":"x","data":{"description":"a\u0000b"}}`,
		`{"id":"evt\u0000","type":"x"}`,
		`{"id":"evt_1","type":"x","note":"\ud800"}`,
		`{"id":"evt_1","type":"x","note":"\udc00\ud800"}`,
		`{"id":"evt_1","type":"x","note":"\ud800x"}`,
		"{\"id\":\"evt_\xff\",\"type\":\"x\"}",
		"{\"id\":\"evt_1\",\"type\":\"x\",\"n\":\"\xc3\x28\"}",
		`{"id":"` + strings.Repeat("i", MaxKeyBytes+1) + `","type":"x"}`,
		`{"id":"evt_1","type":"` + strings.Repeat("t", MaxKeyBytes+1) + `"}`,
		// A key twice in one object, however spelled and however deep.
		`{"id":"evt_1","type":"x","id":"evt_2"}`,
		`{"id":"evt_1","type":"x","\u0069d":"evt_2"}`,
		`{"id":"evt_1","type":"x","data":[{"a":1},{"b":{"c":1,"c":2}}]}`,
		`{"id":"evt_1","type":"x","n":1e200000}`,
		`{"id":"evt_1","type":"x","n":1e-200000}`,
		`{"id":"evt_1","type":"x","n":-0.` + strings.Repeat("0", 16383) + `1}`,
	}
	for _, body := range unstorable {
		_, err := signedExtract(t, x, v1alpha1.ProviderStripe, []byte(body), nil, testNow)
		if !errors.Is(err, ErrUnstorable) || !errors.Is(err, ErrBadPayload) {
			t.Errorf("%q: err = %v, want ErrUnstorable", body, err)
		}
	}
	storable := []string{
		`{"id":"evt_1","type":"x","note":"\\u0000 is six characters here"}`,
		`{"id":"evt_1","type":"x","note":"\ud83d\ude00 \u00e9 \u0001"}`,
		`{"id":"evt_1","type":"x","note":"\"\\"}`,
		`{"id":"` + strings.Repeat("i", MaxKeyBytes) + `","type":"x"}`,
		// Colons in strings are not keys; equal keys in different objects and keys
		// that differ in case are different keys.
		`{"id":"evt_1","type":"x:y","note":"a:\":b","ID":"c","d":{"id":":"},"e":[{"id":1},{"id":2}]}`,
		`{"id":"evt_1","type":"x","n":1e100,"m":-0.` + strings.Repeat("0", 16382) + `1}`,
	}
	for _, body := range storable {
		if _, err := signedExtract(t, x, v1alpha1.ProviderStripe, []byte(body), nil, testNow); err != nil {
			t.Errorf("%q: err = %v, want none", body, err)
		}
	}
	// A signed id header with bytes that are not UTF-8 (Standard Webhooks signs it).
	sw := extractorFor(t, v1alpha1.ProviderStandardWebhooks, v1alpha1.EventSpec{})
	_, err := signedExtract(t, sw, v1alpha1.ProviderStandardWebhooks, []byte(`{"type":"x"}`), http.Header{"Webhook-Id": {"msg_\xff"}}, testNow)
	if !errors.Is(err, ErrUnstorable) {
		t.Errorf("webhook-id with invalid UTF-8: err = %v, want ErrUnstorable", err)
	}
}

// TestExtractNeedsAVerifiedRequest: nothing is extracted from a Verified no verifier
// returned.
func TestExtractNeedsAVerifiedRequest(t *testing.T) {
	x := extractorFor(t, v1alpha1.ProviderStripe, v1alpha1.EventSpec{})
	for _, v := range []*signature.Verified{nil, {}} {
		if _, err := x.Extract(v, http.Header{}); !errors.Is(err, ErrBadPayload) {
			t.Errorf("Extract(%v): err = %v, want ErrBadPayload", v, err)
		}
	}
}

// Adyen's item HMAC covers
// pspReference, originalReference, merchantAccountCode, merchantReference, value,
// currency, eventCode and success, not eventDate. A captured genuine item re-sent with
// another eventDate (and without the HmacSignature header, so in the per-item form)
// still verifies and has the same event id; the preset must not let that unsigned
// field decide the time the event is ordered and judged stale by. Whichever copy
// arrives first is recorded: an attacker's copy dated 1970 is then `stale` against any
// entity with a clock, and the genuine retry is only a duplicate of it.
func TestAdyenUnsignedEventDateDoesNotSteerOccurredAt(t *testing.T) {
	x := extractorFor(t, v1alpha1.ProviderAdyen, v1alpha1.EventSpec{})
	it := sigtest.AdyenItem{PSP: "PSP0001", Merchant: "M", Reference: "order-1", Value: 1000, Currency: "EUR",
		EventCode: "AUTHORISATION", Success: "true"}
	genuine := sigtest.AdyenBody(t, nil, it.JSON(t, "", map[string]any{"eventDate": "2026-03-01T12:00:00+00:00"}))
	replayed := sigtest.AdyenBody(t, nil, it.JSON(t, "", map[string]any{"eventDate": "1970-01-01T00:00:00+00:00"}))

	extract := func(body []byte) (id string, at string) {
		t.Helper()
		verified := open(t, v1alpha1.ProviderAdyen, body, http.Header{}, testNow)
		evs, err := x.Extract(verified, http.Header{})
		if err != nil {
			t.Fatalf("extract: %v", err)
		}
		if evs[0].OccurredAt != nil {
			at = evs[0].OccurredAt.String()
		}
		return evs[0].ID, at
	}
	gid, gat := extract(genuine)
	rid, rat := extract(replayed)
	if gid != rid {
		t.Fatalf("ids differ: %q, %q", gid, rid)
	}
	if gat != rat {
		t.Errorf("one signed Adyen item (id %s) yields occurredAt %s or %s depending on the unsigned eventDate: "+
			"the time used for staleness and ordering is attacker-chosen for whichever copy arrives first", gid, gat, rat)
	}
}
