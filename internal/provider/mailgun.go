package provider

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// ProviderMailgun is the spec.provider.type of Mailgun.
const ProviderMailgun v1alpha1.ProviderType = "Mailgun"

// mailgunVerifier implements Mailgun's webhook signature (Mailgun docs, "Securing
// Webhooks"). The signature travels in the JSON body, not in a header:
//
//	{"signature": {"timestamp": "<unix>", "token": "<50 chars>", "signature": "<hex>"}, "event-data": {...}}
//
// signature.signature is the hex HMAC-SHA256, under the domain's HTTP webhook signing
// key, of timestamp and token concatenated. That is all it covers: event-data is NOT
// signed. Whoever holds one genuine delivery (its timestamp, token and signature) can
// attach any event-data to them, for as long as the timestamp is within the tolerance.
// The id preset is therefore the signed token, so every such variant of one delivery is
// a duplicate of whichever copy arrived first. Events of a subaccount also carry
// signature["parent-signature"], the same HMAC under the primary account's key; either
// verifies.
type mailgunVerifier struct{ endpointKeys }

func init() {
	register(Provider{
		Type:     ProviderMailgun,
		Verifier: hmacKeyringVerifier(sha256.New, v1alpha1.KeyRaw, func(k endpointKeys) opener { return &mailgunVerifier{k} }),
		Preset: Preset{
			// The token is the only signed value that identifies a delivery; event-data,
			// its id included, is not signed.
			ID:         `signed.id`,
			Type:       `body["event-data"].event + (has(body["event-data"].severity) ? "." + body["event-data"].severity : "")`,
			EntityKey:  `body["event-data"].message.headers["message-id"]`,
			OccurredAt: `body["event-data"].timestamp`,
		},
		Sign:   mailgunSigner,
		Sample: mailgunSample,
		Doc: Doc{
			Scheme: "HMAC-SHA256 hex in the body's `signature.signature` (or `signature.parent-signature`)",
			Signed: "`signature.timestamp` and `signature.token` only: `event-data` is **not** signed, so a captured delivery's " +
				"signature carries any `event-data` within the tolerance (as a duplicate of that delivery's token)",
			Timestamp: "`signature.timestamp` (in the body)",
			Key:       "the HTTP webhook signing key (raw)",
		},
	})
}

// Open verifies the signature object of the body and returns the whole body as the
// document, with the signed timestamp and token (signed.id). The body is parsed here,
// once, as JSON whatever the Content-Type says, and strictly: duplicate keys (also keys
// differing only in case) are refused, so no other parser can read a different signature
// or event out of it.
func (v *mailgunVerifier) Open(req signature.Request) (*signature.Verified, error) {
	keys, ferr := v.keys.Active(req.Now)
	if ferr != nil {
		return nil, ferr
	}
	body, err := decodeObject(req.Body, true)
	if err != nil {
		return nil, signature.Fail(signature.ReasonMalformedHeader, "not a Mailgun webhook body: %v", err)
	}
	if isNull(body["signature"]) {
		return nil, signature.Fail(signature.ReasonMissingHeader, "the body has no signature object")
	}
	sigObject, err := decodeObject(body["signature"], true)
	if err != nil {
		return nil, signature.Fail(signature.ReasonMalformedHeader, "the body's signature is not an object: %v", err)
	}
	// event-data is not signed, but a body without it is no Mailgun webhook: refusing it
	// here keeps the whole body meaningful to the one byte.
	if isNull(body["event-data"]) {
		return nil, signature.Fail(signature.ReasonMalformedHeader, "the body has no event-data")
	}
	if _, err := decodeObject(body["event-data"], false); err != nil {
		return nil, signature.Fail(signature.ReasonMalformedHeader, "the body's event-data is not an object: %v", err)
	}
	fields := map[string]string{}
	for _, name := range []string{"timestamp", "token", "signature"} {
		s, err := stringField(sigObject[name])
		if err != nil {
			return nil, signature.Fail(signature.ReasonMalformedHeader, "signature.%s: %v", name, err)
		}
		if s == "" {
			return nil, signature.Fail(signature.ReasonMissingHeader, "signature.%s is missing or empty", name)
		}
		fields[name] = s
	}
	ts, ferr := signature.CheckTimestamp("signature.timestamp", v1alpha1.TimestampUnix, fields["timestamp"], req.Now, v.tolerance)
	if ferr != nil {
		return nil, ferr
	}
	var candidates [][]byte
	if sig, ok := v.decode(fields["signature"]); ok {
		candidates = append(candidates, sig)
	}
	if raw, present := sigObject["parent-signature"]; present && !isNull(raw) {
		parent, err := stringField(raw)
		if err != nil {
			return nil, signature.Fail(signature.ReasonMalformedHeader, "signature.parent-signature: %v", err)
		}
		if sig, ok := v.decode(parent); ok {
			candidates = append(candidates, sig)
		}
	}
	if len(candidates) == 0 {
		return nil, signature.Fail(signature.ReasonMalformedHeader, "signature.signature is not a lower-case hex HMAC-SHA256")
	}
	if _, ok := v.keys.Match(keys, candidates, []byte(fields["timestamp"]), []byte(fields["token"])); !ok {
		return nil, signature.Fail(signature.ReasonMismatch, "no active secret produces signature.signature over signature.timestamp and signature.token")
	}
	// No digest: the signature does not cover the body.
	signed := map[string]string{signature.SignedTimestamp: ts, signature.SignedID: fields["token"]}
	return signature.NewVerified(req.Now, []json.RawMessage{req.Body}, signed), nil
}

