package provider

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
	"github.com/hookkeeper/hookkeeper/internal/signature/sigtest"
)

const (
	adyenKeyA = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056" // Adyen's example key
	adyenKeyB = "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00" // Adyen Go library's test key
)

// adyenTestItem is a notification item built by the tests, signed by sigtest with
// crypto/hmac rather than through the package.
type adyenTestItem sigtest.AdyenItem

func (it adyenTestItem) sign(t testing.TB, hexKey string) string {
	t.Helper()
	return sigtest.AdyenItem(it).SignatureUnder(t, hexKey)
}

// json is the item wrapped as a notificationItems entry, dated, with signature as its
// hmacSignature as given (empty stays empty).
func (it adyenTestItem) json(signature string) map[string]any {
	item := sigtest.AdyenItem(it).WithSignature(signature, map[string]any{"eventDate": "2026-01-01T00:00:00+01:00"})
	return map[string]any{"NotificationRequestItem": item}
}

func adyenBatch(t testing.TB, items ...map[string]any) []byte {
	body, err := json.Marshal(map[string]any{"live": "false", "notificationItems": items})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

var (
	adyenAuth    = adyenTestItem{"8815000000000001", "", "ShopECOM", "order-1", 1130, "EUR", "AUTHORISATION", "true"}
	adyenCapture = adyenTestItem{"8815000000000002", "8815000000000001", "ShopECOM", "order-1", 1130, "EUR", "CAPTURE", "true"}
)

func adyenVerifierWith(t *testing.T, keys ...string) signature.Verifier {
	t.Helper()
	secrets := make([]signature.Secret, len(keys))
	for i, k := range keys {
		secrets[i] = signature.Secret{Value: k}
	}
	return mustNew(t, v1alpha1.ProviderSpec{Type: v1alpha1.ProviderAdyen}, secrets...)
}

func adyenRequest(body []byte) signature.Request {
	return signature.Request{Header: http.Header{}, Body: body, Now: time.Unix(1700000000, 0)}
}

func TestAdyenBatch(t *testing.T) {
	verifier := adyenVerifierWith(t, adyenKeyA)
	cases := []struct {
		name string
		body []byte
		want signature.Reason
	}{
		{"two signed items", adyenBatch(t, adyenAuth.json(adyenAuth.sign(t, adyenKeyA)), adyenCapture.json(adyenCapture.sign(t, adyenKeyA))), ""},
		{"a forged item after an authentic one", adyenBatch(t,
			adyenAuth.json(adyenAuth.sign(t, adyenKeyA)),
			adyenCapture.json(adyenCapture.sign(t, adyenKeyB))), signature.ReasonMismatch},
		{"an authentic item's signature copied onto another item", adyenBatch(t,
			adyenAuth.json(adyenAuth.sign(t, adyenKeyA)),
			adyenCapture.json(adyenAuth.sign(t, adyenKeyA))), signature.ReasonMismatch},
		{"an unsigned item after an authentic one", adyenBatch(t,
			adyenAuth.json(adyenAuth.sign(t, adyenKeyA)),
			adyenCapture.json("")), signature.ReasonMissingHeader},
		{"an item with a non-base64 signature", adyenBatch(t, adyenAuth.json("not base64!")), signature.ReasonMalformedHeader},
		{"an item with a short signature", adyenBatch(t, adyenAuth.json("AAAA")), signature.ReasonMalformedHeader},
		{"empty batch", adyenBatch(t), signature.ReasonMalformedHeader},
		{"no notificationItems", []byte(`{"live":"false"}`), signature.ReasonMalformedHeader},
		{"notificationItems not an array", []byte(`{"live":"false","notificationItems":{}}`), signature.ReasonMalformedHeader},
		{"item without NotificationRequestItem", []byte(`{"notificationItems":[{}]}`), signature.ReasonMalformedHeader},
		{"not JSON", []byte(`[accepted]`), signature.ReasonMalformedHeader},
		{"empty body", nil, signature.ReasonMalformedHeader},
		{"trailing data", append(adyenBatch(t, adyenAuth.json(adyenAuth.sign(t, adyenKeyA))), []byte(`{}`)...), signature.ReasonMalformedHeader},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := verifier.Verify(adyenRequest(tc.body))
			if got := signature.ReasonOf(err); got != tc.want {
				t.Fatalf("want %q, got %q (%v)", tc.want, got, err)
			}
		})
	}
}

