package provider

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// ProviderLinear is the spec.provider.type of Linear.
const ProviderLinear v1alpha1.ProviderType = "Linear"

// HeaderLinearSignature carries Linear's hex HMAC-SHA256 of the raw body.
const HeaderLinearSignature = "Linear-Signature"

// linearTimestampField is the body field holding the Unix milliseconds a delivery was
// sent at.
const linearTimestampField = "webhookTimestamp"

// linearVerifier implements Linear's scheme (Linear developer docs, "Webhooks",
// section "Securing webhooks"): `Linear-Signature: <hex>` is HMAC-SHA256 of the raw body
// under the webhook's signing secret, and the body's webhookTimestamp (Unix ms) must be
// close to now. No header is signed: Linear-Delivery and Linear-Event are not. The
// timestamp is a body field, so no Scheme describes it: this verifier checks the MAC
// first (with the shared Keyring), then reads webhookTimestamp from the authenticated
// body and checks it against the endpoint's tolerance. A body without a well-formed
// webhookTimestamp is refused, as Linear's own SDK (LinearWebhookClient.verify) refuses
// it; Linear recommends a window of one minute (spec.provider.tolerance: 1m).
type linearVerifier struct{ endpointKeys }

func init() {
	register(Provider{
		Type:     ProviderLinear,
		Verifier: hmacKeyringVerifier(sha256.New, v1alpha1.KeyRaw, func(k endpointKeys) opener { return &linearVerifier{k} }),
		Preset: Preset{
			// Linear-Delivery is not signed, and webhookTimestamp is the time of sending, so
			// the body digest need not repeat on a retry. A data-change event is named by
			// signed fields that a retry repeats: its model, action, entity and the time
			// the action took place. Other payloads (OAuthApp revoked, agent session
			// events) fall back to signed.digest, which for Linear leaves the
			// webhookTimestamp member out (linearDigest), so a retry keeps it.
			ID: `has(body.data) && has(body.data.id) && has(body.createdAt) ? ` +
				`body.type + ":" + body.action + ":" + string(body.data.id) + ":" + string(body.createdAt) : signed.digest`,
			Type:       `body.type + "." + body.action`,
			EntityKey:  `body.data.id`,
			OccurredAt: `body.createdAt`,
		},
		Sign:   linearSigner,
		Sample: linearSample,
		Doc: Doc{
			Scheme:    "HMAC-SHA256 hex in `Linear-Signature`",
			Signed:    "the body, including its `webhookTimestamp`",
			Timestamp: "the body's `webhookTimestamp` (Unix ms)",
			Key:       "the webhook's signing secret (raw)",
		},
	})
}

// Open checks the MAC over the raw body, then the signed webhookTimestamp; the body is
// parsed only after it is authenticated.
func (v *linearVerifier) Open(req signature.Request) (*signature.Verified, error) {
	keys, sig, ferr := activeHeaderSignature(v.keys, req, HeaderLinearSignature, v1alpha1.EncodingHex, "a hex HMAC-SHA256")
	if ferr != nil {
		return nil, ferr
	}
	if _, ok := v.keys.Match(keys, [][]byte{sig}, req.Body); !ok {
		return nil, signature.Fail(signature.ReasonMismatch, "no active secret produces the signature in %s", HeaderLinearSignature)
	}
	members, raw, err := linearTimestamp(req.Body)
	if err != nil {
		if errors.Is(err, errNoLinearTimestamp) {
			return nil, signature.Fail(signature.ReasonMissingHeader, "the signed body has no %s", linearTimestampField)
		}
		return nil, signature.Fail(signature.ReasonMalformedHeader, "the signed body's %s cannot be read: %v", linearTimestampField, err)
	}
	ts, ferr := signature.CheckTimestamp("the body's "+linearTimestampField, v1alpha1.TimestampUnixMilli, raw, req.Now, v.tolerance)
	if ferr != nil {
		return nil, ferr
	}
	// The body decoded as one JSON object above, so it is the document.
	signed := map[string]string{signature.SignedTimestamp: ts, signature.SignedDigest: linearDigest(members)}
	return signature.NewVerified(req.Now, []json.RawMessage{req.Body}, signed), nil
}

// linearDigest is Linear's signed.digest: the SHA-256 of every signed member of the body
// but webhookTimestamp, the time of sending, which a retry changes. Each member is
// written as its name and raw value, length-prefixed and sorted by name, so no two
// bodies with different members share a digest and member order does not matter.
func linearDigest(members map[string]json.RawMessage) string {
	names := make([]string, 0, len(members))
	for name := range members {
		if name != linearTimestampField {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	h := sha256.New()
	var n [8]byte
	write := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	for _, name := range names {
		write([]byte(name))
		write(members[name])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

var errNoLinearTimestamp = errors.New("no webhookTimestamp")

// linearTimestamp returns the body's members and its webhookTimestamp member exactly as
// written, for CheckTimestamp to read as Unix milliseconds (digits only). The body must
// be one JSON object without duplicate keys, so the value checked is the one every JSON
// reader of the body sees.
func linearTimestamp(body []byte) (map[string]json.RawMessage, string, error) {
	members, err := decodeObject(body, false)
	if err != nil {
		return nil, "", err
	}
	raw, ok := members[linearTimestampField]
	if !ok || isNull(raw) {
		return nil, "", errNoLinearTimestamp
	}
	return members, string(raw), nil
}

// linearSample is a data-change event: e.Type is Linear's type and action joined by
// the last dot ("Issue.create"). Its id joins the type, action, entity and createdAt
// (the event's own time, to the millisecond).
func linearSample(e SampleEvent) (Delivery, error) {
	i := strings.LastIndexByte(e.Type, '.')
	if i <= 0 || i == len(e.Type)-1 {
		return Delivery{}, fmt.Errorf("a Linear event type is <type>.<action> (e.g. Issue.create), got %q", e.Type)
	}
	return jsonDelivery(map[string]any{
		"type": e.Type[:i], "action": e.Type[i+1:], "createdAt": rfc3339(e.Time),
		"data":               map[string]any{"id": e.EntityKey},
		"webhookId":          e.ID,
		linearTimestampField: e.Time.UnixMilli(),
	})
}

// linearSigner signs the body as is: its webhookTimestamp is part of it (the sample
// writes the time it is signed at).
func linearSigner(_ v1alpha1.ProviderSpec, secret string, d Delivery) (Delivery, error) {
	return signWithScheme(*bodyScheme(HeaderLinearSignature, "", v1alpha1.EncodingHex), sha256.New, v1alpha1.KeyRaw, secret, d)
}
