package config

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
	"github.com/hookkeeper/hookkeeper/internal/signature/sigtest"
)

// FuzzRequest fuzzes whole requests (provider, Content-Type, an extra header and the
// body together) through verification and extraction, the receiver's steps 2 and 3.
// The body is signed as the provider signs it (Adyen: with its HmacSignature header
// when signHeader is set, else only by the item signatures the body carries), so most
// inputs verify and reach extraction. The invariant is issue 13's: the events extracted
// are a subset of the verified content, whatever the headers say. It is checked with an
// oracle written here, not with the package's parser:
//
//   - whole-body schemes: each event's payload is the body itself (its first
//     non-space byte is '{'), or the body is a form with exactly one field, payload,
//     and the event's payload is that field;
//   - Adyen item signatures: each event's payload carries a hmacSignature that
//     crypto/hmac reproduces over its own eight signed fields, and its id is built from
//     those fields;
//   - the event ids do not change when the unsigned headers a preset could read (the
//     extra header, the delivery ids, Triggered-At, a stray webhook-id) change.
//
// Seed corpora live in testdata/fuzz/FuzzRequest/. Run with
//
//	go test -run='^$' -fuzz='^FuzzRequest$' -fuzztime=30s ./internal/config/
func FuzzRequest(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed.provider, seed.contentType, seed.headerName, seed.headerValue, seed.body, seed.signHeader)
	}
	extractors := map[v1alpha1.ProviderType]*Extractor{}
	verifiers := map[v1alpha1.ProviderType]signature.Verifier{}
	for _, p := range sigtest.Providers {
		extractors[p] = extractorFor(f, p, v1alpha1.EventSpec{})
		verifiers[p] = verifierFor(f, p)
	}
	f.Fuzz(func(t *testing.T, providerIndex uint8, contentType, headerName, headerValue string, body []byte, signHeader bool) {
		provider := sigtest.Providers[int(providerIndex)%len(sigtest.Providers)]
		header := http.Header{}
		if contentType != "" {
			header.Set("Content-Type", contentType)
		}
		if headerName != "" && validFuzzHeader(headerName, headerValue) {
			header.Set(headerName, headerValue)
		}
		itemForm := provider == v1alpha1.ProviderAdyen && !signHeader
		if !itemForm {
			// Signing sets the provider's own signature headers over whatever the
			// fuzzer put there.
			header = sigtest.Headers(t, provider, body, testNow, header)
		} else {
			header.Del("HmacSignature")
		}
		verified, err := verifiers[provider].Open(signature.Request{Header: header, Body: body, Now: testNow})
		if err != nil {
			if signature.ReasonOf(err) == "" {
				t.Fatalf("Open: an error without a reason: %v", err)
			}
			if !itemForm {
				t.Fatalf("Open: a request signed as %s does not verify: %v", provider, err)
			}
			return
		}
		x := extractors[provider]
		evs, err := x.Extract(verified, header)
		if err != nil {
			if !errors.Is(err, ErrBadPayload) {
				t.Fatalf("Extract: %v is not an ErrBadPayload", err)
			}
			return
		}
		if len(evs) == 0 {
			t.Fatalf("Extract: no events and no error")
		}
		for i, ev := range evs {
			if itemForm {
				checkAdyenItemOracle(t, i, ev.Payload, ev.ID)
				continue
			}
			if provider == v1alpha1.ProviderAdyen {
				// The HmacSignature header signs the whole body; its items are in it.
				if !bytes.Contains(body, ev.Payload) {
					t.Fatalf("event %d payload %q is not part of the signed body", i, ev.Payload)
				}
				continue
			}
			if !wholeBodyOracle(body, ev.Payload) {
				t.Fatalf("event %d payload %q is not the signed body's document (body %q, Content-Type %q)", i, ev.Payload, body, contentType)
			}
		}
		// Replay the same signed request with other unsigned headers: same ids.
		replay := header.Clone()
		for _, name := range []string{"X-Github-Delivery", "X-Github-Event", "X-Shopify-Webhook-Id", "X-Shopify-Triggered-At", "X-Shopify-Event-Id", "Content-Type"} {
			replay.Set(name, "replayed-"+name)
		}
		if provider != v1alpha1.ProviderStandardWebhooks || replay.Get("svix-signature") != "" {
			replay.Set("webhook-id", "msg_replayed")
		}
		if headerName != "" && validFuzzHeader(headerName, headerValue+"x") && !sensitiveHeader(strings.ToLower(headerName)) {
			replay.Set(headerName, headerValue+"x")
		}
		v2, err := verifiers[provider].Open(signature.Request{Header: replay, Body: body, Now: testNow})
		if err != nil {
			// Only possible when the fuzzer's header was one of the signed ones.
			return
		}
		again, err := x.Extract(v2, replay)
		if err != nil {
			return
		}
		if len(again) != len(evs) {
			t.Fatalf("replay with new unsigned headers: %d events, first time %d", len(again), len(evs))
		}
		for i := range evs {
			// Shopify binds its (unsigned) topic into the id by design, and the
			// X-GitHub-Event header names the type: only the id is required stable,
			// and only where the replay left the topic header as it was.
			if provider == v1alpha1.ProviderShopify {
				continue
			}
			if again[i].ID != evs[i].ID && !signedHeaderChanged(provider, headerName) {
				t.Fatalf("replay with new unsigned headers changed event %d id %q -> %q", i, evs[i].ID, again[i].ID)
			}
		}
	})
}