func TestAdyenBatchItemsMayUseEitherActiveKey(t *testing.T) {
	// During a rotation Adyen signs queued events with the previous key and new ones with
	// the new key, so one batch can mix them.
	body := adyenBatch(t, adyenAuth.json(adyenAuth.sign(t, adyenKeyA)), adyenCapture.json(adyenCapture.sign(t, adyenKeyB)))
	if err := adyenVerifierWith(t, adyenKeyB, adyenKeyA).Verify(adyenRequest(body)); err != nil {
		t.Fatalf("mixed-key batch with both keys active: %v", err)
	}
	expired := mustNew(t, v1alpha1.ProviderSpec{Type: v1alpha1.ProviderAdyen},
		signature.Secret{Value: adyenKeyB}, signature.Secret{Value: adyenKeyA, ExpiresAt: time.Unix(1600000000, 0)})
	if got := signature.ReasonOf(expired.Verify(adyenRequest(body))); got != signature.ReasonMismatch {
		t.Fatalf("an item signed with an expired key verified (%q)", got)
	}
}

func TestAdyenSignedFieldsAreBoundToValues(t *testing.T) {
	signed := adyenAuth.json(adyenAuth.sign(t, adyenKeyA))
	item := signed["NotificationRequestItem"].(map[string]any)
	verifier := adyenVerifierWith(t, adyenKeyA)
	mutations := map[string]func(map[string]any){
		"amount":            func(m map[string]any) { m["amount"] = map[string]any{"value": 1131, "currency": "EUR"} },
		"currency":          func(m map[string]any) { m["amount"] = map[string]any{"value": 1130, "currency": "USD"} },
		"success":           func(m map[string]any) { m["success"] = "false" },
		"eventCode":         func(m map[string]any) { m["eventCode"] = "REFUND" },
		"merchantReference": func(m map[string]any) { m["merchantReference"] = "order-2" },
		"originalReference": func(m map[string]any) { m["originalReference"] = "x" },
		"pspReference":      func(m map[string]any) { m["pspReference"] = "8815000000000009" },
		"merchantAccount":   func(m map[string]any) { m["merchantAccountCode"] = "OtherECOM" },
	}
	for name, mutate := range mutations {
		t.Run(name, func(t *testing.T) {
			clone := map[string]any{}
			for k, v := range item {
				clone[k] = v
			}
			mutate(clone)
			body := adyenBatch(t, map[string]any{"NotificationRequestItem": clone})
			if got := signature.ReasonOf(verifier.Verify(adyenRequest(body))); got != signature.ReasonMismatch {
				t.Fatalf("changing %s: want mismatch, got %q", name, got)
			}
		})
	}
	t.Run("unsigned fields may change", func(t *testing.T) {
		clone := map[string]any{}
		for k, v := range item {
			clone[k] = v
		}
		clone["eventDate"] = "2030-01-01T00:00:00Z"
		if err := verifier.Verify(adyenRequest(adyenBatch(t, map[string]any{"NotificationRequestItem": clone}))); err != nil {
			t.Fatalf("a field outside the signature broke verification: %v", err)
		}
	})
}

