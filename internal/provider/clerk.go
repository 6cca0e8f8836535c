package provider

import "github.com/hookkeeper/hookkeeper/api/v1alpha1"

// ProviderClerk is Clerk, whose webhooks Svix delivers.
const ProviderClerk v1alpha1.ProviderType = "Clerk"

// Clerk sends its webhooks through Svix (Clerk docs, "Webhooks overview" and the
// verifyWebhook() reference): the Standard Webhooks scheme under the svix-* header
// names, HMAC-SHA256 over `{svix-id}.{svix-timestamp}.{body}`, base64 `v1,` entries in
// svix-signature, and a `whsec_` signing secret.
// It is verified and signed by svixDelivered; only the presets differ.
func init() {
	register(svixDelivered(Provider{
		Type: ProviderClerk,
		Preset: Preset{
			// svix-id is signed and stays the same when Svix retries a message.
			ID:        `signed.id`,
			Type:      `body.type`,
			EntityKey: `body.data.id`,
			// Clerk's timestamp is Unix milliseconds.
			OccurredAt: `int(body.timestamp) / 1000`,
		},
		Sample: clerkSample,
		Doc: Doc{
			Scheme:    "HMAC-SHA256 base64 in `svix-signature: v1,…` (Standard Webhooks via Svix)",
			Signed:    "`svix-id`, `svix-timestamp` and the body (or the `webhook-*` set)",
			Timestamp: "`svix-timestamp`",
			Key:       "the endpoint's signing secret, `whsec_…`",
			Source:    "[Clerk](#clerk)",
		},
	}))
}

// clerkSample is an event whose svix-id is the event id.
func clerkSample(e SampleEvent) (Delivery, error) {
	return signedIDDelivery(e.ID, map[string]any{
		"type": e.Type, "object": "event", "timestamp": e.Time.UnixMilli(), "data": map[string]any{"id": e.EntityKey},
	})
}
