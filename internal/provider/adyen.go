package provider

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// HeaderAdyenHmacSignature is the header of Adyen's newer webhooks (e.g. balance platform
// and management webhooks): base64 HMAC-SHA256 of the raw body. Their body is one event,
// {"data": {...}, "environment": ..., "type": ...}, not a notificationItems batch.
const HeaderAdyenHmacSignature = "HmacSignature"

// adyenVerifier implements Adyen's two forms. With an HmacSignature header, the header
// signs the raw body: a notificationItems batch yields its items, any other JSON object
// (the newer webhooks' {"data", "environment", "type"}) is one document. Without it, the body is a Standard webhook batch and every
// notification item carries its own additionalData.hmacSignature over
// pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success;
// every item must verify, so one forged item cannot ride along with authentic ones.
type adyenVerifier struct {
	keys *signature.Keyring
}

func init() {
	register(Provider{
		Type: v1alpha1.ProviderAdyen,
		// Adyen signs no timestamp, so there is no tolerance to keep.
		Verifier: hmacKeyringVerifier(sha256.New, v1alpha1.KeyHex, func(k endpointKeys) opener { return &adyenVerifier{keys: k.keys} }),
		// No OccurredAt: eventDate is outside the item signature. Whichever copy of an
		// item arrives first is recorded, so an attacker holding one genuine item could
		// re-send it dated 1970 before Adyen's retry and have it judged stale, the
		// genuine retry then only a duplicate. Adyen events are ordered by the state
		// machine (and parking), not by time.
		//
		// A notification item has pspReference and eventCode; a newer webhook (signed
		// whole, in HmacSignature) has type and data instead, and no event id: a retry
		// resends the same body, so its id is the body digest, its entity data.id and its
		// amount data.amount.value.
		Preset: Preset{
			ID: `has(body.pspReference) ? body.pspReference + ":" + body.eventCode + ":" + string(body.success) : ` +
				`signed.digest`,
			Type:      `has(body.eventCode) ? body.eventCode : body.type`,
			EntityKey: `has(body.eventCode) ? body.merchantReference : body.data.id`,
			Amount:    `has(body.eventCode) ? body.amount.value : body.data.amount.value`,
		},
		Batch:  true,
		Ack:    Response{Status: http.StatusOK, ContentType: "text/plain; charset=utf-8", Body: []byte("[accepted]")},
		Sign:   adyenSigner,
		Sample: adyenSample,
		Doc: Doc{
			Scheme: "HMAC-SHA256 base64 per notification item (`additionalData.hmacSignature`), or of the body in `HmacSignature`",
			Signed: "per item: `pspReference`, `originalReference`, `merchantAccountCode`, `merchantReference`, `amount.value`, `amount.currency`, `eventCode`, `success` (or the whole body with `HmacSignature`)",
			Key:    "the HMAC key from the Customer Area (hex)",
		},
	})
}

// merchantReferenceField is the index of merchantReference among the signed fields.
const merchantReferenceField = 3

// adyenItem is one notification item reduced to what its signature covers.
type adyenItem struct {
	fields    [8]string       // the signed fields, in signing order
	signature string          // additionalData.hmacSignature, still base64
	raw       json.RawMessage // the NotificationRequestItem object exactly as in the body
}

// signedParts returns the fields joined with ':' as Adyen signs them.
func (it adyenItem) signedParts() [][]byte {
	parts := make([][]byte, 0, 2*len(it.fields)-1)
	for i, f := range it.fields {
		if i > 0 {
			parts = append(parts, []byte(":"))
		}
		parts = append(parts, []byte(f))
	}
	return parts
}

// optionalObject decodes a member that may be absent or null.
func optionalObject(raw json.RawMessage) (map[string]json.RawMessage, error) {
	if isNull(raw) {
		return map[string]json.RawMessage{}, nil
	}
	return decodeObject(raw, true)
}

// integerField renders amount.value exactly as it appears: an integer literal in minor
// units. Anything else (a fraction, an exponent, a string) is refused rather than
// normalised, so the text verified is the number a later parser reads.
func integerField(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	s := string(bytes.TrimSpace(raw))
	digits := s
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if digits == "" || len(digits) > 19 {
		return "", errors.New("expected an integer")
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return "", errors.New("expected an integer")
		}
	}
	return s, nil
}

