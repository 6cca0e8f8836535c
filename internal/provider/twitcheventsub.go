package provider

import (
	"net/http"

	"github.com/hookkeeper/hookkeeper/api/v1alpha1"
	"github.com/hookkeeper/hookkeeper/internal/signature"
)

// ProviderTwitchEventSub is the spec.provider.type of Twitch EventSub (webhook
// transport).
const ProviderTwitchEventSub v1alpha1.ProviderType = "TwitchEventSub"

// Twitch EventSub signs the concatenation, without separators, of
// Twitch-Eventsub-Message-Id, Twitch-Eventsub-Message-Timestamp (RFC 3339 with
// nanoseconds, signed as sent) and the raw body with HMAC-SHA256 under the secret given
// when the subscription was created, and sends
// `Twitch-Eventsub-Message-Signature: sha256=<hex>` (Twitch docs, "Handling Webhook
// Events", section "Verifying the event message"). The message id is signed, so it is
// the event id; Twitch-Eventsub-Message-Type, -Retry and -Subscription-* are not
// signed (the body says the same things).
//
// Creating a subscription sends a signed webhook_callback_verification message whose
// body carries a challenge; the answer is the raw challenge as text/plain with 200. A
// revocation message (a body with a subscription but no event) is recorded as an event
// of type "revocation.<status>".
func init() {
	register(fixedHMAC(v1alpha1.HMACSHA256, &signature.Scheme{
		HeaderSets: []signature.HeaderSet{{
			Signature: "Twitch-Eventsub-Message-Signature",
			Timestamp: "Twitch-Eventsub-Message-Timestamp",
			ID:        "Twitch-Eventsub-Message-Id",
		}},
		Prefix:          "sha256=",
		Encoding:        v1alpha1.EncodingHex,
		TimestampFormat: v1alpha1.TimestampRFC3339,
		Template:        signature.MustTemplate("{id}{timestamp}{body}"),
	}, Provider{
		Type: ProviderTwitchEventSub,
		Preset: Preset{
			// Twitch resends a message under the same id, so a retry is a duplicate.
			ID: `signed.id`,
			Type: `has(body.event) ? body.subscription.type : ` +
				`"revocation." + body.subscription.status`,
			// The broadcaster where the event or the subscription names one, else the
			// subscription.
			EntityKey: `body.?event.?broadcaster_user_id.orValue(` +
				`body.subscription.?condition.?broadcaster_user_id.orValue(body.subscription.id))`,
			// When Twitch sent the message (signed, within the tolerance); event times
			// differ per subscription type (started_at, followed_at, ...).
			OccurredAt: `signed.timestamp`,
		},
		Handshake: twitchEventSubHandshake,
		Sample:    twitchEventSubSample,
		Doc: Doc{
			Signed:    "`Twitch-Eventsub-Message-Id`, `Twitch-Eventsub-Message-Timestamp` and the body, concatenated",
			Timestamp: "`Twitch-Eventsub-Message-Timestamp` (RFC 3339)",
			Handshake: "`webhook_callback_verification`: the `challenge` is echoed as text/plain",
			Key:       "the subscription's `secret` (raw)",
			Source:    "[Twitch EventSub](#twitch-eventsub)",
		},
	}))
}

// twitchEventSubHandshake answers a verified webhook_callback_verification message. It
// is recognised by the signed body (a challenge string), not by the unsigned
// Twitch-Eventsub-Message-Type header.
func twitchEventSubHandshake(v *signature.Verified, _ http.Header) (Response, bool) {
	var req struct {
		Challenge *string `json:"challenge"`
	}
	if !decodeDocument(v, &req) || req.Challenge == nil || *req.Challenge == "" {
		return Response{}, false
	}
	return Response{Status: http.StatusOK, ContentType: "text/plain", Body: []byte(*req.Challenge)}, true
}

// twitchEventSubSample is a notification of subscription type e.Type for the
// broadcaster the entity key names; its message id is the event id.
func twitchEventSubSample(e SampleEvent) (Delivery, error) {
	return signedIDDelivery(e.ID, map[string]any{
		"subscription": map[string]any{
			"id": e.ID, "type": e.Type, "version": "1", "status": "enabled",
			"condition": map[string]any{"broadcaster_user_id": e.EntityKey},
		},
		"event": map[string]any{"broadcaster_user_id": e.EntityKey},
	}, "Twitch-Eventsub-Message-Type", "notification")
}