// signedHeaderChanged reports whether the fuzzer's header is one the scheme signs (its
// change then fails verification or legitimately changes the id).
func signedHeaderChanged(provider v1alpha1.ProviderType, name string) bool {
	n := strings.ToLower(name)
	return provider == v1alpha1.ProviderStandardWebhooks && (n == "svix-id" || n == "webhook-id")
}

func validFuzzHeader(name, value string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("()<>@,;:\\\"/[]?={}", c) >= 0 {
			return false
		}
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// wholeBodyOracle: the payload is the body (a JSON object), or the body is a form of
// exactly one payload field and the payload is its value.
func wholeBodyOracle(body, payload []byte) bool {
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		return bytes.Equal(body, payload)
	}
	form, err := url.ParseQuery(string(body))
	if err != nil || len(form) != 1 || len(form["payload"]) != 1 {
		return false
	}
	return form["payload"][0] == string(payload)
}

// checkAdyenItemOracle recomputes an item's signature from its own fields with
// crypto/hmac and checks the id preset was built from those signed fields.
func checkAdyenItemOracle(t *testing.T, i int, payload []byte, id string) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var m map[string]json.RawMessage
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("item %d: payload is not a JSON object: %v", i, err)
	}
	str := func(key string) string {
		var s string
		if raw, ok := m[key]; ok && string(raw) != "null" {
			if err := json.Unmarshal(raw, &s); err != nil {
				t.Fatalf("item %d: %s is not a string", i, key)
			}
		}
		return s
	}
	success := str
	if raw := strings.TrimSpace(string(m["success"])); raw == "true" || raw == "false" {
		success = func(string) string { return raw }
	}
	var amount struct {
		Value    json.RawMessage `json:"value"`
		Currency *string         `json:"currency"`
	}
	if raw, ok := m["amount"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &amount); err != nil {
			t.Fatalf("item %d: amount: %v", i, err)
		}
	}
	value := strings.TrimSpace(string(amount.Value))
	if value == "null" {
		value = ""
	}
	currency := ""
	if amount.Currency != nil {
		currency = *amount.Currency
	}
	var additional map[string]json.RawMessage
	_ = json.Unmarshal(m["additionalData"], &additional)
	var sig string
	_ = json.Unmarshal(additional["hmacSignature"], &sig)
	signing := strings.Join([]string{str("pspReference"), str("originalReference"), str("merchantAccountCode"),
		str("merchantReference"), value, currency, str("eventCode"), success("success")}, ":")
	key, _ := hex.DecodeString(sigtest.AdyenHexKey)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(signing))
	want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	if !hmac.Equal([]byte(sig), []byte(want)) {
		t.Fatalf("item %d was extracted but its own fields do not reproduce its hmacSignature (signing string %q)", i, signing)
	}
	if wantID := str("pspReference") + ":" + str("eventCode") + ":" + success("success"); id != wantID {
		t.Fatalf("item %d: id %q, want %q from its signed fields", i, id, wantID)
	}
}

type fuzzSeed struct {
	provider                             uint8
	contentType, headerName, headerValue string
	body                                 []byte
	signHeader                           bool
}

// fuzzSeeds are the in-code seeds; testdata/fuzz/FuzzRequest holds committed ones too.
func fuzzSeeds(tb testing.TB) []fuzzSeed {
	index := func(p v1alpha1.ProviderType) uint8 {
		for i, q := range sigtest.Providers {
			if q == p {
				return uint8(i)
			}
		}
		tb.Fatalf("unknown provider %s", p)
		return 0
	}
	var seeds []fuzzSeed
	for _, p := range sigtest.Providers {
		body, header, _ := differentialBody(tb, p)
		name, value := "", ""
		for k, v := range header {
			name, value = k, v[0]
			break
		}
		for _, ct := range []string{"application/json", "application/x-www-form-urlencoded"} {
			seeds = append(seeds, fuzzSeed{index(p), ct, name, value, body, false})
		}
		if p == v1alpha1.ProviderAdyen {
			seeds = append(seeds, fuzzSeed{index(p), "application/json", "", "", body, true})
		}
	}
	form := []byte("payload=" + url.QueryEscape(`{"zen":"hi","repository":{"full_name":"o/r"}}`))
	seeds = append(seeds, fuzzSeed{index(v1alpha1.ProviderGitHub), "application/x-www-form-urlencoded", "X-GitHub-Event", "ping", form, false})
	seeds = append(seeds, fuzzSeed{index(v1alpha1.ProviderStandardWebhooks), "application/json", "svix-id", "msg_s", []byte(`{"type":"t"}`), false})
	return seeds
}