// decode reads a signature as Mailgun writes it: lower-case hex, the hexdigest its docs
// compare the signature to as a string. The signature is part of the body here, so one
// spelling only keeps every byte of the body meaningful.
func (v *mailgunVerifier) decode(s string) ([]byte, bool) {
	if strings.ContainsAny(s, "ABCDEF") {
		return nil, false
	}
	return signature.DecodeSignature(v1alpha1.EncodingHex, s, v.keys.SignatureSize())
}

// mailgunSample is an event whose token (Mailgun's signed id) is the event id; Sign
// fills in the signature object.
func mailgunSample(e SampleEvent) (Delivery, error) {
	return signedIDDelivery(e.ID, map[string]any{
		"signature": map[string]any{},
		"event-data": map[string]any{
			"event": e.Type, "id": e.ID, "timestamp": e.Time.Unix(),
			"message": map[string]any{"headers": map[string]any{"message-id": e.EntityKey}},
		},
	})
}

// mailgunSigner writes the body's signature object: the timestamp, the token (d.ID, or a
// random one) and the hex HMAC-SHA256 of both. The other members of the body are kept
// byte for byte (in sorted order); event-data is not signed.
func mailgunSigner(_ v1alpha1.ProviderSpec, secret string, d Delivery) (Delivery, error) {
	key, err := signature.NewHMACSigningKey(sha256.New, v1alpha1.KeyRaw, secret)
	if err != nil {
		return Delivery{}, fmt.Errorf("signing secret: %w", err)
	}
	members, err := decodeObject(d.Body, true)
	if err != nil {
		return Delivery{}, fmt.Errorf("a Mailgun body is a JSON object: %w", err)
	}
	if d.ID == "" {
		d.ID = randomHex(25) // Mailgun's tokens are 50 characters
	}
	ts := signature.FormatTimestamp(v1alpha1.TimestampUnix, d.Time)
	sig := signature.EncodeSignature(v1alpha1.EncodingHex, key.Sign([]byte(ts), []byte(d.ID)))
	if members["signature"], err = sampleJSON(map[string]string{"timestamp": ts, "token": d.ID, "signature": sig}); err != nil {
		return Delivery{}, err
	}
	names := make([]string, 0, len(members))
	for name := range members {
		names = append(names, name)
	}
	slices.Sort(names)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, name := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		quoted, err := sampleJSON(name)
		if err != nil {
			return Delivery{}, err
		}
		b.Write(quoted)
		b.WriteByte(':')
		b.Write(members[name])
	}
	b.WriteByte('}')
	d.Body = b.Bytes()
	return d, nil
}
