package provider

import (
	"encoding/hex"
	"net/http"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// ProviderZoom is the spec.provider.type of Zoom.
const ProviderZoom v1alpha1.ProviderType = "Zoom"

// Zoom signs `v0:{x-zm-request-timestamp}:{body}` with HMAC-SHA256 under the event
// subscription's Secret Token and sends `x-zm-signature: v0=<hex>` (Zoom docs, "Using
// webhooks", sections "Verify webhook events" and "Validate your webhook endpoint").
// The timestamp header is Unix seconds. Zoom's body carries no event id: event,
// event_ts and payload are signed, x-zm-trackingid is not.
//
// Adding or changing the endpoint URL, and every 72 hours after, Zoom sends a signed
// endpoint.url_validation event with payload.plainToken; the answer is
// {"plainToken": ..., "encryptedToken": hex(HMAC-SHA256(secret token, plainToken))},
// computed with the key that verified the request.
func init() {
	register(slackStyle("x-zm-signature", "x-zm-request-timestamp", Provider{
		Type: ProviderZoom,
		Preset: Preset{
			// Zoom sends no event id, so the id is the digest of the signed body: a
			// redelivered body is a duplicate, and so is a replay under another
			// x-zm-trackingid (unsigned). Distinct events differ in event_ts or payload.
			ID:   `signed.digest`,
			Type: `body.event`,
			// The meeting or webinar instance (uuid) where there is one, else the object
			// id (a user, a recording's meeting, ...).
			EntityKey:  `body.payload.object.?uuid.orValue(body.payload.object.id)`,
			OccurredAt: `int(body.event_ts) / 1000`,
		},
		Handshake: zoomHandshake,
		Sample:    zoomSample,
		Doc: Doc{
			Handshake: "`endpoint.url_validation`: answers `plainToken` and `encryptedToken` (HMAC-SHA256 of it, hex)",
			Key:       "the event subscription's Secret Token (raw)",
		},
	}))
}

// zoomHandshake answers a verified endpoint.url_validation request. The encryptedToken
// is the HMAC of plainToken under the very key that verified the request, so it proves
// knowledge of the secret only to a request that already proved it to us; an unsigned
// or badly signed validation never reaches here (the receiver answers 401).
func zoomHandshake(v *signature.Verified, _ http.Header) (Response, bool) {
	var req struct {
		Event   string `json:"event"`
		Payload struct {
			PlainToken string `json:"plainToken"`
		} `json:"payload"`
	}
	if !decodeDocument(v, &req) || req.Event != "endpoint.url_validation" || req.Payload.PlainToken == "" {
		return Response{}, false
	}
	mac, ok := v.MAC([]byte(req.Payload.PlainToken))
	if !ok {
		return Response{}, false
	}
	return jsonResponse(map[string]string{
		"plainToken":     req.Payload.PlainToken,
		"encryptedToken": hex.EncodeToString(mac),
	})
}

func zoomSample(e SampleEvent) (Delivery, error) {
	return jsonDelivery(map[string]any{
		"event": e.Type, "event_ts": e.Time.UnixMilli(),
		"payload": map[string]any{"object": map[string]any{"uuid": e.EntityKey, "id": e.ID}},
	})
}
