package signature

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/url"
	"time"
)

// Verified is what a verifier vouches for: the documents of a request whose signature
// checked, parsed once, by the verifier. Extraction reads events only from a Verified,
// and only through its methods, so the events recorded are exactly the content whose
// signature was checked: the verifier and the extractor cannot read two different
// documents out of one body (say, the JSON body for the signature and a form field
// inside it for the event).
//
// The zero value vouches for nothing: Documents returns an error. Only a Verifier's Open
// returns a Verified with content.
type Verified struct {
	now time.Time
	// docs are the signed JSON documents, one per event: the one document of the body
	// for most providers; for a batch provider one per event (Adyen's
	// NotificationRequestItem objects, HubSpot's array elements, exactly as they
	// appear in the body); for a form the provider signs field by field (Twilio), a
	// JSON object of the fields.
	docs []json.RawMessage
	// docErr says why a verified body holds no document (not JSON, not a form with one
	// payload field): a payload problem (400), not a signature problem (401).
	docErr error
	// signed holds values the signature covers besides the documents, for CEL's
	// `signed` map: digest, and id and timestamp where the scheme signs them.
	signed map[string]string
	// keys and key are the keyring and the key that verified, for a handshake that
	// answers with a MAC of its own (Zoom); see MAC.
	keys *Keyring
	key  Key
}

// NewVerified returns the Verified of a request whose signature a provider's own code
// checked: the signed documents, one per event, and the signed values.
func NewVerified(now time.Time, docs []json.RawMessage, signed map[string]string) *Verified {
	if signed == nil {
		signed = map[string]string{}
	}
	return &Verified{now: now, docs: docs, signed: signed}
}

// Unreadable returns the Verified of a request whose signature checked but whose body
// holds no document: Documents returns err (a 400, not a 401).
func Unreadable(now time.Time, err error, signed map[string]string) *Verified {
	v := NewVerified(now, nil, signed)
	v.docErr = err
	return v
}

// MAC returns the HMAC of msg under the key that verified the request, for a handshake
// that proves knowledge of the secret (Zoom's encryptedToken). ok is false when the
// request was not verified with an HMAC key.
func (v *Verified) MAC(msg []byte) (mac []byte, ok bool) {
	if v == nil || v.keys == nil || v.keys.newHash == nil || v.key.material == nil {
		return nil, false
	}
	return v.keys.mac(v.key.material, msg), true
}

// Signed-value keys of Verified.Signed.
const (
	// SignedDigest is "sha256:<hex>" of the signed bytes, present when the signature
	// covers the whole body (absent for Adyen's per-item signatures and for Mailgun,
	// whose signature covers only a timestamp and a token; for a Twilio form, the
	// digest of the signed fields).
	SignedDigest = "digest"
	// SignedID is the delivery id the signature covers (Standard Webhooks' webhook-id or
	// svix-id, whichever set verified; an HMAC scheme's {id}).
	SignedID = "id"
	// SignedTimestamp is the signed time in Unix seconds, whatever its wire format
	// (Stripe's t, Slack's, Twitch's RFC 3339, HubSpot's milliseconds, an HMAC scheme's
	// {timestamp}); it was within the tolerance of Now.
	SignedTimestamp = "timestamp"
)

var errNotVerified = errors.New("the request was not verified")

// Now is the request time the signature was checked at.
func (v *Verified) Now() time.Time {
	if v == nil {
		return time.Time{}
	}
	return v.now
}

// Documents returns the signed JSON documents, one per event. An error means the
// request verified but carries no document this package can read (a 400).
func (v *Verified) Documents() ([]json.RawMessage, error) {
	if v == nil || (v.docs == nil && v.docErr == nil) {
		return nil, errNotVerified
	}
	if v.docErr != nil {
		return nil, v.docErr
	}
	return v.docs, nil
}

// Signed returns a copy of the values the signature covers besides the documents (see
// SignedDigest, SignedID, SignedTimestamp); absent keys are not signed by the scheme.
func (v *Verified) Signed() map[string]string {
	out := map[string]string{}
	if v == nil {
		return out
	}
	for k, s := range v.signed {
		out[k] = s
	}
	return out
}

// BodyDigest is the SignedDigest value of a body.
func BodyDigest(body []byte) string {
	sum := sha256.Sum256(body)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// WholeBody returns the Verified of a request whose signature covers the whole body:
// its one document is read from the body bytes alone (see Document).
func WholeBody(req Request, signed map[string]string) *Verified {
	if signed == nil {
		signed = map[string]string{}
	}
	signed[SignedDigest] = BodyDigest(req.Body)
	v := &Verified{now: req.Now, signed: signed}
	doc, err := Document(req.Body)
	if err != nil {
		v.docErr = err
		return v
	}
	v.docs = []json.RawMessage{doc}
	return v
}

// Document returns the JSON document a signed body carries, decided by the bytes alone,
// never by the (unsigned) Content-Type header:
//
//   - a body whose first non-space byte is '{' is the document itself;
//   - a form body that is exactly one field named payload (GitHub's form content type,
//     Slack's interactivity) carries the document in that field, which must itself be a
//     JSON object.
//
// Anything else is an error. The two forms cannot both apply to one body (a JSON object
// does not start with "payload="), so one body has exactly one reading.
func Document(body []byte) (json.RawMessage, error) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '{' {
		return json.RawMessage(body), nil
	}
	if !bytes.HasPrefix(body, []byte("payload=")) {
		return nil, errors.New("the body is neither a JSON object nor a form with one payload field")
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, errors.New("the form body cannot be parsed")
	}
	if len(form) != 1 || len(form["payload"]) != 1 {
		return nil, errors.New("the form body must hold exactly one field, payload, once")
	}
	payload := []byte(form["payload"][0])
	if t := bytes.TrimLeft(payload, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, errors.New("the form's payload field is not a JSON object")
	}
	return json.RawMessage(payload), nil
}