func TestAdyenRefusesAmbiguousJSON(t *testing.T) {
	sig := adyenAuth.sign(t, adyenKeyA)
	verifier := adyenVerifierWith(t, adyenKeyA)
	item := func(extra string) []byte {
		return []byte(`{"notificationItems":[{"NotificationRequestItem":{` +
			`"pspReference":"8815000000000001","merchantAccountCode":"ShopECOM","merchantReference":"order-1",` +
			`"amount":{"value":1130,"currency":"EUR"},"eventCode":"AUTHORISATION","success":"true",` +
			`"additionalData":{"hmacSignature":"` + sig + `"}` + extra + `}}]}`)
	}
	if err := verifier.Verify(adyenRequest(item(""))); err != nil {
		t.Fatalf("hand-written item: %v", err)
	}
	for name, body := range map[string][]byte{
		// A later parser taking the last duplicate would see an amount nobody signed.
		"duplicate amount":          item(`,"amount":{"value":999999,"currency":"EUR"}`),
		"duplicate success":         item(`,"success":"false"`),
		"case-folded twin":          item(`,"Amount":{"value":999999,"currency":"EUR"}`),
		"case-folded signature key": []byte(strings.Replace(string(item("")), `"additionalData":{`, `"additionalData":{"HmacSignature":"x",`, 1)),
		"fractional amount":         []byte(strings.Replace(string(item("")), `"value":1130`, `"value":1130.0`, 1)),
		"exponent amount":           []byte(strings.Replace(string(item("")), `"value":1130`, `"value":1.13e3`, 1)),
		"string amount":             []byte(strings.Replace(string(item("")), `"value":1130`, `"value":"1130"`, 1)),
		"non-string psp ref":        []byte(strings.Replace(string(item("")), `"pspReference":"8815000000000001"`, `"pspReference":8815000000000001`, 1)),
	} {
		t.Run(name, func(t *testing.T) {
			if got := signature.ReasonOf(verifier.Verify(adyenRequest(body))); got != signature.ReasonMalformedHeader {
				t.Fatalf("want malformed_header, got %q", got)
			}
		})
	}
	t.Run("merchant metadata keys may differ only in case", func(t *testing.T) {
		body := []byte(strings.Replace(string(item("")), `"additionalData":{`, `"additionalData":{"metadata.Key":"a","metadata.key":"b",`, 1))
		if err := verifier.Verify(adyenRequest(body)); err != nil {
			t.Fatalf("metadata keys: %v", err)
		}
	})
	t.Run("boolean success renders as its text", func(t *testing.T) {
		body := []byte(strings.Replace(string(item("")), `"success":"true"`, `"success":true`, 1))
		if err := verifier.Verify(adyenRequest(body)); err != nil {
			t.Fatalf("boolean success: %v", err)
		}
	})
}

func TestAdyenHmacSignatureHeaderTakesPrecedence(t *testing.T) {
	v := vectorNamed(t, "adyen-hmacsignature-header")
	verifier := mustNew(t, v.spec(), signature.Secret{Value: v.Secret})

	// A batch body whose items are unsigned verifies through the header alone ...
	body := adyenBatch(t, adyenAuth.json(""))
	key, _ := hex.DecodeString(v.Secret)
	req := adyenRequest(body)
	req.Header.Set(HeaderAdyenHmacSignature, base64.StdEncoding.EncodeToString(oracleMAC(sha256.New, key, string(body))))
	if err := verifier.Verify(req); err != nil {
		t.Fatalf("header form over a batch body: %v", err)
	}
	// ... and a wrong header is not rescued by correctly signed items.
	signedItems := adyenBatch(t, adyenAuth.json(adyenAuth.sign(t, v.Secret)))
	req = adyenRequest(signedItems)
	req.Header.Set(HeaderAdyenHmacSignature, base64.StdEncoding.EncodeToString(make([]byte, 32)))
	if got := signature.ReasonOf(verifier.Verify(req)); got != signature.ReasonMismatch {
		t.Fatalf("want mismatch from the header, got %q", got)
	}
	req.Header.Set(HeaderAdyenHmacSignature, "@@@")
	if got := signature.ReasonOf(verifier.Verify(req)); got != signature.ReasonMalformedHeader {
		t.Fatalf("want malformed_header, got %q", got)
	}
}

