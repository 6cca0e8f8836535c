// Package sigtest signs requests the way each provider does, for tests that need
// authentic requests (extraction, the receiver, fuzzing of whole requests, the
// verifiers' own tests). It computes MACs with crypto/hmac directly, not through package
// signature, so a test that verifies what sigtest signed checks two implementations
// against each other. Production code never imports it.
package sigtest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
)

// Secrets a test can use per provider, in the form the provider's Secret stores them.
const (
	StripeSecret  = "whsec_sigtest_stripe_secret"
	RawSecret     = "sigtest raw secret" // GitHub, Shopify, Slack, HMAC
	WhsecSecret   = "whsec_c2lndGVzdCBzdGFuZGFyZCB3ZWJob29rcyBrZXk="
	AdyenHexKey   = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
	HMACHeader    = "X-Signature"
	HMACPrefix    = "sha256="
	DefaultWebhID = "msg_sigtest_1"
)

// Providers lists every provider type, in a stable order.
var Providers = []v1alpha1.ProviderType{
	v1alpha1.ProviderStripe, v1alpha1.ProviderAdyen, v1alpha1.ProviderGitHub,
	v1alpha1.ProviderShopify, v1alpha1.ProviderSlack, v1alpha1.ProviderStandardWebhooks,
	v1alpha1.ProviderHMAC,
}

// Spec returns the provider spec sigtest signs for (for HMAC: header X-Signature,
// prefix sha256=, HMAC-SHA256 hex over the body, raw key).
func Spec(provider v1alpha1.ProviderType) v1alpha1.ProviderSpec {
	spec := v1alpha1.ProviderSpec{Type: provider}
	if provider == v1alpha1.ProviderHMAC {
		spec.HMAC = &v1alpha1.HMACSpec{SchemeSpec: v1alpha1.SchemeSpec{Header: HMACHeader, Prefix: HMACPrefix}}
	}
	return spec
}

// Secret returns the test secret of a provider, as stored.
func Secret(provider v1alpha1.ProviderType) string {
	switch provider {
	case v1alpha1.ProviderStripe:
		return StripeSecret
	case v1alpha1.ProviderAdyen:
		return AdyenHexKey
	case v1alpha1.ProviderStandardWebhooks:
		return WhsecSecret
	default:
		return RawSecret
	}
}

// MAC is the HMAC of the concatenated parts under key, with crypto/hmac directly: the
// oracle tests sign with, apart from the verifiers.
func MAC(newHash func() hash.Hash, key []byte, parts ...string) []byte {
	m := hmac.New(newHash, key)
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

// mac is MAC with SHA-256, the hash of every scheme sigtest signs.
func mac(key []byte, parts ...string) []byte { return MAC(sha256.New, key, parts...) }

// Headers returns the signature headers of body for provider at now, added to a copy
// of extra. Standard Webhooks uses extra's webhook-id (or svix-id when extra carries
// svix-id) and DefaultWebhID when neither is set. Adyen bodies are signed with the
// HmacSignature header; use SignAdyenItems for the per-item form.
func Headers(tb testing.TB, provider v1alpha1.ProviderType, body []byte, now time.Time, extra http.Header) http.Header {
	tb.Helper()
	h := extra.Clone()
	if h == nil {
		h = http.Header{}
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	raw := []byte(RawSecret)
	switch provider {
	case v1alpha1.ProviderStripe:
		h.Set("Stripe-Signature", "t="+ts+",v1="+hex.EncodeToString(mac([]byte(StripeSecret), ts, ".", string(body))))
	case v1alpha1.ProviderAdyen:
		h.Set("HmacSignature", base64.StdEncoding.EncodeToString(mac(decodeHexKey(tb, AdyenHexKey), string(body))))
	case v1alpha1.ProviderGitHub:
		h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac(raw, string(body))))
	case v1alpha1.ProviderShopify:
		h.Set("X-Shopify-Hmac-Sha256", base64.StdEncoding.EncodeToString(mac(raw, string(body))))
	case v1alpha1.ProviderSlack:
		h.Set("X-Slack-Request-Timestamp", ts)
		h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac(raw, "v0:", ts, ":", string(body))))
	case v1alpha1.ProviderStandardWebhooks:
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(WhsecSecret, "whsec_"))
		if err != nil {
			tb.Fatal(err)
		}
		prefix := "webhook-"
		if h.Get("svix-id") != "" {
			prefix = "svix-"
		}
		id := h.Get(prefix + "id")
		if id == "" {
			id = DefaultWebhID
			h.Set(prefix+"id", id)
		}
		h.Set(prefix+"timestamp", ts)
		h.Set(prefix+"signature", "v1,"+base64.StdEncoding.EncodeToString(mac(key, id, ".", ts, ".", string(body))))
	case v1alpha1.ProviderHMAC:
		h.Set(HMACHeader, HMACPrefix+hex.EncodeToString(mac(raw, string(body))))
	default:
		tb.Fatalf("sigtest: unknown provider %q", provider)
	}
	return h
}

