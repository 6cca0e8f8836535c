package provider

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// ProviderDiscord is the spec.provider.type of Discord webhook events (the app's Webhook
// Events URL, not its Interactions endpoint).
const ProviderDiscord v1alpha1.ProviderType = "Discord"

// Discord signs X-Signature-Timestamp (Unix seconds) followed by the raw body with the
// application's Ed25519 key and sends the signature in X-Signature-Ed25519 as hex; it
// is verified with the application's public key from the developer portal, stored as
// hex (Discord docs, "Webhook Events", section "Validating Security Request Headers",
// which refers to "Interactions", "Setting Up an Endpoint"). The body carries no event
// id.
//
// Saving the Webhook Events URL sends a signed PING (body type 0), to be answered 204
// with an empty body. Discord asks for 204 for events too (section "Responding to
// Events").
func init() {
	register(Provider{
		Type: ProviderDiscord,
		Scheme: &signature.Scheme{
			HeaderSets: []signature.HeaderSet{{Signature: "X-Signature-Ed25519", Timestamp: "X-Signature-Timestamp"}},
			Encoding:   v1alpha1.EncodingHex,
			Template:   signature.MustTemplate("{timestamp}{body}"),
		},
		PublicKeyEncoding: v1alpha1.PublicKeyHex,
		Preset: Preset{
			// No event id is sent: a redelivered body is a duplicate by its digest.
			ID:   `signed.digest`,
			Type: `body.event.type`,
			// The user (APPLICATION_AUTHORIZED and _DEAUTHORIZED carry data.user,
			// ENTITLEMENT_CREATE data.user_id), else the object of the event (a message).
			EntityKey: `body.event.data.?user.?id.orValue(body.event.data.?user_id.orValue(body.event.data.id))`,
			// Discord writes ISO 8601 in UTC, usually without an offset
			// ("2024-10-18T14:42:53.064834"); RFC 3339 needs one.
			OccurredAt: `body.event.timestamp.matches('(Z|z|[+-][0-9]{2}:[0-9]{2})$') ? ` +
				`body.event.timestamp : body.event.timestamp + 'Z'`,
		},
		Ack:       Response{Status: http.StatusNoContent, Body: []byte{}},
		Handshake: discordHandshake,
		Sample:    discordSample,
		Doc: Doc{
			Scheme:    "Ed25519 hex in `X-Signature-Ed25519`",
			Signed:    "`X-Signature-Timestamp` and the body, concatenated",
			Timestamp: "`X-Signature-Timestamp`",
			Handshake: "`PING` (`type` 0): answered 204",
			Key:       "the application's public key (hex)",
		},
	})
}

// discordHandshake answers a verified PING: a body whose top-level "type" member (the
// exact key, as CEL reads it) is the number 0.
func discordHandshake(v *signature.Verified, _ http.Header) (Response, bool) {
	docs, err := v.Documents()
	if err != nil || len(docs) != 1 {
		return Response{}, false
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(docs[0], &members) != nil || !bytes.Equal(bytes.TrimSpace(members["type"]), []byte("0")) {
		return Response{}, false
	}
	return Response{Status: http.StatusNoContent, ContentType: "application/json"}, true
}

// discordSample is a webhook event (type 1) whose data's id is the entity key.
func discordSample(e SampleEvent) (Delivery, error) {
	return jsonDelivery(map[string]any{
		"version": 1, "type": 1,
		"event": map[string]any{
			"type": e.Type, "timestamp": rfc3339(e.Time),
			"data": map[string]any{"id": e.EntityKey},
		},
		testIDField: e.ID,
	})
}