// Adyen's newer webhooks (Balance Platform, Management API) sign the whole body in
// HmacSignature, and the body is one event, {"data", "environment", "type"}, with no
// notificationItems: it is the document, its id the body digest (a retry resends the
// same body), its type and entity the body's type and data.id. The same body without the
// header, or with a changed byte, is refused.
func TestAdyenNewerWebhookIsOneSignedEvent(t *testing.T) {
	v := vectorNamed(t, "adyen-hmacsignature-header")
	key, _ := hex.DecodeString(v.Secret)
	body := []byte(`{"data":{"balancePlatform":"YOUR_BALANCE_PLATFORM","id":"TRVF00000000000000000001",` +
		`"amount":{"currency":"EUR","value":1130},"status":"authorised"},` +
		`"environment":"test","timestamp":"2026-05-01T10:00:00+02:00","type":"balancePlatform.transfer.created"}`)
	req := adyenRequest(body)
	req.Header.Set(HeaderAdyenHmacSignature, base64.StdEncoding.EncodeToString(oracleMAC(sha256.New, key, string(body))))
	expectPresetValues(t, presetValuesOf(t, signed{spec: v.spec(), secret: v.Secret, req: req}, nil), presetValues{
		ID: signature.BodyDigest(body), Type: "balancePlatform.transfer.created", EntityKey: "TRVF00000000000000000001",
		Amount: presetPtr(int64(1130)),
	})

	verifier := mustNew(t, v.spec(), signature.Secret{Value: v.Secret})
	if got := signature.ReasonOf(verifier.Verify(adyenRequest(body))); got != signature.ReasonMalformedHeader {
		t.Errorf("the body without HmacSignature: reason %q, want %q", got, signature.ReasonMalformedHeader)
	}
	tampered := adyenRequest([]byte(strings.Replace(string(body), "1130", "1", 1)))
	tampered.Header.Set(HeaderAdyenHmacSignature, req.Header.Get(HeaderAdyenHmacSignature))
	if got := signature.ReasonOf(verifier.Verify(tampered)); got != signature.ReasonMismatch {
		t.Errorf("a changed byte under the header: reason %q, want %q", got, signature.ReasonMismatch)
	}
}

// Adyen's signed text joins eight fields with ':' and escapes nothing: a captured item
// re-split into other fields (pspReference "P:" and merchantReference "R") signs the
// same text as the genuine one (pspReference "P", merchantReference ":R"), so it would
// verify as a new event with another id and entity. Only merchantReference may hold ':'.
func TestAdyenSignedTextHasOneReading(t *testing.T) {
	verifier := adyenVerifierWith(t, adyenKeyA)
	genuine := adyenTestItem{PSP: "8816", Merchant: "Shop", Reference: "order:42", Value: 1000, Currency: "EUR", EventCode: "AUTHORISATION", Success: "true"}
	if err := verifier.Verify(adyenRequest(adyenBatch(t, genuine.json(genuine.sign(t, adyenKeyA))))); err != nil {
		t.Fatalf("a merchantReference with ':' must verify: %v", err)
	}
	// The genuine item's signed text "8816::Shop:order:42:..." also reads as
	// pspReference "8816:", originalReference "Shop", merchantAccountCode "order",
	// merchantReference "42": the same signature over a re-split item.
	resplit := adyenTestItem{PSP: "8816:", Original: "Shop", Merchant: "order", Reference: "42", Value: 1000, Currency: "EUR", EventCode: "AUTHORISATION", Success: "true"}
	if got, want := sigtest.AdyenItem(resplit).SignedText(), sigtest.AdyenItem(genuine).SignedText(); got != want {
		t.Fatalf("the re-split item signs %q, not %q", got, want)
	}
	forged := resplit.json(genuine.sign(t, adyenKeyA))
	if got := signature.ReasonOf(verifier.Verify(adyenRequest(adyenBatch(t, forged)))); got != signature.ReasonMalformedHeader {
		t.Fatalf("a pspReference holding ':' verified or failed otherwise: %q", got)
	}
}