// decodeHexKey decodes an HMAC key as Adyen shows it (hex).
func decodeHexKey(tb testing.TB, s string) []byte {
	tb.Helper()
	key, err := hex.DecodeString(s)
	if err != nil {
		tb.Fatal(fmt.Errorf("adyen hmac key: %w", err))
	}
	return key
}

// AdyenItem is the signed part of one Adyen notification item.
type AdyenItem struct {
	PSP, Original, Merchant, Reference string
	Value                              int64
	Currency, EventCode, Success       string
}

// Signature returns the item's additionalData.hmacSignature under AdyenHexKey.
func (it AdyenItem) Signature(tb testing.TB) string {
	tb.Helper()
	return it.SignatureUnder(tb, AdyenHexKey)
}

// SignatureUnder returns the item's additionalData.hmacSignature under hexKey, an HMAC
// key as Adyen shows it (hex).
func (it AdyenItem) SignatureUnder(tb testing.TB, hexKey string) string {
	tb.Helper()
	return base64.StdEncoding.EncodeToString(mac(decodeHexKey(tb, hexKey), it.SignedText()))
}

// SignedText is what the item's signature covers: its eight signed fields joined by ':'.
func (it AdyenItem) SignedText() string {
	return strings.Join([]string{it.PSP, it.Original, it.Merchant, it.Reference,
		strconv.FormatInt(it.Value, 10), it.Currency, it.EventCode, it.Success}, ":")
}

// JSON returns the NotificationRequestItem object of the item, signed (or with the
// given signature when sig is not empty), with extra members merged in.
func (it AdyenItem) JSON(tb testing.TB, sig string, extra map[string]any) map[string]any {
	tb.Helper()
	if sig == "" {
		sig = it.Signature(tb)
	}
	return it.WithSignature(sig, extra)
}

// WithSignature returns the NotificationRequestItem object of the item with sig as its
// additionalData.hmacSignature as given (empty stays empty), with extra members merged in.
func (it AdyenItem) WithSignature(sig string, extra map[string]any) map[string]any {
	item := map[string]any{
		"pspReference":        it.PSP,
		"merchantAccountCode": it.Merchant,
		"merchantReference":   it.Reference,
		"amount":              map[string]any{"value": it.Value, "currency": it.Currency},
		"eventCode":           it.EventCode,
		"success":             it.Success,
		"additionalData":      map[string]any{"hmacSignature": sig},
	}
	if it.Original != "" {
		item["originalReference"] = it.Original
	}
	for k, v := range extra {
		item[k] = v
	}
	return item
}

// AdyenBody returns a Standard webhook body holding items (NotificationRequestItem
// objects as returned by AdyenItem.JSON), with extra envelope members merged in.
func AdyenBody(tb testing.TB, extra map[string]any, items ...map[string]any) []byte {
	tb.Helper()
	wrapped := make([]any, len(items))
	for i, it := range items {
		wrapped[i] = map[string]any{"NotificationRequestItem": it}
	}
	envelope := map[string]any{"live": "false", "notificationItems": wrapped}
	for k, v := range extra {
		envelope[k] = v
	}
	return Marshal(tb, envelope)
}

// Marshal encodes v as JSON without HTML escaping: '&', '<' and '>' stay literal, as
// many providers send them (and as an attacker's smuggled form fields need them).
func Marshal(tb testing.TB, v any) []byte {
	tb.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		tb.Fatal(fmt.Errorf("marshal: %w", err))
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