// successField renders success, which Adyen sends as the string "true" or "false";
// a JSON boolean renders the same way.
func successField(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	switch s := string(bytes.TrimSpace(raw)); s {
	case "true", "false":
		return s, nil
	}
	return stringField(raw)
}

var errNoAdyenItems = errors.New("body has no notificationItems")

// parseAdyenBody extracts every notification item of a Standard webhook body.
func parseAdyenBody(body []byte) ([]adyenItem, error) {
	envelope, err := decodeObject(body, true)
	if err != nil {
		return nil, fmt.Errorf("body: %w", err)
	}
	var rawItems []json.RawMessage
	if isNull(envelope["notificationItems"]) {
		return nil, errNoAdyenItems
	}
	if err := json.Unmarshal(envelope["notificationItems"], &rawItems); err != nil {
		return nil, errors.New("notificationItems is not an array")
	}
	if len(rawItems) == 0 {
		return nil, errors.New("notificationItems is empty")
	}
	items := make([]adyenItem, 0, len(rawItems))
	for i, rawItem := range rawItems {
		item, err := parseAdyenItem(rawItem)
		if err != nil {
			return nil, fmt.Errorf("notification item %d: %w", i, err)
		}
		items = append(items, item)
	}
	return items, nil
}

func parseAdyenItem(raw json.RawMessage) (adyenItem, error) {
	wrapper, err := decodeObject(raw, true)
	if err != nil {
		return adyenItem{}, err
	}
	if isNull(wrapper["NotificationRequestItem"]) {
		return adyenItem{}, errors.New("no NotificationRequestItem")
	}
	m, err := decodeObject(wrapper["NotificationRequestItem"], true)
	if err != nil {
		return adyenItem{}, fmt.Errorf("NotificationRequestItem: %w", err)
	}
	amount, err := optionalObject(m["amount"])
	if err != nil {
		return adyenItem{}, fmt.Errorf("amount: %w", err)
	}
	// additionalData also carries merchant metadata, whose keys may legitimately differ
	// only in case; only the signature key must be unambiguous there.
	additional := map[string]json.RawMessage{}
	if !isNull(m["additionalData"]) {
		if additional, err = decodeObject(m["additionalData"], false); err != nil {
			return adyenItem{}, fmt.Errorf("additionalData: %w", err)
		}
	}
	for key := range additional {
		if key != "hmacSignature" && foldKey(key) == foldKey("hmacSignature") {
			return adyenItem{}, errors.New("additionalData has a key that differs from hmacSignature only in case")
		}
	}
	it := adyenItem{raw: wrapper["NotificationRequestItem"]}
	fields := []struct {
		name   string
		raw    json.RawMessage
		render func(json.RawMessage) (string, error)
	}{
		{"pspReference", m["pspReference"], stringField},
		{"originalReference", m["originalReference"], stringField},
		{"merchantAccountCode", m["merchantAccountCode"], stringField},
		{"merchantReference", m["merchantReference"], stringField},
		{"amount.value", amount["value"], integerField},
		{"amount.currency", amount["currency"], stringField},
		{"eventCode", m["eventCode"], stringField},
		{"success", m["success"], successField},
	}
	for i, f := range fields {
		if it.fields[i], err = f.render(f.raw); err != nil {
			return adyenItem{}, fmt.Errorf("%s: %w", f.name, err)
		}
		// Adyen joins the fields with ':' and escapes nothing, so one signed text
		// could be split into other fields (pspReference "P:" with an empty
		// originalReference signs what "P" and ":" ... sign). Only merchantReference
		// (the merchant's own text) may hold ':'; with every other field free of it,
		// the split is unique and a signature vouches for one reading only.
		if i != merchantReferenceField && strings.Contains(it.fields[i], ":") {
			return adyenItem{}, fmt.Errorf("%s holds ':', which would make the signed text ambiguous", f.name)
		}
	}
	if it.signature, err = stringField(additional["hmacSignature"]); err != nil {
		return adyenItem{}, fmt.Errorf("additionalData.hmacSignature: %w", err)
	}
	return it, nil
}

