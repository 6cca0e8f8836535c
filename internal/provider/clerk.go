package provider

import "github.com/hookkeeper/hookkeeper/api/v1alpha1"

// ProviderClerk is Clerk, whose webhooks Svix delivers.
const ProviderClerk v1alpha1.ProviderType = "Clerk"

// Clerk sends its webhooks through Svix (Clerk docs, "Webhooks overview" and the
// verifyWebhook() reference): the Standard Webhooks scheme under the svix-* header
// names, HMAC-SHA256 over `{svix-id}.{svix-timestamp}.{body}`, base64 `v1,` entries in
// svix-signature, and a `whsec_` signing secret.
// svixDelivered verifies and signs it, and fills in its id preset and the doc of the
// scheme; the rest is its own.
func init() {
	register(svixDelivered(Provider{
		Type: ProviderClerk,
		Preset: Preset{
			Type:      `body.type`,
			EntityKey: `body.data.id`,
			// Clerk's timestamp is Unix milliseconds.
			OccurredAt: `int(body.timestamp) / 1000`,
		},
		Sample: clerkSample,
		Doc:    Doc{Key: "the endpoint's signing secret, `whsec_…`"},
	}))
}

// clerkSample is an event whose svix-id is the event id.
func clerkSample(e SampleEvent) (Delivery, error) {
	return signedIDDelivery(e.ID, map[string]any{
		"type": e.Type, "object": "event", "timestamp": e.Time.UnixMilli(), "data": map[string]any{"id": e.EntityKey},
	})
}