// Open returns the notification items as the documents: with the HmacSignature header,
// the items of the signed body; without it, exactly the items whose own signatures were
// checked, as they appear in the body. The body is parsed once, here, as JSON whatever
// the Content-Type says.
func (v *adyenVerifier) Open(req signature.Request) (*signature.Verified, error) {
	keys, ferr := v.keys.Active(req.Now)
	if ferr != nil {
		return nil, ferr
	}
	size := v.keys.SignatureSize()
	if signature.Present(req.Header, HeaderAdyenHmacSignature) || len(req.Header.Values(HeaderAdyenHmacSignature)) > 1 {
		sig, ferr := headerSignature(req.Header, HeaderAdyenHmacSignature, v1alpha1.EncodingBase64, size, "a base64 HMAC-SHA256")
		if ferr != nil {
			return nil, ferr
		}
		if _, ok := v.keys.Match(keys, [][]byte{sig}, req.Body); !ok {
			return nil, signature.Fail(signature.ReasonMismatch, "no active secret produces the signature in %s", HeaderAdyenHmacSignature)
		}
		signed := map[string]string{signature.SignedDigest: signature.BodyDigest(req.Body)}
		items, err := parseAdyenBody(req.Body)
		if errors.Is(err, errNoAdyenItems) {
			// A newer webhook: the signed body is the one event.
			return signature.WholeBody(req, signed), nil
		}
		if err != nil {
			return signature.Unreadable(req.Now, fmt.Errorf("not an Adyen notification: %w", err), signed), nil
		}
		return signature.NewVerified(req.Now, itemDocuments(items), signed), nil
	}
	items, err := parseAdyenBody(req.Body)
	if err != nil {
		return nil, signature.Fail(signature.ReasonMalformedHeader, "not an Adyen notification: %v", err)
	}
	for i, it := range items {
		if it.signature == "" {
			return nil, signature.Fail(signature.ReasonMissingHeader, "notification item %d has no additionalData.hmacSignature", i)
		}
		sig, ok := signature.DecodeSignature(v1alpha1.EncodingBase64, it.signature, size)
		if !ok {
			return nil, signature.Fail(signature.ReasonMalformedHeader, "notification item %d: additionalData.hmacSignature is not a base64 HMAC-SHA256", i)
		}
		if _, ok := v.keys.Match(keys, [][]byte{sig}, it.signedParts()...); !ok {
			return nil, signature.Fail(signature.ReasonMismatch, "notification item %d: no active secret produces its hmacSignature", i)
		}
	}
	// No digest: the item signatures cover eight fields, not the body.
	return signature.NewVerified(req.Now, itemDocuments(items), nil), nil
}

func itemDocuments(items []adyenItem) []json.RawMessage {
	docs := make([]json.RawMessage, len(items))
	for i, it := range items {
		docs[i] = it.raw
	}
	return docs
}

// adyenSample is a Standard webhook of one notification item: pspReference is the
// event id, eventCode the type and merchantReference the entity key.
func adyenSample(e SampleEvent) (Delivery, error) {
	for _, f := range []string{e.ID, e.Type} {
		if strings.Contains(f, ":") {
			return Delivery{}, fmt.Errorf("an Adyen pspReference or eventCode holds no ':', got %q", f)
		}
	}
	return jsonDelivery(map[string]any{"live": "false", "notificationItems": []any{
		map[string]any{"NotificationRequestItem": map[string]any{
			"pspReference": e.ID, "merchantAccountCode": "HookkeeperTest", "merchantReference": e.EntityKey,
			"amount":    map[string]any{"value": 0, "currency": "EUR"},
			"eventCode": e.Type, "success": "true", "eventDate": rfc3339(e.Time),
		}},
	}})
}

// adyenSigner signs with the HmacSignature header form: base64 HMAC-SHA256 of the raw
// body under the hex key. It does not write per-item signatures: the header form is
// the one that signs every byte, and the verifier reads the same items from it.
func adyenSigner(_ v1alpha1.ProviderSpec, secret string, d Delivery) (Delivery, error) {
	return signWithScheme(*bodyScheme(HeaderAdyenHmacSignature, "", v1alpha1.EncodingBase64), sha256.New, v1alpha1.KeyHex, secret, d)
}
